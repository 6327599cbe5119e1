"""LLM prompts (evidence hierarchy, anti-collapse rules, the answer format) and the answer parser.

The answer ends in `[point, [x_1, ..., x_P], c]` or `[region, [[lb_1, ..., lb_P], [ub_1, ..., ub_P]], c]`
with values in natural units (categorical parameters: option names) and confidence c in [0, 1]. The parser
takes the last such expression in the text and turns it into a `model.Region` in unit coordinates.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.config import BadInputError
from optimization.lgbo.model import C_EPS, Region
from optimization.lgbo.space import Continuous, Ordinal, Space


class PreferenceParseError(BadInputError):
    """The LLM answer holds no valid `[point, ...]` / `[region, ...]` expression."""


SYSTEM = """You are an expert experimental scientist guiding a Bayesian-optimisation campaign that {goal}s \
an objective. In every round you state where in the search space you expect the best results, as a box \
(region) or a point, with a confidence.

Weigh evidence in this order:
1. Mechanism: what you know about the system (physics, chemistry, biology) and why a region should be good.
2. Trends: patterns across all observations (which parameters matter, in which direction).
3. History: single good observations; they count least, because one lucky measurement is weak evidence.

Rules against collapse:
- Do not centre a region on a past observation unless a mechanistic reason says the optimum is there.
- If the last rounds did not improve, move or widen the region instead of repeating it.
- Prefer a region over a point unless you are sure; choose a lower confidence when the evidence is weak \
(0.5 means no preference, 0.84 means one standard deviation of lift).

