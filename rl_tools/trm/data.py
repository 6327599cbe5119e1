"""Scripted ToolWorld traces (oracle and corrupted), their token layout, and the arrays that train on them.

A scripted agent runs a question's template procedure against the world, using the values it actually
observed, so a corrupted step (a wrong key, a skipped calculator, a copied-wrong operand) carries through to
the answer as a weaker model's mistake would. Corruptions: wrong_attr / wrong_entity (a wrong search key, the
first sometimes followed by the right search: a recovery), duplicate (a call repeated), skip_calc (the
calculator skipped, the answer guessed from an operand), wrong_operand (a calculator operand off by a few),
extra (an irrelevant lookup).

`encode_trace` lays a trace out as one token row: prompt | action_1 obs_1 ... action_n obs_n answer EOS, with
the policy mask (action and answer tokens), the observation mask, each call's last action token and last
observation token (where the TRM head reads), and each call's exact labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rl_tools.trm.world import ATTRS, EOS, PAD, CallLabel, Question, World

CORRUPTIONS = ("wrong_attr", "wrong_entity", "duplicate", "skip_calc", "wrong_operand", "extra")


def _program(world: World, q: Question) -> list[tuple]:
    """The template's procedure: ("S", entity | ("hop", i), attr) and ("C", op, ref_i, ref_j) steps, where
    ref_i is the result of step i."""
    w = q.text.split()
    ent = lambda s: int(s[1:])  # noqa: E731
    if q.template == "get":
        return [("S", ent(w[2]), w[3])]
    if q.template in ("add", "sub", "max"):
        op = {"add": "+", "sub": "-", "max": "max"}[q.template]
        return [("S", ent(w[2]), w[3]), ("S", ent(w[4]), w[5]), ("C", op, 0, 1)]
    if q.template == "hop":
        return [("S", ent(w[2]), w[3]), ("S", ("hop", 0), w[4])]
    return [("S", ent(w[2]), w[3]), ("S", ent(w[4]), w[5]), ("S", ent(w[6]), w[7]), ("C", "max", 0, 1),
            ("C", "-", 3, 2)]


def scripted_actions(world: World, q: Question, rng: np.random.Generator, corruption: str | None = None
                     ) -> list[str]:
    """The actions of a scripted agent on `q` (ending with the answer); `corruption` (one of CORRUPTIONS or
    None) is applied at one random step where it applies (if none applies, the trace is clean)."""
    prog = _program(world, q)
    N = world.config.num_entities
    kinds = [s[0] for s in prog]
    where = {"wrong_attr": "S", "wrong_entity": "S", "duplicate": None, "skip_calc": "C", "wrong_operand": "C",
             "extra": None}
    if corruption is not None and corruption not in CORRUPTIONS:
        raise ValueError(f"corruption={corruption!r}: expected None or one of {CORRUPTIONS}")
    candidates = [i for i, k in enumerate(kinds) if corruption and where[corruption] in (None, k)]
    at = int(rng.choice(candidates)) if candidates else -1
    results: list[int] = []
    actions: list[str] = []

    def run(action: str) -> int:
        value = world.run_tool(world.parse(action))
        actions.append(action)
        return 0 if value is None else value

    for i, step in enumerate(prog):
        hit = i == at
        if hit and corruption == "extra":
            run(f"S e{int(rng.integers(N)):02d} {ATTRS[int(rng.integers(3))]} >")
        if step[0] == "S":
            e = results[step[1][1]] % N if isinstance(step[1], tuple) else step[1]
            attr = step[2]
            good = f"S e{e:02d} {attr} >"
            if hit and corruption == "wrong_attr":
                bad = ATTRS[(ATTRS.index(attr) + int(rng.integers(1, 3))) % 3]
                value = run(f"S e{e:02d} {bad} >")
                if rng.random() < 0.5:  # a recovery: the right search follows
                    value = run(good)
            elif hit and corruption == "wrong_entity":
                value = run(f"S e{(e + int(rng.integers(1, N))) % N:02d} {attr} >")
            else:
                value = run(good)
        else:
            x, y = results[step[2]], results[step[3]]
            if hit and corruption == "skip_calc":
                results.append(x)  # answers from an operand instead of calculating
                continue
            if hit and corruption == "wrong_operand":
                x += int(rng.choice([-3, -2, -1, 1, 2, 3]))
            op = step[1]
            value = run(f"C max {x} {y} >" if op == "max" else f"C {x} {op} {y} >")
        if hit and corruption == "duplicate":
            run(actions[-1])
        results.append(value)
    actions.append(f"A {results[-1]}")
    return actions


class Trace(NamedTuple):
    """One trajectory as a token row (unpadded). policy / observation: per-token masks over `tokens`;
    call_ends: the last action token of each tool call that got an observation; obs_ends: that observation's
    last token; labels: the calls' exact labels; correct: the answer is right (None: no answer)."""

    tokens: list[int]
    prompt_length: int
    policy: list[bool]
    observation: list[bool]
    call_ends: list[int]
    obs_ends: list[int]
    labels: list[CallLabel]
    correct: bool | None


