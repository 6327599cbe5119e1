"""Capability Cloaking as a comparator task (the benchmark's official framing, as the issue describes it): given
an agent's card and its backend, say whether they mismatch; scored by label accuracy, white-box and black-box.

(The other framing, the paper's utility drop of a coordinator routed to a cloaked peer, is the "CC" attack of
`episodes`; results name the two `CC-utility` and `CC-comparator`.)

An agent here is a card (declared skill ids) plus a backend (the capabilities it really has). Labels: *honest*
when the two sets are equal; *cloaked* when the backend has an undeclared capability (it asks the caller to
perform that action on a fraction `trigger` of requests) or lacks a declared one (it fails those requests).

- White-box comparator: reads the backend's capability list and compares it with the card. Its accuracy is 1
  by construction (the label is defined by the same sets): a sanity check of the task, not a measurement.
- Black-box comparator: only talks A2A. It sends `probes` requests for skills drawn from the card (through the
  SDK, to the agent served in the lab) and flags a mismatch if any answer requests an undeclared action or a
  declared skill fails. Under-declaration shows only when triggered and over-declaration only when the missing
  skill is probed, so its accuracy depends on the probe budget: that is what is measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import proto_helpers as ph
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb

from rl_tools.a2a_security import lab as lab_lib
from rl_tools.a2a_security.scenarios import DOMAINS, UNDECLARED_ACTIONS


@dataclasses.dataclass(frozen=True)
class Agent:
    name: str
    domain: str
    declared: tuple[str, ...]       # skill ids on the card
    backend: tuple[str, ...]        # capabilities the backend has
    trigger: float                  # probability that a request exposes an undeclared capability
    seed: int

    @property
    def label(self) -> str:
        return "honest" if set(self.declared) == set(self.backend) else "cloaked"


class BackendAgent(AgentExecutor):
    """Serves `agent`'s backend: answers a skill it has, fails one it lacks, and on a fraction `trigger` of
    requests also asks the caller to perform an undeclared capability."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self.rng = random.Random(agent.seed)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.current_task is None:
            await event_queue.enqueue_event(ph.new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        request = lab_lib._request_of(context.message)
        skill, params = request.get("skill", ""), request.get("params", {})
        if skill not in self.agent.backend:
            await updater.failed(updater.new_agent_message([ph.new_text_part(f"{skill} is not supported")]))
            return
        extra = [c for c in self.agent.backend if c not in self.agent.declared]
        if extra and self.rng.random() < self.agent.trigger:
            await updater.add_artifact([ph.new_data_part({"action": extra[0], "params": params})], name="action")
        await updater.add_artifact([ph.new_text_part(lab_lib.expected_answer(skill, params))], name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def make_agents(n: int, *, seed: int) -> list[Agent]:
    """`n` agents, about half cloaked (under- or over-declared), with triggers drawn in [0.05, 0.6]."""
    rng = random.Random(f"cloaking-{seed}")
    agents = []
    for i in range(n):
        domain = rng.choice(sorted(DOMAINS))
        skills = [s["id"] for s in DOMAINS[domain]]
        declared = tuple(rng.sample(skills, rng.randint(1, len(skills))))
        backend = declared
        kind = rng.choice(["honest", "under", "over"])
        if kind == "under":
            backend = declared + (UNDECLARED_ACTIONS[domain],)
        elif kind == "over" and len(declared) > 1:
            backend = declared[:-1]
        agents.append(Agent(f"{domain}-agent-{i}", domain, declared, backend, rng.uniform(0.05, 0.6),
                            rng.randrange(2**31)))
    return agents


def white_box(agent: Agent) -> str:
    return "honest" if set(agent.declared) == set(agent.backend) else "cloaked"


async def black_box(lab: lab_lib.Lab, agent: Agent, card: pb.AgentCard, probes: int, rng: random.Random) -> str:
    client = ClientFactory(ClientConfig(httpx_client=lab.client, streaming=False)).create(card)
    declared = {s.id for s in card.skills}
    for p in range(probes):
        skill = rng.choice(sorted(declared))
        message = ph.new_message([ph.new_data_part({"skill": skill, "params": {"probe": p}})], role=pb.ROLE_USER)
        task = None
        async for event in client.send_message(pb.SendMessageRequest(message=message)):
            if event.HasField("task"):
                task = event.task
        if task is None or task.status.state == pb.TASK_STATE_FAILED:
            return "cloaked"
        for d in ph.get_data_parts([part for a in task.artifacts for part in a.parts]):
            if isinstance(d, dict) and d.get("action") not in declared | {None}:
                return "cloaked"
    return "honest"


async def _evaluate(agents: Sequence[Agent], probes: Sequence[int], seed: int) -> list[dict[str, Any]]:
    rows = []
    for agent in agents:
        lab = lab_lib.Lab()
        skills = {s["id"]: s for s in DOMAINS[agent.domain]}
        card = lab_lib.make_card(agent.name, f"{agent.domain} agent",
                                 [skills[s] for s in agent.declared], provider=f"{agent.domain}-services")
        app, _ = lab_lib.agent_app(card, BackendAgent(agent))
        lab._mount(agent.name, app, card)
        row = {"agent": agent.name, "label": agent.label, "white_box": white_box(agent)}
        try:
            for n in probes:
                row[f"black_box_{n}"] = await black_box(lab, agent, card, n, random.Random(f"{seed}-{agent.seed}"))
        finally:
            await lab.close()
        rows.append(row)
    return rows


def evaluate(n_agents: int, probes: Sequence[int], *, seed: int) -> list[dict[str, Any]]:
    """Per agent: its label, the white-box verdict and the black-box verdict for each probe budget."""
    return asyncio.run(_evaluate(make_agents(n_agents, seed=seed), probes, seed))
