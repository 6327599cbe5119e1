"""benchmarks/rl_throughput.py's TRL side: the word-level tokenizer gives TRL exactly the toy's token ids, and
one real GRPOTrainer step runs the configuration the benchmark claims (G, batch, fixed completion length, lr,
KL coefficient), read back from the trainer and its generated completions."""

import importlib.util
import pathlib

import jax
import pytest

pytest.importorskip("trl")

from core.lm import data as lm_data  # noqa: E402
from core.lm import model as model_lib  # noqa: E402
from core.lm import weights as weights_lib  # noqa: E402
from core.rl.toy import SymbolTokenizer  # noqa: E402

SCRIPT = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "rl_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rl_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tokenizer_gives_the_toy_ids(bench):
    tok = bench.symbol_tokenizer(12)
    prompts, answers = bench.tasks()
    sym = SymbolTokenizer()
    assert tok([sym.decode(p) for p in prompts])["input_ids"] == prompts
    assert tok([sym.decode(a) for a in answers])["input_ids"] == answers
    assert tok("11 1 10 3")["input_ids"] == [11, 1, 10, 3]  # the special "1" does not split "11"
    # TRL decodes completions with skip_special_tokens; our env sees the raw ids: both reduce to the same text
    ids = [9, lm_data.EOS, 11, lm_data.PAD, lm_data.BOS, 4]
    assert tok.decode(ids, skip_special_tokens=True) == bench.answer_text(sym.decode(ids)) == "9 11 4"


def test_one_trl_step_runs_the_claimed_configuration(bench, tmp_path):
    model = bench.toy_config().model
    _, params = model_lib.init(model, jax.random.key(0))
    weights_lib.save_hf(tmp_path / "model", model, params)
    out = bench.worker_trl(str(tmp_path / "model"), 0, 1, str(tmp_path / "trl"))
    config = bench.rl_config()
    length = config.rollout.max_new_tokens
    rows = config.prompts_per_step * config.rollout.group_size
    assert out["setup"] == {
        "group_size": config.rollout.group_size, "prompts_per_step": config.prompts_per_step, "rows_per_step": rows,
        "completion_tokens_min": length, "completion_tokens_max": length, "lr": config.optimizer.lr,
        "beta": config.loss.kl_coef, "clip": [config.loss.clip_low, config.loss.clip_low],
        "temperature": config.rollout.temperature, "updates_per_rollout_batch": 1,
        "loss_normalisation": config.loss.aggregation, "num_params": sum(x.size for x in jax.tree.leaves(params))}
    assert out["tokens_per_step"] == [rows * length]
    assert len(out["step_seconds"]) == 1
    assert 0 < out["rollout_seconds"][0] + out["update_seconds"][0] < out["step_seconds"][0]
