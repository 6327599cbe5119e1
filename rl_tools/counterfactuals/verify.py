"""Ground truth by enumeration in the sandbox, answer parsing, and set scoring (exact match and F1).

The verifier works from the Python source alone: the latent domain is read from the program's
`random.randint(lo, hi)` draws, every joint latent value is run in the sandbox at the factual and the
intervened input, and the answer sets follow (abduction = the latents that reproduce y0). Scores: exact set
match, and per-item set F1 averaged over items (macro; the paper's choice is not known). Integer semantics are
Python's (`%` floors), because the programs are Python.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from rl_tools.counterfactuals.sandbox import Sandbox


class VerifyError(ValueError):
    pass


def latent_domain_from_source(code: str) -> list[tuple[int, ...]]:
    """Joint latent values from the `random.randint(lo, hi)` calls (constant bounds, in source order)."""
    ranges = []
    calls = sorted((n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))  # draw order = source order
    for node in calls:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "randint"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "random"):
            args = node.args
            if len(args) != 2 or not all(isinstance(a, ast.Constant) and type(a.value) is int for a in args):
                raise VerifyError(f"random.randint call at line {node.lineno}: expected two integer constants")
            if args[0].value > args[1].value:
                raise VerifyError(f"random.randint({args[0].value}, {args[1].value}): expected lo <= hi")
            ranges.append(range(args[0].value, args[1].value + 1))
    if not ranges:
        raise VerifyError("no random.randint(lo, hi) latent in the program: expected at least one")
    size = math.prod(len(r) for r in ranges)
    if size > 100_000:
        raise VerifyError(f"latent domain of {size} values: expected at most 100000 to enumerate")
    return [tuple(v) for v in itertools.product(*ranges)]


def answer_sets(code: str, x0: int, y0: int, x1: int, sandbox: Sandbox) -> dict[str, Any]:
    """Enumerate every latent in the sandbox: consistent latents, counterfactual set, prior set.

    Returns {"consistent", "counterfactual", "prior", "outputs_x0", "outputs_x1"} or {"error": ...}.
    """
    domain = latent_domain_from_source(code)
    calls = [(x0, r) for r in domain] + [(x1, r) for r in domain]
    res = sandbox.run(code, calls)
    if not res.ok:
        return {"error": res.error}
    n = len(domain)
    at_x0, at_x1 = res.values[:n], res.values[n:]
    consistent = [r for r, y in zip(domain, at_x0) if y == y0]
    return {"consistent": consistent,
            "counterfactual": sorted({y for r, y, y_0 in zip(domain, at_x1, at_x0) if y_0 == y0}),
            "prior": sorted(set(at_x1)), "outputs_x0": list(at_x0), "outputs_x1": list(at_x1)}


def interventional_answer(code: str, x1: int, latents: Sequence[int], sandbox: Sandbox) -> int | None:
    res = sandbox.run(code, [(x1, latents)])
    return res.values[0] if res.ok else None


# --- parsing ----------------------------------------------------------------------------------------

_INT = re.compile(r"(?<![\w.])[-\u2212]?\d+(?![\w.]*\d)")
_BRACES = re.compile(r"\{([^{}]*)\}")
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_WORDS = {"none", "empty", "no values", "∅", "set()"}


def _ints(text: str) -> list[int]:
    return [int(t.replace("\u2212", "-")) for t in _INT.findall(text)]


def parse_answer(text: str | None) -> frozenset[int] | None:
    """A model's answer as a set of ints, or None when no answer can be read.

    Robust to order, duplicates, spacing and wrappers: the last `{...}` in the text wins, then the last
    `[...]`, then the text after the last "answer"/"=" marker, then every integer in the text. `{}`, `set()`,
    `∅` and "none" are the empty set. Chain-of-thought before the final set is ignored.
    """
    if text is None:
        return None
    text = str(text).strip()
    if not text:
        return None
    if "</think>" in text:  # reasoning models: score the part after the trace
        text = text.rsplit("</think>", 1)[1]
    if "=>" in text:  # the compact model's scratchpad: `12 36 => 0`
        text = text.rsplit("=>", 1)[1]
    for pattern in (_BRACES, _BRACKETS):
        groups = pattern.findall(text)
        if groups:
            inner = groups[-1]
            return frozenset(_ints(inner))
    lowered = text.lower()
    if lowered.rstrip(". ") in _WORDS or lowered.endswith("set()"):
        return frozenset()
    m = list(re.finditer(r"answer\s*(?:is|:)?|=", lowered))
    tail = text[m[-1].end():] if m else text
    values = _ints(tail)
    if values:
        return frozenset(values)
    values = _ints(text)
    return frozenset(values) if values else None


# --- scoring ---------------------------------------------------------------------------------------

def exact_match(pred: Iterable[int] | None, gold: Iterable[int]) -> float:
    return float(pred is not None and set(pred) == set(gold))


def set_f1(pred: Iterable[int] | None, gold: Iterable[int]) -> float:
    """F1 between sets: 2|P∩G| / (|P| + |G|); an unreadable answer scores 0; two empty sets score 1."""
    if pred is None:
        return 0.0
    p, g = set(pred), set(gold)
    if not p and not g:
        return 1.0
    return 2 * len(p & g) / (len(p) + len(g))


def score(preds: Sequence[Iterable[int] | None], golds: Sequence[Iterable[int]]) -> dict[str, float]:
    """Macro (per-item mean) exact match and F1, plus the share of unreadable answers."""
    if len(preds) != len(golds):
        raise ValueError(f"{len(preds)} predictions for {len(golds)} gold sets: expected equal numbers")
    n = max(len(golds), 1)
    return {"em": sum(exact_match(p, g) for p, g in zip(preds, golds)) / n,
            "f1": sum(set_f1(p, g) for p, g in zip(preds, golds)) / n,
            "unparsed": sum(p is None for p in preds) / n, "n": len(golds)}
