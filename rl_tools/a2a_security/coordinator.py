"""The coordinator under test: discovers peers through the A2A SDK, selects one, sends the task, and acts on
what comes back (delegations, input requests, references, renderable artifacts, action requests).

Its `Policy` switches each safeguard: the naive coordinator follows references, renders artifacts, delegates
without bound, keeps every half-open task and picks a card by skill-match score; the hardened one verifies
card signatures, bounds delegation depth and detects cycles, caps half-open tasks with a TTL, dereferences
only allow-listed hosts, sanitises artifacts, and checks a peer's actions against its declared skills.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import html.parser
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.helpers import proto_helpers as ph
from a2a.types import a2a_pb2 as pb
from a2a.utils import signing
from a2a.utils.errors import A2AError

from rl_tools.a2a_security import lab as lab_lib

LAB_MAX_HOPS = 24  # the lab's own bound on a delegation chain: reaching it stands in for "ran until timeout"
REGISTRY_KEY = b"a2asecbench-lab-registry-signing-key-0001"
REGISTRY_KID = "lab-registry"


def sign_card(card: pb.AgentCard, key: bytes = REGISTRY_KEY, kid: str = REGISTRY_KID) -> pb.AgentCard:
    """Sign `card` (HS256 JWS over its canonical form) with the registry key, through the SDK's signing extra."""
    return signing.create_agent_card_signer(key, {"alg": "HS256", "kid": kid, "typ": "JOSE"})(card)


def registry_verifier(key: bytes = REGISTRY_KEY) -> Callable[[pb.AgentCard], None]:
    return signing.create_signature_verifier(lambda kid, jku: key, algorithms=["HS256"])


@dataclasses.dataclass(frozen=True, kw_only=True)
class Policy:
    name: str
    verify_signatures: bool = False
    max_delegation_depth: int | None = None  # None: unbounded (only the lab's LAB_MAX_HOPS stops it)
    detect_cycles: bool = False
    half_open_cap: int | None = None          # at most this many tasks left in input-required
    half_open_ttl: float | None = None        # seconds a half-open task is kept before it is cancelled
    uri_allowlist: tuple[str, ...] | None = None   # host suffixes that may be dereferenced; None: any
    sanitize_artifacts: bool = False
    enforce_capability_contract: bool = False
    quarantine: bool = False                  # drop a peer that timed out or sent an oversized artifact
    max_input_rounds: int = 2                 # answers given to one task's input requests before leaving it open
    max_artifact_bytes: int = 256_000
    request_timeout: float = 2.0


NAIVE = Policy(name="naive")
HARDENED = Policy(name="hardened", verify_signatures=True, max_delegation_depth=4, detect_cycles=True,
                  half_open_cap=3, half_open_ttl=30.0, uri_allowlist=(f".{lab_lib.LAB_DOMAIN}",),
                  sanitize_artifacts=True, enforce_capability_contract=True, quarantine=True)
POLICIES = {"naive": NAIVE, "hardened": HARDENED}


class Selector(Protocol):
    def select(self, query: str, cards: Sequence[pb.AgentCard]) -> int: ...


@dataclasses.dataclass
class Outcome:
    answer: str | None = None
    agent: str | None = None
    hops: int = 0
    blocked: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    state: str | None = None


REQUIRED_CARD_FIELDS = ("name", "version", "supported_interfaces", "skills")


def missing_card_fields(card: pb.AgentCard) -> list[str]:
    missing = [f for f in REQUIRED_CARD_FIELDS if not getattr(card, f)]
    if card.supported_interfaces and not card.supported_interfaces[0].url:
        missing.append("supported_interfaces[0].url")
    return missing


