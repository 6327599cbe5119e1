"""The OpenAI-compatible client against a stub HTTP server on loopback: reasoning-model parameters, retries
with backoff, bounded concurrency, the prompt-hash cache, and `iclr26 cf eval` end to end."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rl_tools.counterfactuals import cli, generate, harness


class Stub:
    """A chat-completions stub: records request bodies, fails the first `fail[prompt]` calls of a prompt with
    `status`, answers `{len(prompt) % 5}` after `delay` seconds, and tracks the largest number in flight."""

    def __init__(self, fail=None, status=429, delay=0.0, answer=None):
        self.bodies, self.fail, self.status, self.delay = [], dict(fail or {}), status, delay
        self.answer = answer or (lambda p: "{" + str(len(p) % 5) + "}")
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])).decode())
                prompt = body["messages"][-1]["content"]
                with stub.lock:
                    stub.bodies.append(body)
                    stub.in_flight += 1
                    stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
                    failing = stub.fail.get(prompt, 0) > 0
                    if failing:
                        stub.fail[prompt] -= 1
                time.sleep(stub.delay)
                with stub.lock:
                    stub.in_flight -= 1
                if failing:
                    payload, code = {"error": {"message": "slow down"}}, stub.status
                else:
                    payload = {"choices": [{"index": 0, "message": {"role": "assistant",
                                                                     "content": stub.answer(prompt)}}]}
                    code = 200
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_factory():
    made = []

    def make(**kw):
        made.append(Stub(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_reasoning_models_get_max_completion_tokens_and_no_temperature(stub_factory):
    stub = stub_factory()
    r = harness.OpenAIChatAdapter(stub.url, "o4-mini", max_tokens=512)
    c = harness.OpenAIChatAdapter(stub.url, "Qwen2.5-7B-Instruct", max_tokens=64)
    forced = harness.OpenAIChatAdapter(stub.url, "my-r1-distill", reasoning=True)
    assert r.complete(["a"]) == ["{1}"] and c.complete(["a"]) == ["{1}"] and forced.complete(["b"]) == ["{1}"]
    b_r, b_c, b_f = stub.bodies
    assert b_r["max_completion_tokens"] == 512 and "temperature" not in b_r and "max_tokens" not in b_r
    assert b_c["max_tokens"] == 64 and b_c["temperature"] == 0.0 and "max_completion_tokens" not in b_c
    assert "temperature" not in b_f and "max_completion_tokens" in b_f


def test_retries_with_exponential_backoff_then_success_and_final_errors(stub_factory):
    stub = stub_factory(fail={"p": 2, "q": 10}, status=503)
    waits = []
    ad = harness.OpenAIChatAdapter(stub.url, "m", retries=3, backoff=0.5, sleep=waits.append, workers=1)
    assert ad.complete(["p"]) == ["{1}"]
    assert waits == [0.5, 1.0] and ad.requests == 3 and not ad.errors
    waits.clear()
    assert ad.complete(["q"]) == [None]  # 4 attempts, all 503
    assert waits == [0.5, 1.0, 2.0] and len(ad.errors) == 1 and "503" in ad.errors[0]
    # a client error (400) is final: no retry
    bad = stub_factory(fail={"z": 1}, status=400)
    ad = harness.OpenAIChatAdapter(bad.url, "m", retries=3, sleep=waits.append)
    waits.clear()
    assert ad.complete(["z"]) == [None] and waits == [] and ad.requests == 1


def test_bounded_concurrency(stub_factory):
    stub = stub_factory(delay=0.05)
    ad = harness.OpenAIChatAdapter(stub.url, "m", workers=3)
    out = ad.complete([f"prompt {i}" for i in range(12)])
    assert out == ["{" + str(len(f"prompt {i}") % 5) + "}" for i in range(12)]
    assert 2 <= stub.max_in_flight <= 3


def test_cache_by_prompt_hash_in_memory_and_on_disk(stub_factory, tmp_path):
    stub = stub_factory()
    path = tmp_path / "cache.jsonl"
    ad = harness.OpenAIChatAdapter(stub.url, "m", cache_path=str(path))
    assert ad.complete(["a", "bb", "a"]) == ["{1}", "{2}", "{1}"]
    first = len(stub.bodies)
    assert first in (2, 3)  # the two "a" may race before the first answer is cached
    assert ad.complete(["a", "bb"]) == ["{1}", "{2}"] and len(stub.bodies) == first
    again = harness.OpenAIChatAdapter(stub.url, "m", cache_path=str(path))  # a rerun reads the file
    assert again.complete(["bb", "ccc"]) == ["{2}", "{3}"] and len(stub.bodies) == first + 1
    other = harness.OpenAIChatAdapter(stub.url, "m", cache_path=str(path), max_tokens=99)  # other params: miss
    other.complete(["bb"])
    assert len(stub.bodies) == first + 2


def test_cf_eval_cli_prints_the_table_with_chance(stub_factory, tmp_path, capsys):
    items, _ = generate.generate_all({"if_else": 8, "while": 8}, seed=0)
    gold = {}
    from rl_tools.counterfactuals import export
    for its in items.values():
        for it in its:
            for v in ("interventional", "counterfactual"):
                gold[export.question(it, v)] = "{" + ", ".join(map(str, it.answer(v))) + "}"
    # a model that answers interventional questions right and counterfactual ones with the first value only
    stub = stub_factory(answer=lambda p: gold[p] if "in that run" in p else "{" + gold[p][1:].split(",")[0]
                        .strip("}") + "}")
    out = tmp_path / "table.json"
    parser = __import__("argparse").ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    args = parser.parse_args(["cf", "eval", "--endpoint", stub.url, "--model", "stub", "--n", "8", "--splits",
                              "if_else", "while", "--out", str(out), "--workers", "4"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "cf_chance_em" in text and "if_else" in text and "while" in text
    rows = json.loads(out.read_text())["rows"]
    assert [r["split"] for r in rows] == ["if_else", "while"]
    for r in rows:
        assert r["iv_em"] == 1.0 and r["iv_f1"] == 1.0 and r["errors"] == 0
        assert r["cf_em"] < 1.0 and 0 < r["cf_chance_em"] < 1 and r["gap_em"] > 0
    assert len(stub.bodies) == 32
    with pytest.raises(ValueError, match="--splits"):
        cli.cmd_eval(parser.parse_args(["cf", "eval", "--endpoint", stub.url, "--model", "m", "--splits", "nope"]))
    with pytest.raises(ValueError, match="base_url"):
        cli.cmd_eval(parser.parse_args(["cf", "eval", "--endpoint", "localhost:1", "--model", "m"]))
