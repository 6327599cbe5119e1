"""The LLM answer parser, the prompts, and the OpenAI-compatible oracle against a scripted loopback server."""

import http.server
import json
import threading

import numpy as np
import pytest

from optimization.lgbo import oracles, prompts
from optimization.lgbo.space import Categorical, Continuous, Space

SPACE = Space((Continuous(name="temp", low=20.0, high=100.0), Continuous(name="conc", low=0.0, high=2.0),
               Categorical(name="solvent", options=("water", "ethanol", "dmso", "acetone"))))


def test_parse_region_in_natural_units():
    text = "Mechanism: higher temperature helps.\n[region, [[40, 0.5, ethanol], [60, 1.5, dmso]], 0.8]"
    r = prompts.parse_answer(text, SPACE)
    np.testing.assert_allclose(r.lb, [0.25, 0.25, 0.25])
    np.testing.assert_allclose(r.ub, [0.5, 0.75, 0.75])
    assert float(r.confidence) == 0.8 and not bool(r.is_point)


def test_parse_point_takes_the_last_expression_and_clamps():
    text = ("Earlier I thought [region, [[20, 0, water], [30, 1, water]], 0.6] but now:\n"
            "['point', [80, 2.5, 'acetone'], 1.3]")
    r = prompts.parse_answer(text, SPACE)
    np.testing.assert_allclose(r.lb, [0.75, 1.0, 0.875])  # conc 2.5 clipped into the bounds
    np.testing.assert_array_equal(r.lb, r.ub)
    assert bool(r.is_point) and float(r.confidence) == pytest.approx(1 - 1e-3)


@pytest.mark.parametrize("text", [
    "I have no idea.",
    "[region, [[40, 0.5], [60, 1.5]], 0.8]",  # wrong length
    "[region, [[60, 0.5, water], [40, 1.5, water]], 0.8]",  # lb > ub
    "[point, [50, 1, methanol], 0.7]",  # unknown option
    "[point, [50, 1, water], NaN]",  # confidence not a number
    "[region, [[40, 0.5, water], [60, 1.5, water]], 0.8",  # unbalanced
])
def test_unparseable_answers_raise(text):
    with pytest.raises(prompts.PreferenceParseError):
        prompts.parse_answer(text, SPACE)


def test_prompt_has_evidence_hierarchy_history_and_format():
    msgs = prompts.build_messages(SPACE, [([30.0, 1.0, "water"], 0.2), ([70.0, 0.5, "dmso"], 0.9)], context="A yield.")
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert system.index("Mechanism") < system.index("Trends") < system.index("History")
    assert "Do not centre a region on a past observation" in system and "[region, [[lb_1" in system
    assert user.index("70, 0.5, dmso -> 0.9") < user.index("30, 1, water -> 0.2")  # best first
    assert "A yield." in user and "options ['water', 'ethanol', 'dmso', 'acetone']" in user
    strict = prompts.build_messages(SPACE, [], strict=True)
    assert len(strict) == 3 and "ONE line only" in strict[-1]["content"]


class _Scripted(http.server.BaseHTTPRequestHandler):
    replies: list = []
    requests: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, body))
        content = type(self).replies.pop(0)
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    _Scripted.replies, _Scripted.requests = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_openai_oracle_retries_once_with_strict_prompt(server):
    _Scripted.replies = ["Let me think... the best is somewhere warm.",
                         "[region, [[50, 0, water], [90, 1, water]], 0.7]"]
    oracle = oracles.OpenAIOracle(base_url=server, model="local-llm", temperature=0.2)
    ans = oracle.propose(SPACE, [([30.0, 1.0, "water"], 0.2)], round=0)
    assert ans.region is not None and ans.error is None and len(ans.texts) == 2
    np.testing.assert_allclose(ans.region.lb, [0.375, 0.0, 0.0])
    (path1, body1), (path2, body2) = _Scripted.requests
    assert path1 == path2 == "/v1/chat/completions"
    assert body1["model"] == "local-llm" and body1["temperature"] == 0.2
    assert len(body1["messages"]) == 2 and "ONE line only" in body2["messages"][-1]["content"]
    assert body2["messages"][2] == {"role": "assistant", "content": "Let me think... the best is somewhere warm."}


