"""Procedural corpus: random sketch-extrude parts (1-3 extrusions: a base plate, then join / cut features),
each with its program, a gold high-level plan and instructions at four levels, generated reproducibly.

Parts are drawn in millimetres on a 1 mm grid and mapped to the normalised frame by 1 mm = one quantisation
level (1/128), so every program is exactly representable in 8 bits (`quantize_program(p) == p`, tested).

- base (NewBody, XY plane, centred at the origin): rectangle, L-shape (a rectangle minus its top-right
  corner), slot (two lines and two half-circle arcs) or disc; optionally a through hole (an inner loop);
- features: a boss (circle or rectangle on the top face, Join), a pocket (circle or rectangle cut down from
  the top face) or a cross hole (a circle on the XZ plane cut symmetrically through the part).

Levels (Text2CAD's four, abstract to expert): 0 abstract (shapes only), 1 beginner (+ the base's main
sizes), 2 intermediate (+ every size, no positions), 3 expert (every dimension: sizes, positions, offsets).
Each item carries the requirements its instruction states, as (feature index, role, value in mm): what the
requirement-satisfaction metric checks and what the requirement-aware tagger learns to extract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from generative.cad.commands import (
    CUT,
    JOIN,
    NEW,
    ONE_SIDE,
    SYMMETRIC,
    XY,
    XZ,
    Arc,
    Circle,
    Extrusion,
    Line,
    Plane,
    Program,
)

LEVELS = ("abstract", "beginner", "intermediate", "expert")
MM = 1.0 / 128.0
BASE_SHAPES = ("rect", "lshape", "slot", "disc")
FEATURES = ("boss_circle", "boss_rect", "pocket_circle", "pocket_rect", "cross_hole")
ROLES = ("width", "length", "radius", "depth", "notch_w", "notch_l", "hole_r", "hole_x", "hole_y", "x", "y", "height")


@dataclasses.dataclass(frozen=True)
class Part:
    program: Program
    plan: tuple[str, ...]  # plan words
    texts: tuple[str, ...]  # one instruction per level
    requirements: tuple[tuple[tuple[int, str, int], ...], ...]  # per level: (feature, role, mm)
    spec: tuple[dict, ...]  # per extrusion: kind and dimensions in mm (for measurement and renders)


def _mm(v: float) -> float:
    return v * MM


def _rect(cx: int, cy: int, w: int, l: int) -> tuple:
    x0, x1, y0, y1 = _mm(cx - w / 2), _mm(cx + w / 2), _mm(cy - l / 2), _mm(cy + l / 2)
    return (Line(x1, y0), Line(x1, y1), Line(x0, y1), Line(x0, y0))


def _lshape(w: int, l: int, nw: int, nl: int) -> tuple:
    x0, x1, y0, y1 = _mm(-w / 2), _mm(w / 2), _mm(-l / 2), _mm(l / 2)
    xn, yn = _mm(w / 2 - nw), _mm(l / 2 - nl)
    return (Line(x1, y0), Line(x1, yn), Line(xn, yn), Line(xn, y1), Line(x0, y1), Line(x0, y0))


def _slot(length: int, r: int) -> tuple:
    """Stadium of straight length `length` (between arc centres) and radius r, along x."""
    a, rr = _mm(length / 2), _mm(r)
    return (Line(a, -rr), Arc(a, rr, np.pi, True), Line(-a, rr), Arc(-a, -rr, np.pi, True))


def _even(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo // 2, hi // 2 + 1) * 2)


def _base(rng: np.random.Generator) -> dict:
    kind = BASE_SHAPES[int(rng.integers(len(BASE_SHAPES)))]
    spec: dict = {"kind": kind, "depth": int(rng.integers(4, 21))}
    if kind in ("rect", "lshape"):
        spec["width"], spec["length"] = _even(rng, 30, 100), _even(rng, 20, 80)
        if kind == "lshape":
            spec["notch_w"] = _even(rng, 6, spec["width"] // 2)
            spec["notch_l"] = _even(rng, 6, spec["length"] // 2)
    elif kind == "slot":
        spec["length"] = _even(rng, 20, 60)
        spec["radius"] = int(rng.integers(8, 21))
    else:
        spec["radius"] = int(rng.integers(12, 41))
    if rng.random() < 0.5:  # a through hole in the base sketch, kept clear of the outline
        safe = _safe_box(spec, margin=4)
        if safe is not None:
            hw, hl = safe
            r = int(rng.integers(2, max(3, min(hw, hl, 12) + 1)))
            if hw > r and hl > r:
                spec["hole_r"] = r
                spec["hole_x"] = int(rng.integers(-(hw - r), hw - r + 1))
                spec["hole_y"] = int(rng.integers(-(hl - r), hl - r + 1))
    return spec


def _safe_box(base: dict, margin: int) -> tuple[int, int] | None:
    """Half-sizes of an origin-centred box inside the base outline (minus a margin), or None."""
    k = base["kind"]
    if k == "rect":
        hw, hl = base["width"] // 2 - margin, base["length"] // 2 - margin
    elif k == "lshape":  # left of the notch, or below it: whichever box is larger
        w, l, nw, nl = base["width"] // 2, base["length"] // 2, base["notch_w"], base["notch_l"]
        hw, hl = max(((w - nw - margin, l - margin), (w - margin, l - nl - margin)), key=lambda b: b[0] * b[1])
    elif k == "slot":
        hw, hl = base["length"] // 2, int(base["radius"] * 0.7) - margin
    else:
        hw = hl = int(base["radius"] * 0.7) - margin
    return (hw, hl) if hw > 2 and hl > 2 else None


def _feature(rng: np.random.Generator, base: dict, hole: bool) -> dict | None:
    safe = _safe_box(base, margin=3)
    if safe is None:
        return None
    hw, hl = safe
    kind = FEATURES[int(rng.integers(len(FEATURES)))]
    if hole and kind != "cross_hole":  # keep bosses and pockets clear of the base's through hole
        hw, hl = hw // 2, hl // 2
    if kind in ("boss_circle", "pocket_circle"):
        rmax = min(hw, hl, 15)
        if rmax < 3:
            return None
        r = int(rng.integers(3, rmax + 1))
        x = int(rng.integers(-(hw - r), hw - r + 1))
        y = int(rng.integers(-(hl - r), hl - r + 1))
        spec = {"kind": kind, "radius": r, "x": x, "y": y}
    elif kind in ("boss_rect", "pocket_rect"):
        if hw < 3 or hl < 3:
            return None
        w, l = _even(rng, 4, min(2 * hw, 30)), _even(rng, 4, min(2 * hl, 30))
        x = int(rng.integers(-(hw - w // 2), hw - w // 2 + 1))
        y = int(rng.integers(-(hl - l // 2), hl - l // 2 + 1))
        spec = {"kind": kind, "width": w, "length": l, "x": x, "y": y}
    else:
        d = base["depth"]
        rmax = min((d - 2) // 2, 8)
        if rmax < 1:
            return None
        r = int(rng.integers(1, rmax + 1))
        spec = {"kind": kind, "radius": r, "x": int(rng.integers(-(hw - r), hw - r + 1)) if hw > r else 0,
                "height": int(rng.integers(r + 1, d - r))}
    if kind.startswith("boss"):
        spec["depth"] = int(rng.integers(2, 16))
    elif kind.startswith("pocket"):
        spec["depth"] = int(rng.integers(1, base["depth"]))
    return spec


def _footprint(f: dict) -> tuple[int, int, int, int] | None:
    """x0, x1, y0, y1 of a feature's (or the base hole's) XY footprint, in mm."""
    if f["kind"] in BASE_SHAPES:
        if "hole_r" not in f:
            return None
        x, y, r = f["hole_x"], f["hole_y"], f["hole_r"]
        return x - r, x + r, y - r, y + r
    if f["kind"] == "cross_hole":
        return None
    if "radius" in f:
        return f["x"] - f["radius"], f["x"] + f["radius"], f["y"] - f["radius"], f["y"] + f["radius"]
    return f["x"] - f["width"] // 2, f["x"] + f["width"] // 2, f["y"] - f["length"] // 2, f["y"] + f["length"] // 2


def _conflict(f: dict, g: dict, top: int, gap: int = 2) -> bool:
    """True when two features would touch (tangent faces make non-manifold results): overlapping or abutting
    footprints, or a pocket floor within `gap` of a cross hole."""
    a, b = _footprint(f), _footprint(g)
    if a is not None and b is not None:
        if a[0] < b[1] + gap and b[0] < a[1] + gap and a[2] < b[3] + gap and b[2] < a[3] + gap:
            return True
    kinds = {f["kind"], g["kind"]}
    if "cross_hole" in kinds and g["kind"] in BASE_SHAPES:  # the cross hole runs along y through the base
        x0, x1 = f["x"] - f["radius"], f["x"] + f["radius"]
        edges = [g["hole_x"] - g["hole_r"], g["hole_x"] + g["hole_r"]] if "hole_r" in g else []
        if g["kind"] == "lshape":
            edges.append(g["width"] // 2 - g["notch_w"])
        return any(x0 - gap < e < x1 + gap for e in edges)
    if "cross_hole" in kinds and kinds & {"pocket_circle", "pocket_rect"}:
        hole, pocket = (f, g) if f["kind"] == "cross_hole" else (g, f)
        return hole["height"] + hole["radius"] + gap > top - pocket["depth"]
    return f["kind"] == "cross_hole" and g["kind"] == "cross_hole"


def _extrusions(specs: Sequence[dict]) -> Program:
    base = specs[0]
    k = base["kind"]
    outer = {"rect": lambda: _rect(0, 0, base["width"], base["length"]),
             "lshape": lambda: _lshape(base["width"], base["length"], base["notch_w"], base["notch_l"]),
             "slot": lambda: _slot(base["length"], base["radius"]),
             "disc": lambda: (Circle(0.0, 0.0, _mm(base["radius"])),)}[k]()
    loops = [outer]
    if "hole_r" in base:
        loops.append((Circle(_mm(base["hole_x"]), _mm(base["hole_y"]), _mm(base["hole_r"])),))
    out = [Extrusion(tuple(loops), XY, _mm(base["depth"]), 0.0, NEW, ONE_SIDE)]
    top = base["depth"]
    for f in specs[1:]:
        kind = f["kind"]
        if kind == "cross_hole":  # XZ sketch: sketch x = world x, sketch y = world z
            loop = (Circle(_mm(f["x"]), _mm(f["height"]), _mm(f["radius"])),)
            half = {"rect": base.get("length", 0), "lshape": base.get("length", 0),
                    "slot": 2 * base.get("radius", 0), "disc": 2 * base.get("radius", 0)}[k] // 2 + 2
            out.append(Extrusion((loop,), XZ, _mm(half), 0.0, CUT, SYMMETRIC))
            continue
        if kind.endswith("circle"):
            loop = (Circle(_mm(f["x"]), _mm(f["y"]), _mm(f["radius"])),)
        else:
            loop = _rect(f["x"], f["y"], f["width"], f["length"])
        if kind.startswith("boss"):
            plane = Plane(origin=(0.0, 0.0, _mm(top)))
            out.append(Extrusion((loop,), plane, _mm(f["depth"]), 0.0, JOIN, ONE_SIDE))
        else:
            plane = Plane(origin=(0.0, 0.0, _mm(top - f["depth"])))
            out.append(Extrusion((loop,), plane, _mm(f["depth"]), 0.0, CUT, ONE_SIDE))
    return tuple(out)


# --- plans and instructions ---------------------------------------------------------------------------------

def plan_words(specs: Sequence[dict]) -> tuple[str, ...]:
    """The chain-like plan: one step per operation, sketch then extrude, no numbers."""
    words: list[str] = []
    base = specs[0]
    words += ["sketch", "xy", base["kind"]] + (["hole"] if "hole_r" in base else []) + [";", "extrude", "new", ";"]
    for f in specs[1:]:
        kind = f["kind"]
        if kind == "cross_hole":
            words += ["sketch", "xz", "circle", ";", "extrude", "cut", "symmetric", ";"]
        else:
            shape = "circle" if kind.endswith("circle") else "rect"
            op = "join" if kind.startswith("boss") else "cut"
            words += ["sketch", "top", shape, ";", "extrude", op, ";"]
    return tuple(words[:-1])


_BASE_NAME = {"rect": "rectangular plate", "lshape": "l-shaped plate", "slot": "slot-shaped plate",
              "disc": "round disc"}
_FEATURE_NAME = {"boss_circle": "round boss", "boss_rect": "square boss", "pocket_circle": "round pocket",
                 "pocket_rect": "square pocket", "cross_hole": "cross hole"}


def _describe(specs: Sequence[dict], level: int, rng: np.random.Generator) -> tuple[str, list[tuple[int, str, int]]]:
    words: list[str] = []
    reqs: list[tuple[int, str, int]] = []

    def say(k: int, role: str, value: int, *phrase: str):
        words.extend(phrase)
        words.append(str(value))
        reqs.append((k, role, value))

    base = specs[0]
    words += [str(rng.choice(["a", "make", "design"])), _BASE_NAME[base["kind"]]]
    if level >= 1:
        if "width" in base:
            say(0, "width", base["width"], "width")
            say(0, "length", base["length"], "length")
        elif base["kind"] == "slot":
            say(0, "length", base["length"], "length")
            say(0, "radius", base["radius"], "radius")
        else:
            say(0, "radius", base["radius"], "radius")
        say(0, "depth", base["depth"], "thickness")
    if base["kind"] == "lshape" and level >= 2:
        say(0, "notch_w", base["notch_w"], "notch", "width")
        say(0, "notch_l", base["notch_l"], "notch", "length")
    if "hole_r" in base:
        words += ["with", "a", "through", "hole"]
        if level >= 2:
            say(0, "hole_r", base["hole_r"], "radius")
        if level >= 3:
            say(0, "hole_x", base["hole_x"], "at", "x")
            say(0, "hole_y", base["hole_y"], "y")
    for k, f in enumerate(specs[1:], start=1):
        words += [str(rng.choice(["then", "and", "plus"])), "a", _FEATURE_NAME[f["kind"]]]
        if level >= 2:
            if "radius" in f:
                say(k, "radius", f["radius"], "radius")
            else:
                say(k, "width", f["width"], "width")
                say(k, "length", f["length"], "length")
            if "depth" in f:
                say(k, "depth", f["depth"], "height" if f["kind"].startswith("boss") else "depth")
        if level >= 3:
            say(k, "x", f["x"], "at", "x")
            if "y" in f:
                say(k, "y", f["y"], "y")
            else:
                say(k, "height", f["height"], "z")
    return " ".join(words), reqs


def make_part(rng: np.random.Generator, *, max_extrusions: int = 3) -> Part:
    base = _base(rng)
    specs = [base]
    n_features = int(rng.integers(0, max_extrusions))
    for _ in range(n_features):
        for _attempt in range(4):
            f = _feature(rng, base, "hole_r" in base)
            if f is not None and not any(_conflict(f, g, base["depth"]) for g in specs):
                specs.append(f)
                break
    texts, reqs = zip(*(_describe(specs, level, rng) for level in range(len(LEVELS))))
    return Part(_extrusions(specs), plan_words(specs), tuple(texts), tuple(tuple(r) for r in reqs),
                tuple(specs))


def make_corpus(n: int, seed: int, *, max_extrusions: int = 3) -> list[Part]:
    """`n` parts from `np.random.default_rng(seed)`: the same list for the same arguments."""
    if n < 1:
        raise ValueError(f"n={n}: expected >= 1")
    if not 1 <= max_extrusions <= 3:
        raise ValueError(f"max_extrusions={max_extrusions}: expected 1..3")
    rng = np.random.default_rng(seed)
    return [make_part(rng, max_extrusions=max_extrusions) for _ in range(n)]


# --- measuring a program's stated dimensions ----------------------------------------------------------------

def _bbox(loop) -> tuple[float, float, float, float]:
    from generative.cad.executor import loop_points
    pts = loop_points(loop)
    return float(pts[:, 0].min()), float(pts[:, 0].max()), float(pts[:, 1].min()), float(pts[:, 1].max())


def measure(program: Program) -> dict[tuple[int, str], float]:
    """The dimensions a program realises, keyed (extrusion index, role), in mm (1 mm = one level): what the
    requirement-satisfaction rate compares against the instruction's stated values. Unmeasurable parts of a
    malformed program are skipped (the requirement then counts as unmet)."""
    out: dict[tuple[int, str], float] = {}
    for k, ext in enumerate(program):
        try:
            outer = ext.loops[0]
            x0, x1, y0, y1 = _bbox(outer)
        except Exception:  # noqa: BLE001 - a degenerate loop has no dimensions to measure
            continue
        out[(k, "depth")] = ext.e1 / MM
        if k > 0 and ext.extent == SYMMETRIC:  # cross hole: sketch y is height above the base
            out[(k, "height")] = (y0 + y1) / 2 / MM
        if len(outer) == 1 and isinstance(outer[0], Circle):
            out[(k, "radius")] = outer[0].r / MM
            out[(k, "x")], out[(k, "y")] = outer[0].x / MM, outer[0].y / MM
        elif any(isinstance(c, Arc) for c in outer):  # slot
            out[(k, "radius")] = (y1 - y0) / 2 / MM
            out[(k, "length")] = (x1 - x0 - (y1 - y0)) / MM
        else:
            out[(k, "width")], out[(k, "length")] = (x1 - x0) / MM, (y1 - y0) / MM
            out[(k, "x")], out[(k, "y")] = (x0 + x1) / 2 / MM, (y0 + y1) / 2 / MM
            if len(outer) == 6:  # L-shape: the notch is cut from the top-right corner
                xs = sorted({round(c.x / MM, 6) for c in outer if isinstance(c, Line)})
                ys = sorted({round(c.y / MM, 6) for c in outer if isinstance(c, Line)})
                if len(xs) == 3 and len(ys) == 3:
                    out[(k, "notch_w")] = x1 / MM - xs[1]
                    out[(k, "notch_l")] = y1 / MM - ys[1]
        for inner in ext.loops[1:2]:
            if len(inner) == 1 and isinstance(inner[0], Circle):
                c = inner[0]
                out[(k, "hole_r")], out[(k, "hole_x")], out[(k, "hole_y")] = c.r / MM, c.x / MM, c.y / MM
    return out
