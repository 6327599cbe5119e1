"""The judge: the released parse of malformed replies, retries, the rubric prompts, the rule judge and the
OpenAI-compatible backend; the model adapters against a local stub HTTP server, the cache and the constant."""

import base64
import http.server
import io
import json
import threading

import jax
import numpy as np
import pytest
from PIL import Image

from core.config import BadInputError
from core.lm import model as lm_model
from core.lm.configs import LMConfig
from multimodal.indicvision import adapters, judge, prompts


class Stub:
    """A local OpenAI-compatible /chat/completions server: records requests, replies from a queue."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                reply = stub.replies.pop(0) if stub.replies else "0"
                if reply is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def stub():
    servers = []

    def make(replies):
        servers.append(Stub(replies))
        return servers[-1]
    yield make
    for s in servers:
        s.close()


@pytest.mark.parametrize("reply,strict,lenient", [
    ("7", 7.0, 7.0), (" 7.5\n", 7.5, 7.5), ("11", 10.0, 10.0), ("-3", 0.0, 0.0), ("1e1", 10.0, 1.0),
    ("7/10", None, 7.0), ("Score: 8", None, 8.0), ("", None, None), ("eight", None, None), ("nan", None, None),
    ("inf", 10.0, None), (None, None, None)])
def test_parse_of_malformed_judge_replies(reply, strict, lenient):
    assert judge.parse_score(reply) == strict
    assert judge.parse_score(reply, lenient=True) == lenient


def test_retries_until_a_reply_parses_and_gives_up_after_three():
    replies = iter(["seven", "7/10", "6"])
    calls = []
    assert judge.ask_with_retries(lambda p: calls.append(p) or next(replies), "q") == 6.0 and len(calls) == 3
    replies = iter(["x", "y", "z", "9"])
    assert judge.ask_with_retries(lambda p: next(replies), "q") is None
    assert next(replies) == "9"  # the fourth reply was never asked for

    def failing(prompt):
        raise OSError("connection refused")
    assert judge.ask_with_retries(failing, "q") is None


def test_rubric_prompts_carry_question_gold_and_answer():
    short = prompts.judge_prompt("Q?", "gold", "answer", "short")
    assert short.startswith("Rate a vision-language model's answer to a short-answer question")
    assert "Question: Q?\nReference answer: gold\nModel answer: answer\n\n" in short
    adversarial = prompts.judge_prompt("Why?", "no, red", "no, red", "adversarial")
    assert "Give 5 points if the answer says the assumption is wrong" in adversarial
    assert "Model answer: no, red\n" in adversarial
    assert prompts.rubric_kind("short_q2") == "short" and prompts.rubric_kind("adversarial_question") == "adversarial"
    assert prompts.rubric_kind("long_q") == "long"
    with pytest.raises(ValueError, match="rubric 'medium'"):
        prompts.judge_prompt("q", "g", "a", "medium")


def test_rule_judge_scores_by_the_rubric_it_reads():
    rule = judge.RuleJudge()
    assert rule.score(prompts.judge_prompt("q", "लाल", "लाल", "short")) == 10.0
    assert rule.score(prompts.judge_prompt("q", "abcd", "abce", "long")) == 7.5
    assert rule.score(prompts.judge_prompt("q", "नहीं, लाल वृत्त", "नहीं, लाल वृत्त", "adversarial")) == 10.0
    assert rule.score(prompts.judge_prompt("q", "नहीं, लाल वृत्त", "लाल वृत्त", "adversarial")) < 5.0
    assert rule.score(prompts.judge_prompt("q", "gold", "  ", "short")) is None
    with pytest.raises(BadInputError, match="rubric prompts"):
        rule.score("rate this answer")


def test_openai_judge_sends_the_released_request_and_retries_malformed_replies(stub, monkeypatch):
    server = stub(["Score: 9", "9/10", "8"])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    gpt = judge.OpenAIJudge(base_url=server.url, retry_delay=0.0)
    assert gpt.score(prompts.judge_prompt("q", "g", "a", "short")) == 8.0
    assert len(server.requests) == 3
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["headers"]["Authorization"] == "Bearer sk-test"
    assert first["body"]["model"] == "gpt-4o" and first["body"]["temperature"] == 0.0
    assert first["body"]["max_tokens"] == 50
    assert first["body"]["messages"] == [{"role": "user", "content": prompts.judge_prompt("q", "g", "a", "short")}]
    server.replies = [None, None, None]  # server errors on every try: unscored
    assert gpt.score("p") is None


def test_lm_judge_generates_and_parses_with_a_core_lm_model():
    config = LMConfig(vocab_size=12, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                      num_kv_heads=1, head_dim=8)
    graphdef, params = lm_model.init(config, jax.random.key(0))
    seen = []
    digits = judge.LMJudge(graphdef, params, encode=lambda s: [1, 2, 3], decode=lambda t: seen.append(t) or "7",
                           max_tokens=3)
    assert digits.score("p") == 7.0 and len(seen) == 1 and len(seen[0]) == 3
    words = judge.LMJudge(graphdef, params, encode=lambda s: [1, 2, 3], decode=lambda t: "good answer",
                          max_tokens=3)
    assert words.score("p") is None and words._calls == 3


def _image(colour=(255, 0, 0)):
    return np.full((8, 8, 3), colour, np.uint8)


def test_endpoint_adapter_sends_the_image_as_a_png_data_url(stub):
    server = stub([" नमस्ते \n"])
    model = adapters.EndpointAdapter(base_url=server.url, model="open-vlm", api_key="k")
    assert model.generate(_image(), "Extract") == "नमस्ते"
    body = server.requests[0]["body"]
    assert body["model"] == "open-vlm" and body["temperature"] == 0.0
    text, image = body["messages"][0]["content"]
    assert text == {"type": "text", "text": "Extract"}
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    np.testing.assert_array_equal(decoded, _image())


def test_cache_answers_each_model_item_once_and_survives_a_restart(stub, tmp_path):
    server = stub(["first", "second"])
    cache = tmp_path / "cache.jsonl"
    model = adapters.CachedAdapter(adapters.EndpointAdapter(base_url=server.url, model="m"), cache)
    keys = [adapters.item_key("ocr", f"id{i}", "text", "Hindi", "p") for i in range(2)]
    assert model.generate_batch([_image(), _image()], ["p", "p"], keys) == ["first", "second"]
    assert model.generate(_image(), "p", key=keys[0]) == "first" and len(server.requests) == 2
    again = adapters.CachedAdapter(adapters.EndpointAdapter(base_url=server.url, model="m"), cache)
    assert again.generate(_image(), "p", key=keys[1]) == "second" and len(server.requests) == 2
    other = adapters.CachedAdapter(adapters.EndpointAdapter(base_url=server.url, model="other"), cache)
    other.generate(_image(), "p", key=keys[1])  # another model: not a cache hit
    assert len(server.requests) == 3


def test_a_failed_call_is_an_error_answer_and_constant_and_specs(stub):
    server = stub([None])
    model = adapters.EndpointAdapter(base_url=server.url, model="m")
    [answer] = adapters.generate_batch(model, [_image()], ["p"], ["k"])
    assert answer.startswith(adapters.ERROR_PREFIX) and "500" in answer
    constant = adapters.ConstantAdapter.most_frequent([("mcq", "Hindi", "A"), ("mcq", "Hindi", "B"),
                                                       ("mcq", "Hindi", "B"), ("mcq", "Tamil", "C")])
    assert constant.generate(_image(), "p", key=adapters.item_key("vqa", "x", "mcq", "Hindi", "p")) == "B"
    assert constant.generate(_image(), "p", key=adapters.item_key("vqa", "x", "mcq", "Tamil", "p")) == "C"
    assert constant.generate(_image(), "p", key="unknown") == ""
    parsed = adapters.from_spec("endpoint:http://localhost:8000/v1#google/gemma-3-27b-it")
    assert parsed.base_url == "http://localhost:8000/v1" and parsed.model == "google/gemma-3-27b-it"
    assert adapters.from_spec("constant:A").generate(_image(), "p") == "A"
    with pytest.raises(BadInputError, match="--model 'gpt'"):
        adapters.from_spec("gpt")


def test_released_prompts_can_be_loaded_from_a_file_and_are_checked(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"ocr": "OCR THIS",
                                "judge_short": "S {question} | {ground_truth} | {predicted_answer}"}))
    try:
        prompts.use_prompts(path)
        assert prompts.ocr_prompt() == "OCR THIS"
        assert prompts.judge_prompt("q", "g", "a", "short") == "S q | g | a"
        assert prompts.judge_prompt("q", "g", "a", "long").startswith("Rate a")  # not given: the default
        with pytest.raises(BadInputError, match="the project's three rubric prompts"):
            judge.read_rubric_prompt(prompts.judge_prompt("q", "g", "a", "short"))  # the rule judge reads ours only
        path.write_text(json.dumps({"vqa_mcq": "{question} {e}"}))
        with pytest.raises(BadInputError, match="prompt 'vqa_mcq' uses a field it does not have"):
            prompts.use_prompts(path)
        path.write_text(json.dumps({"judge": "x"}))
        with pytest.raises(BadInputError, match="prompt key 'judge': expected one of ocr, mmt"):
            prompts.use_prompts(path)
    finally:
        prompts.use_prompts(None)
    assert prompts.ocr_prompt() == prompts.DEFAULT_PROMPTS["ocr"]