def test_openai_oracle_falls_back_to_plain_bo(server):
    _Scripted.replies = ["no idea", "still no idea"]
    ans = oracles.OpenAIOracle(base_url=server, model="m").propose(SPACE, [], round=3)
    assert ans.region is None and "plain BO" in ans.error and len(ans.texts) == 2


def test_openai_oracle_unreachable_server_falls_back():
    ans = oracles.OpenAIOracle(base_url="http://127.0.0.1:9", model="m", timeout=2).propose(SPACE, [], round=0)
    assert ans.region is None and "request failed" in ans.error


def test_simulated_oracles():
    opt, poor = [0.2, 0.3, 0.1], [0.9, 0.9, 0.9]
    aligned = oracles.SimulatedOracle(mode="aligned", optimum_u=opt, poor_u=poor, box_e=16, jitter=0.25)
    r = aligned.propose(SPACE, [], round=0).region
    side = (16 / 512) ** (1 / 3)
    np.testing.assert_allclose(np.asarray(r.ub) - np.asarray(r.lb), side, rtol=1e-12)
    assert np.all((np.asarray(r.lb) <= opt) & (np.asarray(opt) <= np.asarray(r.ub)))  # jitter < side / 2
    again = aligned.propose(SPACE, [], round=0).region
    np.testing.assert_array_equal(r.lb, again.lb)  # deterministic per round
    mis = oracles.SimulatedOracle(mode="misaligned", optimum_u=opt, poor_u=poor).propose(SPACE, [], round=1).region
    assert np.all(np.asarray(mis.lb) > 0.5) and float(mis.confidence) == 0.8
    assert oracles.SimulatedOracle(mode="none", optimum_u=opt, poor_u=poor).propose(SPACE, [], 0).region is None
    with pytest.raises(ValueError, match="mode"):
        oracles.SimulatedOracle(mode="oracle", optimum_u=opt, poor_u=poor)


def test_reference_order_history_newest_first_and_last_reasoning():
    hist = [([30.0, 1.0, "water"], 0.2), ([70.0, 0.5, "dmso"], 0.9), ([50.0, 1.5, "ethanol"], 0.5)]
    user = prompts.build_messages(SPACE, hist, history_order="newest", last_reasoning="Warm  and\nwet.")[1]["content"]
    assert user.index("50, 1.5, ethanol") < user.index("70, 0.5, dmso") < user.index("30, 1, water")
    assert "newest first" in user and "reasoning last round (summary): Warm and wet." in user
    assert "reasoning last round" not in prompts.build_messages(SPACE, hist)[1]["content"]
    with pytest.raises(ValueError, match="history_order"):
        prompts.build_messages(SPACE, hist, history_order="random")
    assert prompts.reasoning_of("I think warm.\n[point, [50, 1, water], 0.7]") == "I think warm."


def test_openai_oracle_carries_last_round_reasoning(server):
    _Scripted.replies = ["Hot solvents dissolve more.\n[region, [[50, 0, water], [90, 1, water]], 0.7]",
                         "[point, [60, 1, water], 0.6]"]
    oracle = oracles.OpenAIOracle(base_url=server, model="m")
    hist = [([30.0, 1.0, "water"], 0.2), ([70.0, 0.5, "dmso"], 0.9)]
    assert oracle.propose(SPACE, hist, round=0).region is not None
    assert oracle.last_reasoning == "Hot solvents dissolve more."
    oracle.propose(SPACE, hist, round=1)
    first, second = (body["messages"][1]["content"] for _, body in _Scripted.requests)
    assert "reasoning last round" not in first
    assert "reasoning last round (summary): Hot solvents dissolve more." in second
    assert second.index("70, 0.5, dmso") < second.index("30, 1, water")      # newest first (reference order)
