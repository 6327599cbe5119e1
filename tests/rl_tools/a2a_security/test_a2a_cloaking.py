"""Capability Cloaking as a comparator task: labels, the white-box comparator, and a black-box comparator that
only sees what the agent does over A2A."""

import asyncio
import random

from rl_tools.a2a_security import cloaking
from rl_tools.a2a_security import lab as lab_lib
from rl_tools.a2a_security.scenarios import DOMAINS

SKILLS = tuple(s["id"] for s in DOMAINS["finance"])


def _probe(agent, probes):
    async def go():
        lab = lab_lib.Lab()
        card = lab_lib.make_card(agent.name, "finance agent",
                                 [s for s in DOMAINS["finance"] if s["id"] in agent.declared])
        app, _ = lab_lib.agent_app(card, cloaking.BackendAgent(agent))
        lab._mount(agent.name, app, card)
        try:
            return await cloaking.black_box(lab, agent, card, probes, random.Random(0))
        finally:
            await lab.close()
    return asyncio.run(go())


def test_labels_and_white_box():
    honest = cloaking.Agent("a", "finance", SKILLS, SKILLS, 0.5, 1)
    under = cloaking.Agent("b", "finance", SKILLS, SKILLS + ("transfer_funds",), 1.0, 2)
    over = cloaking.Agent("c", "finance", SKILLS, SKILLS[:1], 0.5, 3)
    assert [a.label for a in (honest, under, over)] == ["honest", "cloaked", "cloaked"]
    assert [cloaking.white_box(a) for a in (honest, under, over)] == ["honest", "cloaked", "cloaked"]


def test_black_box_sees_only_behaviour():
    assert _probe(cloaking.Agent("a", "finance", SKILLS, SKILLS, 0.5, 1), 6) == "honest"
    assert _probe(cloaking.Agent("b", "finance", SKILLS, SKILLS + ("transfer_funds",), 1.0, 2), 1) == "cloaked"
    # a cloaked backend that never shows its extra capability is invisible from outside
    assert _probe(cloaking.Agent("d", "finance", SKILLS, SKILLS + ("transfer_funds",), 0.0, 4), 6) == "honest"
    # a declared skill the backend lacks fails when probed
    assert _probe(cloaking.Agent("c", "finance", SKILLS[:1] * 1, (), 0.5, 3), 1) == "cloaked"