End your answer with exactly one line in one of these forms (values in the parameters' own units, \
categorical parameters by option name, c between 0 and 1):
[region, [[lb_1, ..., lb_P], [ub_1, ..., ub_P]], c]
[point, [x_1, ..., x_P], c]"""

STRICT = """Your previous answer could not be read. Reply with ONE line only, nothing else, exactly in one \
of these forms, with {p} values per list in the order {names}:
[region, [[lb_1, ..., lb_P], [ub_1, ..., ub_P]], c]
[point, [x_1, ..., x_P], c]"""


def describe_space(space: Space) -> str:
    lines = []
    for p in space.params:
        if isinstance(p, Continuous):
            lines.append(f"- {p.name}: continuous in [{p.low:g}, {p.high:g}]")
        elif isinstance(p, Ordinal):
            lines.append(f"- {p.name}: ordered numeric levels {list(p.options)}")
        else:
            lines.append(f"- {p.name}: categorical, options {list(p.options)}")
    return "\n".join(lines)


HISTORY_ORDERS = ("best", "newest")


def build_messages(space: Space, history: Sequence[tuple[Sequence[Any], float]], *, goal: str = "maximize",
                   context: str = "", strict: bool = False, max_rows: int = 60, history_order: str = "best",
                   last_reasoning: str = "") -> list[dict[str, str]]:
    """OpenAI-style chat messages for one round. history: [(values, y)] in natural units, oldest first.

    history_order "best" lists the observations best first; "newest" newest first, as the reference code's
    prompt does. last_reasoning (the LLM's previous answer without its final line) is shown as a summary of
    the last round's reasoning, with a note that BO adopted the suggestion only through the surrogate, as the
    reference code's review block does; "" leaves both out."""
    if history_order not in HISTORY_ORDERS:
        raise BadInputError(f"history_order={history_order!r}: expected one of {HISTORY_ORDERS}")
    if history_order == "best":
        rows = sorted(history, key=lambda r: -r[1] if goal == "maximize" else r[1])[:max_rows]
    else:
        rows = list(history)[::-1][:max_rows]
    table = "\n".join(", ".join(_fmt(v) for v in vals) + f" -> {y:.6g}" for vals, y in rows)
    order = "best first" if history_order == "best" else "newest first"
    review = ""
    if last_reasoning.strip():
        review = ("\n\nYour reasoning last round (summary): " + " ".join(last_reasoning.split())[-1200:] +
                  "\nNote: your suggestion entered the BO surrogate as a preference; the points actually tested "
                  "may differ from it.")
    user = (f"{context.strip()}\n\n" if context.strip() else "") + \
        f"Parameters (P = {space.n_params}, in this order):\n{describe_space(space)}\n\n" + \
        f"Observations so far ({len(history)}, {order}; columns {', '.join(space.names)} -> objective):\n" + \
        (table or "(none yet)") + review + "\n\nWhere should the next experiments go?"
    messages = [{"role": "system", "content": SYSTEM.format(goal=goal)}, {"role": "user", "content": user}]
    if strict:
        messages.append({"role": "user", "content": STRICT.format(p=space.n_params, names=", ".join(space.names))})
    return messages


def reasoning_of(text: str) -> str:
    """The reasoning part of an answer: the text before its last `[point, ...]` / `[region, ...]` expression."""
    heads = list(_HEAD.finditer(text or ""))
    return (text[:heads[-1].start()] if heads else (text or "")).strip()


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


_HEAD = re.compile(r"\[\s*[\"']?(point|region)[\"']?\s*,", re.IGNORECASE)
_BARE = re.compile(r"(?<![\"'\w.\-+])([A-Za-z_][A-Za-z0-9_\-]*)(?![\"'\w])")


def _balanced(text: str, start: int) -> str | None:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def _unit(space: Space, values: Sequence[Any], side: str) -> np.ndarray:
    """Natural-unit coordinates -> unit coordinates; side 'lo'/'hi'/'mid' places categorical options."""
    if not isinstance(values, list) or len(values) != space.n_params:
        raise PreferenceParseError(f"expected a list of {space.n_params} values ({space.names}), got {values!r}")
    u = []
    for p, v in zip(space.params, values):
        if isinstance(p, Continuous):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise PreferenceParseError(f"parameter {p.name!r}: {v!r} is not a finite number")
            u.append(np.clip((v - p.low) / (p.high - p.low), 0.0, 1.0))
        else:
            try:
                i = p.index(v)
            except ValueError as e:
                raise PreferenceParseError(str(e)) from None
            k = len(p.options)
            u.append({"lo": i / k, "hi": (i + 1) / k, "mid": (i + 0.5) / k}[side])
    return np.asarray(u, np.float64)


def parse_answer(text: str, space: Space) -> Region:
    """The last `[point, ...]` / `[region, ...]` expression of an LLM answer -> Region (unit coordinates).

    Continuous coordinates outside the bounds are clipped into them; c is clamped into (0, 1). Raises
    PreferenceParseError when no valid expression is found."""
    if not isinstance(text, str):
        raise PreferenceParseError(f"answer must be text, got {type(text).__name__}")
    errors = []
    for m in reversed(list(_HEAD.finditer(text))):
        expr = _balanced(text, m.start())
        if expr is None:
            errors.append("unbalanced brackets")
            continue
        try:
            obj = json.loads(_BARE.sub(r'"\1"', expr.replace("'", '"')))
        except json.JSONDecodeError as e:
            errors.append(f"{expr!r}: {e}")
            continue
        try:
            return _to_region(obj, space)
        except PreferenceParseError as e:
            errors.append(f"{expr!r}: {e}")
    detail = "; ".join(errors) if errors else "no [point, ...] or [region, ...] expression"
    raise PreferenceParseError(f"unparseable LLM answer ({detail}); answer ends: {text[-200:]!r}")


def _to_region(obj: Any, space: Space) -> Region:
    if not isinstance(obj, list) or len(obj) != 3:
        raise PreferenceParseError(f"expected [kind, coordinates, c], got {obj!r}")
    kind, coords, c = obj
    if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
        raise PreferenceParseError(f"confidence {c!r} is not a finite number")
    c = float(np.clip(c, C_EPS, 1.0 - C_EPS))
    if str(kind).lower() == "point":
        u = _unit(space, coords, "mid")
        return Region(u, u.copy(), np.float64(c), np.bool_(True))
    if not isinstance(coords, list) or len(coords) != 2:
        raise PreferenceParseError(f"region coordinates must be [[lb...], [ub...]], got {coords!r}")
    lb, ub = _unit(space, coords[0], "lo"), _unit(space, coords[1], "hi")
    if np.any(lb > ub + 1e-12):
        # categorical bounds given in reverse order are reordered; continuous ones are an error
        cont = np.asarray([isinstance(p, Continuous) for p in space.params])
        if np.any((lb > ub + 1e-12) & cont):
            raise PreferenceParseError(f"region lower bounds {coords[0]} exceed upper bounds {coords[1]}")
        lb2, ub2 = _unit(space, coords[1], "lo"), _unit(space, coords[0], "hi")
        lb, ub = np.where(cont, lb, np.minimum(lb, lb2)), np.where(cont, ub, np.maximum(ub, ub2))
    return Region(lb, ub, np.float64(c), np.bool_(False))


def region_to_json(region: Region | None) -> Mapping[str, Any] | None:
    if region is None:
        return None
    return {"lb": [float(v) for v in np.asarray(region.lb)], "ub": [float(v) for v in np.asarray(region.ub)],
            "confidence": float(region.confidence), "is_point": bool(region.is_point)}


def region_from_json(d: Mapping[str, Any] | None) -> Region | None:
    if d is None:
        return None
    return Region(np.asarray(d["lb"], np.float64), np.asarray(d["ub"], np.float64),
                  np.float64(d["confidence"]), np.bool_(d["is_point"]))
