"""Hostile and malformed input: each gets a clear outcome and the lab stays up."""

import asyncio

from rl_tools.a2a_security import coordinator as co
from rl_tools.a2a_security import lab as lab_lib
from rl_tools.a2a_security import scenarios

SKILL = scenarios.DOMAINS["finance"][0]
PARAMS = {"amount": "1.00", "cur": "EUR", "cur2": "USD", "reference": "REF-9"}


def _run(build, policy=co.HARDENED, then=None):
    async def main():
        lab = lab_lib.Lab()
        urls = build(lab)
        good = lab.add_agent(co.sign_card(scenarios.benign_card("finance", SKILL)))
        coordinator = co.Coordinator(lab, policy, scenarios.HeuristicSelector())
        await coordinator.discover([*urls, good])
        result = await then(coordinator) if then else None
        # the lab is still up: a benign request afterwards is answered correctly
        benign = await coordinator.handle(SKILL["id"], PARAMS, "Convert 1.00 EUR to USD")
        await lab.close()
        return coordinator, result, benign
    return asyncio.run(main())


def _assert_lab_up(benign):
    assert benign.answer == lab_lib.expected_answer(SKILL["id"], PARAMS), benign


def test_card_with_missing_fields_is_rejected_with_the_fields_named():
    coordinator, _, benign = _run(lambda lab: [lab.add_raw_host("broken", {"name": "broken", "version": "1"})],
                                  policy=co.NAIVE)
    (reason,) = coordinator.rejected.values()
    assert "missing required fields" in reason and "supported_interfaces" in reason and "skills" in reason
    assert "broken" not in coordinator.cards
    _assert_lab_up(benign)


def test_bad_signature_is_rejected():
    def build(lab):
        forged = co.sign_card(lab_lib.make_card("forged", "convert money", [SKILL]),
                              key=b"attacker-key-of-32-bytes-or-more!")
        return [lab.add_agent(forged)]
    coordinator, _, benign = _run(build)
    (reason,) = coordinator.rejected.values()
    assert reason.startswith("signature verification failed")
    _assert_lab_up(benign)


def test_oversized_artifact_is_refused():
    def build(lab):
        big = lab_lib.make_card("big", "convert currency amounts between currencies fast", [
            {**SKILL, "description": "convert 1.00 eur to usd converts an amount between currencies"}])
        return [lab.add_agent(co.sign_card(big), lab_lib.Behaviour("oversized", payload="400000"))]

    async def ask(coordinator):
        return await coordinator.handle(SKILL["id"], PARAMS, "Convert 1.00 EUR to USD")
    _, outcome, benign = _run(build, then=ask)
    assert outcome.agent == "big"
    assert outcome.error.startswith("rejected: big's artifacts are 400000 bytes, more than the 256000 allowed")
    _assert_lab_up(benign)  # quarantined by the hardened policy


def test_message_to_an_unknown_task():
    async def resume(coordinator):
        return await coordinator.resume(scenarios.benign_card("finance", SKILL).name, "no-such-task", "hello")
    _, outcome, benign = _run(lambda lab: [], then=resume)
    assert "TaskNotFoundError" in outcome.error and "no-such-task" in outcome.error
    _assert_lab_up(benign)


def test_peer_that_never_answers_times_out():
    policy = co.Policy(name="fast-timeout", request_timeout=0.5, quarantine=True)

    def build(lab):
        silent = lab_lib.make_card("silent", "converts currency", [
            {**SKILL, "description": "convert 1.00 eur to usd converts an amount between currencies"}])
        return [lab.add_agent(co.sign_card(silent), lab_lib.Behaviour("silent"))]

    async def ask(coordinator):
        return await coordinator.handle(SKILL["id"], PARAMS, "Convert 1.00 EUR to USD")
    _, outcome, benign = _run(build, policy=policy, then=ask)
    assert outcome.agent == "silent" and outcome.error == "timeout: silent did not answer within 0.5 s"
    _assert_lab_up(benign)  # the silent peer was quarantined; the next request goes to a peer that answers
