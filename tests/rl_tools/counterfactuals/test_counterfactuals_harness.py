"""Harness: adapters, per-split scoring with intervals, and the HTTP adapter end to end on a loopback server."""

import math

import jax
import pytest

from core.lm import model as model_lib
from core.lm.configs import LMConfig
from rl_tools.counterfactuals import data, generate, harness, server
from rl_tools.counterfactuals.configs import VOCAB


class Oracle:
    """Answers from a table (prompt -> text): the gold set, or the prior set (a model that skips abduction)."""

    name = "oracle"

    def __init__(self, table):
        self.table = table

    def complete(self, prompts):
        return [self.table.get(p) for p in prompts]


@pytest.fixture(scope="module")
def items():
    return generate.generate_all({"if_else": 60, "while": 40}, seed=5)[0]


def _table(items, variant, fn):
    return {data.prompt_text(it, v): fn(it, v) for its in items.values() for it in its for v in (variant,)}


def test_gold_and_abduction_skipping_adapters(items):
    gold = Oracle({**_table(items, "counterfactual", lambda it, v: "{" + ", ".join(map(str, it.answer(v))) + "}"),
                   **_table(items, "interventional", lambda it, v: f"{it.answer(v)[0]}")})
    res = harness.evaluate(items, gold, prompt=data.prompt_text)
    assert all(r["em"] == 1.0 and r["f1"] == 1.0 and r["errors"] == 0 for r in res["rows"])
    # answering the prior set (ignoring the observation) never matches: abduction-irrelevant items are filtered
    prior = Oracle(_table(items, "counterfactual", lambda it, v: str(list(it.prior))))
    res = harness.evaluate(items, prior, variants=("counterfactual",), prompt=data.prompt_text)
    assert all(r["em"] == 0.0 and 0 < r["f1"] < 1 for r in res["rows"])
    none = harness.evaluate(items, Oracle({}), variants=("interventional",), prompt=data.prompt_text)
    assert all(r["errors"] == r["n"] and r["unparsed"] == 1.0 for r in none["rows"])


def test_intervals_and_gaps():
    lo, hi = harness.wilson(8, 10)  # statsmodels proportion_confint(8, 10, method="wilson")
    assert lo == pytest.approx(0.49016, abs=1e-4) and hi == pytest.approx(0.94331, abs=1e-4)
    assert harness.wilson(0, 0) == (0.0, 1.0)
    lo, hi = harness.mean_ci([0.0, 1.0, 0.5, 0.5])
    half = 1.96 * math.sqrt(1 / 6) / 2
    assert lo == pytest.approx(0.5 - half) and hi == pytest.approx(min(1.0, 0.5 + half))
    rows = [{"split": "a", "variant": "interventional", "em": 0.9}, {"split": "a", "variant": "counterfactual",
                                                                     "em": 0.4}]
    assert harness.gaps(rows) == {"a": pytest.approx(0.5)}
    with pytest.raises(ValueError, match="variant='nope'"):
        harness.evaluate([], Oracle({}), variants=("nope",))
    with pytest.raises(ValueError, match="base_url"):
        harness.OpenAIChatAdapter("127.0.0.1:8000", "m")


def test_http_adapter_100_items_end_to_end_against_loopback_server():
    its = generate.generate_all({"if_else": 60, "multi_r": 40}, seed=11)[0]
    config = LMConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=16, tie_word_embeddings=True)
    graphdef, params = model_lib.init(config, jax.random.key(0))
    lm = harness.LMAdapter(graphdef, params, data.CompactTokenizer(), max_new_tokens=6, batch_size=1, bucket=128)
    srv, _ = server.serve(lm, port=0)
    try:
        host, port = srv.server_address
        assert host == "127.0.0.1"
        http = harness.OpenAIChatAdapter(f"http://{host}:{port}/v1", "cf-small", workers=4)
        via_http = harness.evaluate(its, http, prompt=data.prompt_text, keep_predictions=True)
    finally:
        srv.shutdown()
        srv.server_close()
    assert not http.errors
    assert sum(r["n"] for r in via_http["rows"]) == 200  # 100 items x (interventional, counterfactual)
    assert all(r["errors"] == 0 for r in via_http["rows"])
    direct = harness.evaluate(its, lm, prompt=data.prompt_text, keep_predictions=True)
    assert [p["completion"] for p in via_http["predictions"]] == [p["completion"] for p in direct["predictions"]]
    assert via_http["rows"] == direct["rows"]


def test_http_adapter_reports_unreachable_server():
    waits = []
    http = harness.OpenAIChatAdapter("http://127.0.0.1:9/v1", "m", timeout=2, retries=2, sleep=waits.append)
    assert http.complete(["x"]) == [None] and len(http.errors) == 1
    assert waits == [1.0, 2.0] and http.requests == 3  # a refused connection is retried with backoff
