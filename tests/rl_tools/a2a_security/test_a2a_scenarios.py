"""Scenario generation, the attack predicates against the naive and hardened coordinators, and the
LLM selector against a loopback chat-completions server."""

import http.server
import json
import threading

import pytest

from rl_tools.a2a_security import coordinator as co
from rl_tools.a2a_security import scenarios
from rl_tools.a2a_security.llm import LLMSelector


def test_generation_is_seeded_and_exports_jsonl(tmp_path):
    a = scenarios.generate_cases("ATSI", "healthcare", 5, seed=3)
    b = scenarios.generate_cases("ATSI", "healthcare", 5, seed=3)
    assert scenarios.export_jsonl(a, tmp_path / "a.jsonl") == 10
    scenarios.export_jsonl(b, tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert a != scenarios.generate_cases("ATSI", "healthcare", 5, seed=4)
    first = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[0])
    assert set(first) == {"attack", "domain", "skill", "params", "text", "control", "seed", "k", "payload",
                          "written_spoofs"}
    assert [c.control for c in a[:2]] == [False, True]  # every attack case is paired with its control
    with pytest.raises(ValueError, match="attack='XSS': expected one of"):
        scenarios.generate_cases("XSS", "travel", 1, seed=0)


@pytest.mark.parametrize("attack", scenarios.ATTACKS)
def test_naive_falls_and_hardened_holds_without_losing_utility(attack):
    cases = scenarios.generate_cases(attack, "finance", 1, seed=11, k=6)
    naive = scenarios.summarise(scenarios.run_suite(cases, co.NAIVE))
    hardened = scenarios.summarise(scenarios.run_suite(cases, co.HARDENED))
    assert naive["asr"] == 1.0, naive
    assert hardened["asr"] == 0.0, hardened
    assert naive["benign_utility"] == hardened["benign_utility"] == 1.0
    assert hardened["false_positive_rate"] == 0.0


def test_heuristic_selector_prefers_the_matching_skill():
    cards = [scenarios.benign_card("travel", s) for s in scenarios.DOMAINS["travel"]]
    selector = scenarios.HeuristicSelector()
    assert selector.select("Rent a car in Oslo from 2026-03-02 for 3 days", cards) == 2
    assert selector.select("Reserve a hotel room in Lima for 2 nights", cards) == 1


class _ScriptedLLM(http.server.BaseHTTPRequestHandler):
    answers = ["1", "I pick agent 2", "none of them"]
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body["messages"][0]["content"])
        content = type(self).answers[(len(type(self).seen) - 1) % len(type(self).answers)]
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_llm_selector_over_a_loopback_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        selector = LLMSelector(f"http://127.0.0.1:{server.server_address[1]}", "local-model", timeout=5)
        cards = [scenarios.benign_card("travel", s) for s in scenarios.DOMAINS["travel"]]
        query = "Rent a car in Oslo from 2026-03-02 for 3 days"
        assert selector.select(query, cards) == 1
        assert selector.select(query, cards) == 2
        assert selector.select(query, cards) == 2 and selector.fallbacks == 1  # unparseable: heuristic choice
        assert "Request: Rent a car in Oslo" in _ScriptedLLM.seen[0] and "2. travel-rent-car" in _ScriptedLLM.seen[0]
    finally:
        server.shutdown()
    with pytest.raises(ValueError, match="expected an http"):
        LLMSelector("127.0.0.1:8000", "m")