def encode_trace(world: World, q: Question, actions: Sequence[str]) -> Trace:
    """Lay out prompt, actions and the world's observations as one row (the answer gets EOS)."""
    tok = world.tokenizer
    labels, correct = world.label_calls(q, actions)
    tokens = tok.encode(q.text)
    P = len(tokens)
    policy, observation = [False] * P, [False] * P
    call_ends, obs_ends = [], []
    for action in actions:
        a = tok.encode(action)
        is_answer = world.parse(action).kind == "A"
        if is_answer:
            a = a + [EOS]
        tokens += a
        policy += [True] * len(a)
        observation += [False] * len(a)
        if is_answer:
            break
        call_ends.append(len(tokens) - 1)
        o = tok.encode(labels[len(call_ends) - 1].observation)
        tokens += o
        policy += [False] * len(o)
        observation += [True] * len(o)
        obs_ends.append(len(tokens) - 1)
    return Trace(tokens, P, policy, observation, call_ends, obs_ends, labels[:len(call_ends)], correct)


def sample_traces(world: World, n: int, rng: np.random.Generator, *, clean_fraction: float) -> list[Trace]:
    """n scripted traces: a fraction clean, the rest with one corruption drawn uniformly."""
    out = []
    for _ in range(n):
        q = world.sample_question(rng)
        corruption = None if rng.random() < clean_fraction else CORRUPTIONS[int(rng.integers(len(CORRUPTIONS)))]
        out.append(encode_trace(world, q, scripted_actions(world, q, rng, corruption)))
    return out


def bc_rows(traces: Sequence[Trace], seq_len: int) -> dict[str, np.ndarray]:
    """Next-token rows for behaviour cloning: the loss on the policy's tokens only (never on the prompt or
    the observations). Keys as core.lm.losses.next_token_loss expects."""
    n = len(traces)
    out = {k: np.zeros((n, seq_len), np.int32) for k in ("inputs", "targets", "segment_ids")}
    out["loss_mask"] = np.zeros((n, seq_len), np.float32)
    for i, t in enumerate(traces):
        L = len(t.tokens) - 1
        if L > seq_len:
            raise ValueError(f"trace of {L + 1} tokens: expected at most seq_len + 1 = {seq_len + 1}")
        out["inputs"][i, :L] = t.tokens[:-1]
        out["targets"][i, :L] = t.tokens[1:]
        out["loss_mask"][i, :L] = np.asarray(t.policy[1:], np.float32)
        out["segment_ids"][i, :L] = 1
    return out


LABEL_KINDS = ("product", "quality", "necessity")


def call_label(label: CallLabel, kind: str) -> int:
    """The TRM target of one call: necessity x quality (the paper's), or one of them alone (ablations)."""
    if kind == "product":
        return label.label
    if kind == "quality":
        return int(label.quality)
    if kind == "necessity":
        return int(label.necessity)
    raise ValueError(f"label kind={kind!r}: expected one of {LABEL_KINDS}")


def trm_rows(traces: Sequence[Trace], seq_len: int, max_calls: int, *, kind: str = "product",
             noise: float = 0.0, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """Rows for the TRM: tokens, attention, the observation-end positions of up to max_calls calls (-1: none)
    and their binary labels; `noise` flips each necessity / quality bit with that probability (an imperfect
    judge) before the label is formed."""
    n = len(traces)
    out = {"tokens": np.full((n, seq_len), PAD, np.int32), "attention": np.zeros((n, seq_len), bool),
           "positions": np.full((n, max_calls), -1, np.int32), "labels": np.zeros((n, max_calls), np.float32)}
    for i, t in enumerate(traces):
        if len(t.tokens) > seq_len:
            raise ValueError(f"trace of {len(t.tokens)} tokens: expected at most seq_len = {seq_len}")
        out["tokens"][i, :len(t.tokens)] = t.tokens
        out["attention"][i, :len(t.tokens)] = True
        for j, (pos, lab) in enumerate(zip(t.obs_ends[:max_calls], t.labels[:max_calls])):
            if noise > 0:
                flip = rng.random(2) < noise
                lab = lab._replace(quality=lab.quality ^ bool(flip[0]), necessity=lab.necessity ^ bool(flip[1]))
            out["positions"][i, j] = pos
            out["labels"][i, j] = call_label(lab, kind)
    return out
