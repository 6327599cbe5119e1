"""ToolWorld: a generated tool-use world in which every tool call has an exact label.

Entities e00..e{N-1} carry three integer attributes (a, b, c) in [0, max_value]; a search corpus holds most
(entity, attribute) pairs (the rest answer NONE). Questions need one to three lookups and arithmetic:

    get eX p             -> S eX p                                  answer v
    add / sub / max ...  -> S eX p ; S eY q ; C vX + vY             answer the calculator's result
    hop eX p q           -> S eX p -> v ; S e(v mod N) q            two-hop lookup
    maxsub eX p eY q eZ r-> three lookups, C max vX vY, C m - vZ    max(x, y) - z

The DSL is whitespace-separated tokens. A turn is one action: `S e17 a >` (search), `C 42 + 17 >`,
`C 42 - 17 >`, `C max 42 17 >` (calculator) or `A 59` then EOS (answer). Observations are `42 ;`,
`NONE ;` or `ERR ;` (a malformed call is an observation, never a crash). The oracle plan of every question
gives each call's exact labels (`label_calls`): quality = well-formed and returns a value and its arguments
match a plan step; necessity = it targets a plan step not yet done and repeats no earlier call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from core.config import ConfigError, check

ATTRS = ("a", "b", "c")
TEMPLATES = ("get", "add", "sub", "max", "hop", "maxsub")
# "max" is both a question template and a calculator operation: one token
SPECIALS = ("<pad>", "<eos>", "Q", "S", "C", "A", ">", ";", "NONE", "ERR", "+", "-", "max", "get", "add", "sub",
            "hop", "maxsub", *ATTRS)
PAD, EOS = 0, 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorldConfig:
    """num_entities entities with attributes in [0, max_value]; missing_fraction of the (entity, attribute)
    pairs are absent from the search corpus (a search for one returns NONE). template_weights: the mix of
    question templates (in TEMPLATES order)."""

    num_entities: int = 64  # entities e00.., each with attributes a, b, c
    max_value: int = 99  # attribute values are integers in [0, max_value]
    missing_fraction: float = 0.1  # share of (entity, attribute) pairs the search corpus lacks (answers NONE)
    template_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # mix of get, add, sub, max, hop, maxsub
    seed: int = 0

    def __post_init__(self):
        check(2 <= self.num_entities <= 100, "num_entities", self.num_entities, "in [2, 100]")
        check(1 <= self.max_value <= 999, "max_value", self.max_value, "in [1, 999]")
        check(0.0 <= self.missing_fraction < 0.5, "missing_fraction", self.missing_fraction, "in [0, 0.5)")
        check(len(self.template_weights) == len(TEMPLATES) and min(self.template_weights) >= 0
              and sum(self.template_weights) > 0, "template_weights", self.template_weights,
              f"{len(TEMPLATES)} non-negative weights (for {TEMPLATES}) with a positive sum")


class Tokenizer:
    """Token ids <-> DSL text. Numbers from -max_value to 2 * max_value are single tokens."""

    def __init__(self, config: WorldConfig):
        self.min_number, self.max_number = -config.max_value, 2 * config.max_value
        self.words = [*SPECIALS, *(f"e{i:02d}" for i in range(config.num_entities)),
                      *(str(v) for v in range(self.min_number, self.max_number + 1))]
        self.ids = {w: i for i, w in enumerate(self.words)}
        self.eos = EOS
        self.pad = PAD

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.ids[w] for w in text.split()]
        except KeyError as error:
            raise ConfigError(f"word {error.args[0]!r} in {text!r}: expected a ToolWorld DSL word") from None

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.words[int(i)] for i in ids if int(i) != PAD)

    def number_token(self, value: int) -> int | None:
        return self.ids.get(str(value))


class Step(NamedTuple):
    """One plan step: ("S", (entity, attr)) with its value, or ("C", (op, x, y)) with its result."""

    tool: str
    key: tuple
    value: int


class Question(NamedTuple):
    template: str
    text: str  # "Q add e17 a e05 b"
    plan: tuple[Step, ...]
    answer: int


class Parsed(NamedTuple):
    kind: str  # "S" | "C" | "A" | "malformed"
    key: tuple = ()
    number: int | None = None  # the answer's number


class CallLabel(NamedTuple):
    """Exact labels of one tool call (an action that is not the answer)."""

    well_formed: bool
    returns_value: bool
    matches_plan: bool
    quality: bool  # well-formed and returns a value and arguments match a plan step
    necessity: bool  # targets a plan step not yet done, and repeats no earlier call
    observation: str

    @property
    def label(self) -> int:
        return int(self.quality and self.necessity)


class World:
    """The entities, the search corpus and the tools. Deterministic in `config.seed`."""

    def __init__(self, config: WorldConfig = WorldConfig()):
        self.config = config
        rng = np.random.default_rng([config.seed, 3001])
        N = config.num_entities
        self.values = rng.integers(0, config.max_value + 1, size=(N, len(ATTRS)))
        self.present = rng.random((N, len(ATTRS))) >= config.missing_fraction
        self.tokenizer = Tokenizer(config)

    # --- tools -------------------------------------------------------------------------------------------
    def lookup(self, entity: int, attr: str) -> int | None:
        a = ATTRS.index(attr)
        return int(self.values[entity, a]) if self.present[entity, a] else None

    def calculate(self, op: str, x: int, y: int) -> int | None:
        result = {"+": x + y, "-": x - y, "max": max(x, y)}[op]
        tok = self.tokenizer
        return result if tok.min_number <= result <= tok.max_number else None

    def parse(self, action: str) -> Parsed:
        """One action's text (the turn's tokens, EOS stripped) -> what it asks for; never raises."""
        w = action.split()
        if w and w[-1] == ">":
            w = w[:-1]
            if len(w) == 3 and w[0] == "S" and _entity(w[1], self.config.num_entities) is not None and w[2] in ATTRS:
                return Parsed("S", (_entity(w[1], self.config.num_entities), w[2]))
            if len(w) == 4 and w[0] == "C" and w[2] in ("+", "-") and _int(w[1]) is not None and _int(w[3]) is not None:
                return Parsed("C", (w[2], _int(w[1]), _int(w[3])))
            if len(w) == 4 and w[0] == "C" and w[1] == "max" and _int(w[2]) is not None and _int(w[3]) is not None:
                return Parsed("C", ("max", _int(w[2]), _int(w[3])))
            return Parsed("malformed")
        if len(w) == 2 and w[0] == "A" and _int(w[1]) is not None:
            return Parsed("A", number=_int(w[1]))
        return Parsed("malformed")

    def run_tool(self, parsed: Parsed) -> int | None:
        if parsed.kind == "S":
            return self.lookup(*parsed.key)
        if parsed.kind == "C":
            return self.calculate(*parsed.key)
        return None

    # --- questions and plans -------------------------------------------------------------------------------
    def sample_question(self, rng: np.random.Generator, template: str | None = None) -> Question:
        """A question whose every plan lookup is in the corpus and whose every result is a number token."""
        c = self.config
        p = np.asarray(c.template_weights, float)
        for _ in range(1000):
            t = template or TEMPLATES[int(rng.choice(len(TEMPLATES), p=p / p.sum()))]
            ents = [int(e) for e in rng.integers(0, c.num_entities, size=3)]
            attrs = [ATTRS[int(a)] for a in rng.integers(0, len(ATTRS), size=3)]
            q = self.make_question(t, ents, attrs)
            if q is not None:
                return q
        raise RuntimeError(f"no valid {template} question in 1000 draws: the corpus is too sparse")

    def make_question(self, template: str, ents: Sequence[int], attrs: Sequence[str]) -> Question | None:
        """The question of `template` over entities/attributes (as many as it needs), or None if a plan lookup
        is missing from the corpus or the plan repeats a lookup."""
        if template not in TEMPLATES:
            raise ConfigError(f"template={template!r}: expected one of {TEMPLATES}")
        look = lambda e, a: Step("S", (e, a), self.lookup(e, a))  # noqa: E731
        E = lambda e: f"e{e:02d}"  # noqa: E731
        if template == "get":
            plan = [look(ents[0], attrs[0])]
            text = f"Q get {E(ents[0])} {attrs[0]}"
        elif template in ("add", "sub", "max"):
            plan = [look(ents[0], attrs[0]), look(ents[1], attrs[1])]
            text = f"Q {template} {E(ents[0])} {attrs[0]} {E(ents[1])} {attrs[1]}"
            op = {"add": "+", "sub": "-", "max": "max"}[template]
            if None not in (s.value for s in plan):
                x, y = plan[0].value, plan[1].value
                plan.append(Step("C", (op, x, y), self.calculate(op, x, y)))
        elif template == "hop":
            first = look(ents[0], attrs[0])
            plan = [first]
            text = f"Q hop {E(ents[0])} {attrs[0]} {attrs[1]}"
            if first.value is not None:
                plan.append(look(first.value % self.config.num_entities, attrs[1]))
        else:  # maxsub: max(x, y) - z
            plan = [look(ents[i], attrs[i]) for i in range(3)]
            text = f"Q maxsub {' '.join(f'{E(e)} {a}' for e, a in zip(ents[:3], attrs[:3]))}"
            if None not in (s.value for s in plan):
                m = max(plan[0].value, plan[1].value)
                plan += [Step("C", ("max", plan[0].value, plan[1].value), m),
                         Step("C", ("-", m, plan[2].value), self.calculate("-", m, plan[2].value))]
        if any(s.value is None for s in plan) or len({s.key for s in plan}) < len(plan):
            return None
        return Question(template=template, text=text, plan=tuple(plan), answer=plan[-1].value)

    def oracle_actions(self, question: Question) -> list[str]:
        """The plan as action texts, ending with the answer."""
        return [self.action_text(s) for s in question.plan] + [f"A {question.answer}"]

    @staticmethod
    def action_text(step: Step) -> str:
        if step.tool == "S":
            return f"S e{step.key[0]:02d} {step.key[1]} >"
        op, x, y = step.key
        return f"C max {x} {y} >" if op == "max" else f"C {x} {op} {y} >"

    @staticmethod
    def observation_text(value: int | None, parsed: Parsed) -> str:
        if parsed.kind == "malformed":
            return "ERR ;"
        return "NONE ;" if value is None else f"{value} ;"

    # --- labels ----------------------------------------------------------------------------------------------
    def label_calls(self, question: Question, actions: Sequence[str]) -> tuple[list[CallLabel], bool | None]:
        """Exact labels of every tool call in `actions` (the turns' texts in order; the first answer ends the
        episode and is not a call) and whether the answer is right (None: no answer given).

        A plan step is done once a call matches it exactly (calculator `+` / `max` in either operand order).
        necessity: the call targets a plan step not yet done (a search of that step's entity, a calculator of
        that step's operation) and repeats no earlier call; quality: well-formed, returns a value, arguments
        match a plan step (so a repeated right call has quality but no necessity). A malformed call is
        neither."""
        done = [False] * len(question.plan)
        seen: set = set()
        labels: list[CallLabel] = []
        for action in actions:
            parsed = self.parse(action)
            if parsed.kind == "A":
                return labels, parsed.number == question.answer
            value = self.run_tool(parsed)
            obs = self.observation_text(value, parsed)
            if parsed.kind == "malformed":
                labels.append(CallLabel(False, False, False, False, False, obs))
                continue
            match = next((i for i, s in enumerate(question.plan) if not done[i] and _same_call(s, parsed)), None)
            in_plan = any(_same_call(s, parsed) for s in question.plan)
            targets = any(not done[i] and _same_target(s, parsed) for i, s in enumerate(question.plan))
            repeat = parsed.key in seen or (parsed.kind == "C" and _commuted(parsed.key) in seen)
            returns = value is not None
            labels.append(CallLabel(True, returns, in_plan, returns and in_plan, targets and not repeat, obs))
            seen.add(parsed.key)
            if match is not None:
                done[match] = True
        return labels, None


def _entity(word: str, n: int) -> int | None:
    if len(word) == 3 and word[0] == "e" and word[1:].isdigit() and int(word[1:]) < n:
        return int(word[1:])
    return None


def _int(word: str) -> int | None:
    try:
        return int(word)
    except ValueError:
        return None


def _commuted(key: tuple) -> tuple:
    op, x, y = key
    return (op, y, x) if op in ("+", "max") else key


def _same_call(step: Step, parsed: Parsed) -> bool:
    if step.tool != parsed.kind:
        return False
    return parsed.key == step.key or (step.tool == "C" and _commuted(parsed.key) == step.key)


def _same_target(step: Step, parsed: Parsed) -> bool:
    """The call aims at this step: the same entity for a search, the same operation for a calculator."""
    return step.tool == parsed.kind and step.key[0] == parsed.key[0]


class ToolWorldEnv:
    """`core.rl.rollout.Environment` over one World: reset(question) -> episode state; step runs one action.
    The reward is the outcome (1 for the right answer) at the answer; tool calls get 0 here, their process
    rewards are computed from the rollout's texts afterwards (exact labels or the TRM)."""

    def __init__(self, world: World):
        self.world = world

    def reset(self, question: Question) -> dict:
        return {"question": question}

    def step(self, state: dict, action_text: str) -> tuple[str | None, bool, float]:
        parsed = self.world.parse(action_text)
        if parsed.kind == "A":
            return None, True, float(parsed.number == state["question"].answer)
        return self.world.observation_text(self.world.run_tool(parsed), parsed), False, 0.0