class _Sanitiser(html.parser.HTMLParser):
    """Rebuilds markup without script-like elements, on* handlers or javascript: URLs."""

    DROP = {"script", "iframe", "object", "embed"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.DROP:
            self.skip += 1
            return
        if self.skip:
            return
        kept = [(k, v) for k, v in attrs if not k.startswith("on")
                and not (v or "").strip().lower().startswith("javascript:") and k != "srcdoc"]
        self.out.append(f"<{tag}" + "".join(f' {k}="{html.escape(v or "")}"' for k, v in kept) + ">")

    def handle_endtag(self, tag):
        if tag in self.DROP:
            self.skip = max(0, self.skip - 1)
        elif not self.skip:
            self.out.append(f"</{tag}>")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(html.escape(data))


def sanitize(markup: str) -> str:
    parser = _Sanitiser()
    parser.feed(markup)
    parser.close()
    return "".join(parser.out)


class Coordinator:
    """Routes requests to peers of a `lab_lib.Lab` under a `Policy`; records every refusal in the outcome."""

    def __init__(self, lab: lab_lib.Lab, policy: Policy, selector: Selector | None = None,
                 verifier: Callable[[pb.AgentCard], None] | None = None):
        self.lab, self.policy, self.selector = lab, policy, selector
        self.cards: dict[str, pb.AgentCard] = {}
        self.rejected: dict[str, str] = {}
        self.half_open: dict[str, tuple[str, float]] = {}  # task id -> (agent, opened at)
        # the card verifier of the hardened policy: the lab's HS256 registry key unless one is given (e.g. the
        # asymmetric registry of `identity.verifier`)
        self._verifier = (verifier or registry_verifier()) if policy.verify_signatures else None

    # ------------------------------------------------------------------------------------------ admission
    async def discover(self, urls: Sequence[str]) -> dict[str, pb.AgentCard]:
        """Resolve each peer's card at its well-known path (through the SDK's resolver); malformed, unsigned
        or badly signed cards are rejected with a reason instead of admitted."""
        for url in urls:
            try:
                card = await A2ACardResolver(self.lab.client, url).get_agent_card(signature_verifier=self._verifier)
            except signing.SignatureVerificationError as err:
                self.rejected[url] = f"signature verification failed: {err}"
                continue
            except (A2AClientError, A2AError, httpx.HTTPError, ValueError) as err:
                self.rejected[url] = f"card could not be resolved: {type(err).__name__}: {err}"
                continue
            missing = missing_card_fields(card)
            if missing:
                self.rejected[url] = f"card of {card.name or url} is missing required fields {missing}"
                continue
            self.cards[card.name] = card
        return self.cards

    # -------------------------------------------------------------------------------------------- routing
    async def handle(self, skill: str, params: dict[str, Any], text: str) -> Outcome:
        """Select a peer for `text` and run the request to an answer (or a recorded refusal)."""
        self._expire_half_open()
        names = list(self.cards)
        if not names:
            return Outcome(error="no admitted agent")
        outcome = Outcome()
        for _ in range(2):  # the selected peer, and after a contract breach the best of the others
            name = names[self.selector.select(text, [self.cards[n] for n in names])]
            outcome = await self._call(name, skill, params, text, path=[name],
                                       outcome=Outcome(blocked=list(outcome.blocked)))
            if self.policy.quarantine and (outcome.error or "").startswith(("timeout", "rejected")):
                self.rejected[name] = f"quarantined after: {outcome.error}"
                self.cards.pop(outcome.agent or name, None)
            if not (outcome.error or "").startswith("contract") or len(names) == 1:
                return outcome
            names.remove(name)
        return outcome

    async def _send(self, card: pb.AgentCard, message: pb.Message) -> pb.Task:
        client = ClientFactory(ClientConfig(httpx_client=self.lab.client, streaming=False)).create(card)
        task = None
        async for event in client.send_message(pb.SendMessageRequest(message=message)):
            if event.HasField("task"):
                task = event.task
        if task is None:
            raise ValueError(f"{card.name} answered without a task")
        return task

    async def _send_bounded(self, card: pb.AgentCard, message: pb.Message) -> pb.Task:
        """Send and wait until the task settles (a terminal or interrupted state) within the request timeout."""
        return await self._bounded(self._send_and_settle(card, message))

    async def _bounded(self, coroutine):
        """Await `coroutine` for at most the request timeout. The SDK's handler does not give up a request when
        it is cancelled, so a stuck call is abandoned (cancelled, not awaited) rather than waited out."""
        task = asyncio.ensure_future(coroutine)
        done, _ = await asyncio.wait({task}, timeout=self.policy.request_timeout)
        if not done:
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved"
            task.cancel()
            raise TimeoutError(f"no answer within {self.policy.request_timeout} s")
        return task.result()

    async def _send_and_settle(self, card: pb.AgentCard, message: pb.Message) -> pb.Task:
        task = await self._send(card, message)
        if task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING):
            client = ClientFactory(ClientConfig(httpx_client=self.lab.client, streaming=False)).create(card)
            while task.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING):
                await asyncio.sleep(0.01)
                task = await client.get_task(pb.GetTaskRequest(id=task.id))
        return task

    async def _call(self, name: str, skill: str, params: dict[str, Any], text: str, *, path: list[str],
                    outcome: Outcome) -> Outcome:
        p = self.policy
        outcome.agent = outcome.agent or name
        card = self.cards[name]
        message = ph.new_message([ph.new_text_part(text), ph.new_data_part({"skill": skill, "params": params})],
                                 role=pb.ROLE_USER)
        try:
            task = await self._send_bounded(card, message)
            rounds = 0
            while task.status.state == pb.TASK_STATE_INPUT_REQUIRED and rounds < p.max_input_rounds:
                rounds += 1
                reply = ph.new_message([ph.new_text_part(f"reference {params.get('reference', 'unknown')}"),
                                        ph.new_data_part({"skill": skill, "params": params})],
                                       task_id=task.id, context_id=task.context_id, role=pb.ROLE_USER)
                task = await self._send_bounded(card, reply)
        except TimeoutError:
            outcome.error = f"timeout: {name} did not answer within {p.request_timeout} s"
            return outcome
        except (A2AClientError, A2AError, httpx.HTTPError, ValueError) as err:
            outcome.error = f"{name}: {type(err).__name__}: {err}"
            return outcome
        outcome.state = pb.TaskState.Name(task.status.state)
        if task.status.state == pb.TASK_STATE_INPUT_REQUIRED:
            await self._hold(name, task)
            outcome.error = f"pending: {name} still needs input after {rounds} answers"
            return outcome
        return await self._act(name, card, task, skill, params, text, path=path, outcome=outcome)

    async def _act(self, name, card, task, skill, params, text, *, path, outcome) -> Outcome:
        p = self.policy
        parts = [part for artifact in task.artifacts for part in artifact.parts]
        size = sum(len(part.text) + len(part.raw) for part in parts)
        if size > p.max_artifact_bytes:
            outcome.error = (f"rejected: {name}'s artifacts are {size} bytes, "
                             f"more than the {p.max_artifact_bytes} allowed")
            return outcome
        data = [d for d in ph.get_data_parts(parts) if isinstance(d, dict)]
        for d in data:
            if "delegate_to" in d:
                return await self._delegate(name, str(d["delegate_to"]), skill, params, text, path, outcome)
        for d in data:
            if "action" in d:
                declared = {s.id for s in card.skills}
                if p.enforce_capability_contract and d["action"] not in declared:
                    outcome.blocked.append(f"{name} requested undeclared action {d['action']!r}")
                    outcome.error = f"contract: {name} acts beyond its declared skills {sorted(declared)}"
                    return outcome
                self.lab.actions.executed.append((name, str(d["action"])))
        for part in parts:
            if part.url:
                host = httpx.URL(part.url).host
                if p.uri_allowlist is not None and not any(host.endswith(s) for s in p.uri_allowlist):
                    outcome.blocked.append(f"refused to dereference {part.url}: host not on the allow-list")
                    continue
                try:
                    self.lab.uris.fetch(part.url)
                except PermissionError as err:
                    outcome.blocked.append(str(err))
            if part.media_type == "text/html":
                markup = sanitize(part.text) if p.sanitize_artifacts else part.text
                if markup != part.text:
                    outcome.blocked.append(f"sanitised active content in {name}'s artifact")
                self.lab.renderer.render(markup)
        results = [a for a in task.artifacts if a.name == "result"]
        outcome.answer = ph.get_artifact_text(results[0]) if results else None
        return outcome

    async def _delegate(self, source, target, skill, params, text, path, outcome) -> Outcome:
        p = self.policy
        self.lab.delegations.record(source, target, path)
        outcome.hops += 1
        if p.detect_cycles and target in path:
            outcome.blocked.append(f"delegation cycle {' -> '.join(path + [target])}")
            outcome.error = "refused: delegation cycle"
            return outcome
        if p.max_delegation_depth is not None and len(path) > p.max_delegation_depth:
            outcome.blocked.append(f"delegation depth {len(path)} exceeds {p.max_delegation_depth}")
            outcome.error = "refused: delegation too deep"
            return outcome
        if len(path) >= LAB_MAX_HOPS:
            outcome.error = f"overflow: delegation ran {len(path)} hops (the lab's bound)"
            return outcome
        if target not in self.cards:
            outcome.error = f"delegation to unknown agent {target!r}"
            return outcome
        return await self._call(target, skill, params, text, path=path + [target], outcome=outcome)

    # ------------------------------------------------------------------------------------------ half-open
    async def _hold(self, name: str, task: pb.Task) -> None:
        self.half_open[task.id] = (name, time.monotonic())
        cap = self.policy.half_open_cap
        while cap is not None and len(self.half_open) > cap:
            oldest = min(self.half_open, key=lambda t: self.half_open[t][1])
            await self._cancel(oldest)

    def _expire_half_open(self) -> None:
        ttl = self.policy.half_open_ttl
        if ttl is None:
            return
        now = time.monotonic()
        for task_id, (_, opened) in list(self.half_open.items()):
            if now - opened > ttl:
                self.half_open.pop(task_id)

    async def _cancel(self, task_id: str) -> None:
        name, _ = self.half_open.pop(task_id)
        client = ClientFactory(ClientConfig(httpx_client=self.lab.client, streaming=False)).create(self.cards[name])
        try:
            await self._bounded(client.cancel_task(pb.CancelTaskRequest(id=task_id)))
        except (A2AClientError, A2AError, httpx.HTTPError, TimeoutError):
            pass  # the peer may have dropped it already; it is no longer held by us either way

    async def resume(self, name: str, task_id: str, text: str) -> Outcome:
        """Send `text` into an existing task (e.g. answering an input request)."""
        if name not in self.cards:
            return Outcome(error=f"unknown agent {name!r}")
        message = ph.new_message([ph.new_text_part(text)], task_id=task_id, role=pb.ROLE_USER)
        try:
            task = await self._send_bounded(self.cards[name], message)
        except (A2AClientError, A2AError, httpx.HTTPError, ValueError) as err:
            return Outcome(agent=name, error=f"{name}: {type(err).__name__}: {err}")
        except TimeoutError:
            return Outcome(agent=name, error=f"timeout: {name} did not answer within {self.policy.request_timeout} s")
        return Outcome(agent=name, state=pb.TaskState.Name(task.status.state))
