"""Preference oracles behind one interface: `propose(space, history, round) -> Answer`.

- `NoOracle`: plain BO (no region).
- `SimulatedOracle`: aligned (a box around the true optimum, centre jittered), misaligned (the same box on a
  poor region) or random (a box of the same size and confidence at a random place), redrawn every round.
- `OpenAIOracle`: any OpenAI-compatible chat endpoint (a local LLM server); a parse failure is retried once
  with a stricter prompt, then the round falls back to plain BO.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from optimization.lgbo import prompts
from optimization.lgbo.model import Region
from optimization.lgbo.space import Space

MODES = ("none", "aligned", "misaligned", "random")


@dataclasses.dataclass
class Answer:
    region: Region | None  # None: plain BO this round
    texts: list[str] = dataclasses.field(default_factory=list)  # raw LLM answers
    error: str | None = None  # why the round fell back to plain BO


def box_region(mode: jax.Array, key: jax.Array, optimum_u: jax.Array, poor_u: jax.Array, *, side: float,
               jitter: float, confidence: float) -> Region:
    """A simulated box (jittable): mode 0 none, 1 aligned, 2 misaligned, 3 random (index into MODES)."""
    p = optimum_u.shape[-1]
    k1, k2 = jax.random.split(key)
    jit = jitter * side * jax.random.uniform(k1, (p,), minval=-1.0, maxval=1.0)
    centre = jnp.select([mode == 1, mode == 2], [optimum_u + jit, poor_u + jit], jax.random.uniform(k2, (p,)))
    lb = jnp.clip(centre - side / 2, 0.0, 1.0 - side)
    c = jnp.where(mode == 0, 0.5, confidence)
    return Region(lb, lb + side, jnp.asarray(c, optimum_u.dtype), jnp.asarray(False))


def box_side(box_e: float, n_grid: int, n_params: int) -> float:
    """Side of a cube whose expected grid count n_grid * side^P is box_e."""
    return min((box_e / n_grid) ** (1.0 / n_params), 1.0)


class NoOracle:
    def propose(self, space: Space, history, round: int) -> Answer:  # noqa: A002
        return Answer(None)


@dataclasses.dataclass
class SimulatedOracle:
    mode: str
    optimum_u: Sequence[float]
    poor_u: Sequence[float]
    box_e: float = 16.0
    n_grid: int = 512
    jitter: float = 0.25
    confidence: float = 0.8
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise BadInputError(f"simulated oracle mode {self.mode!r}, expected one of {MODES}")

    def propose(self, space: Space, history, round: int) -> Answer:  # noqa: A002
        if self.mode == "none":
            return Answer(None)
        with jax.enable_x64(True):
            key = jax.random.fold_in(jax.random.key(self.seed), round)
            r = box_region(jnp.asarray(MODES.index(self.mode)), key, jnp.asarray(self.optimum_u, jnp.float64),
                           jnp.asarray(self.poor_u, jnp.float64),
                           side=box_side(self.box_e, self.n_grid, space.n_params), jitter=self.jitter,
                           confidence=self.confidence)
            return Answer(Region(*(np.asarray(v) for v in r)))


@dataclasses.dataclass
class OpenAIOracle:
    """Chat-completions client (`POST {base_url}/chat/completions`) for a local OpenAI-compatible server."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.2
    timeout: float = 120.0
    context: str = ""  # a description of the experiment, prepended to the prompt
    goal: str = "maximize"
    history_order: str = "newest"  # as the reference code's prompt ("best": best first)
    last_reasoning: str = ""  # the previous answer's reasoning, shown in the next prompt (set by Campaign too)

    def _chat(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url.rstrip("/") + "/chat/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            reply = json.loads(resp.read().decode())
        try:
            return str(reply["choices"][0]["message"]["content"])
        except (KeyError, IndexError, TypeError):
            raise BadInputError(f"chat endpoint {self.base_url} answered without choices[0].message.content: "
                                f"{str(reply)[:200]}") from None

    def propose(self, space: Space, history: Sequence[tuple[Sequence[Any], float]], round: int) -> Answer:  # noqa: A002
        texts, errors = [], []
        for strict in (False, True):
            messages = prompts.build_messages(space, history, goal=self.goal, context=self.context, strict=strict,
                                              history_order=self.history_order, last_reasoning=self.last_reasoning)
            if strict:
                messages.insert(2, {"role": "assistant", "content": texts[-1] if texts else ""})
            try:
                text = self._chat(messages)
            except (urllib.error.URLError, OSError, ValueError) as e:
                errors.append(f"request failed: {e}")
                continue
            texts.append(text)
            try:
                answer = Answer(prompts.parse_answer(text, space), texts)
                self.last_reasoning = prompts.reasoning_of(texts[0] if strict else text)
                return answer
            except prompts.PreferenceParseError as e:
                errors.append(str(e))
        return Answer(None, texts, "; ".join(errors) + " -> plain BO this round")


def make_oracle(spec: dict[str, Any] | None):
    """From a JSON spec: {"kind": "none"} | {"kind": "openai", "base_url", "model", ...} |
    {"kind": "simulated", "mode", "optimum_u", "poor_u", ...}."""
    spec = dict(spec or {"kind": "none"})
    kind = spec.pop("kind", "none")
    if kind == "none":
        return NoOracle()
    if kind == "openai":
        return OpenAIOracle(**spec)
    if kind == "simulated":
        return SimulatedOracle(**spec)
    raise BadInputError(f"oracle kind {kind!r}, expected 'none', 'openai' or 'simulated'")
