"""Counterfactual teacher traces by enumeration: abduction (every latent consistent with the observation),
intervention (x := x1), prediction (f(x1) under each consistent latent), then the answer set.

Two renderings of the same steps:

- `trace_text(item)`: English, for SFT of a chat model (the `paper` preset) or as a reference solution in
  the export;
- `trace_words(item)`: the compact token language of the small model (`data.py`), for an observation
  f(8) = 3 and the question at x = 5:
  `abduce r 1 -> 4 == 4 3 F r 2 -> 3 == 3 3 T ok r 3 -> 0 == 0 3 F ... predict x 5 r 2 -> 1 ; =>` followed by
  the answer words. Each latent tuple is listed with f(x0; r) and its comparison with y0, written as a test
  the base already executes (`== a b T/F`), consistent ones marked `ok`; `predict x x1` states the
  intervention, then lists f(x1; r) for the consistent latents. Without the comparison the model must
  match y against y0 far back in the prompt: a 4-layer base SFT'd on traces without it wrote every run right
  and the `ok` marks wrong (117 of 150 first errors, seed 0), and read x0 for x1 after `predict`.

`has_abduction(text)` is the trace-analysis probe: does an output contain an explicit abduction step (the
`abduce` marker in the compact language; in English, a statement of which latent values fit the
observation)?
"""

from __future__ import annotations

import re

from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals.generate import Item


def steps(item: Item) -> dict:
    """{"abduction": [(r, f(x0; r), consistent)], "consistent": [r], "prediction": [(r, f(x1; r))],
    "answer": sorted set}."""
    domain = P.latent_domain(item.program)
    at_x0 = [(r, P.run(item.program, item.x0, r)) for r in domain]
    consistent = [r for r, y in at_x0 if y == item.y0]
    pred = [(r, P.run(item.program, item.x1, r)) for r in consistent]
    return {"abduction": [(r, y, y == item.y0) for r, y in at_x0], "consistent": consistent,
            "prediction": pred, "answer": sorted({y for _, y in pred})}


def _lat(item: Item, r: tuple) -> str:
    return ", ".join(f"{n} = {v}" for n, v in zip(item.program.latent_names, r))


def trace_text(item: Item) -> str:
    s = steps(item)
    names = ", ".join(item.program.latent_names)
    lines = [f"Abduction: try every value of {names} and keep those for which f({item.x0}) = {item.y0}."]
    for r, y, ok in s["abduction"]:
        lines.append(f"- {_lat(item, r)}: f({item.x0}) = {y}" + (" (consistent)" if ok else ""))
    lines.append("Consistent: " + "; ".join(_lat(item, r) for r in s["consistent"]) + ".")
    lines.append(f"Intervention: set x = {item.x1}, keeping {names} as inferred.")
    lines.append("Prediction:")
    for r, y in s["prediction"]:
        lines.append(f"- {_lat(item, r)}: f({item.x1}) = {y}")
    lines.append("Answer: {" + ", ".join(map(str, s["answer"])) + "}")
    return "\n".join(lines)


def trace_words(item: Item, style: str = "values") -> list[str]:
    """The compact teacher trace up to and including `=>` (the answer words follow). `style` "steps" or
    "flow" (the small model's execution traces, `data.py`) writes each run's execution before its `-> y`:
    `abduce r 1 <trace of f(x0; 1)> -> 4 == 4 3 F r 2 <...> -> 3 == 3 3 T ok ... predict x 5 r 2 <trace of
    f(x1; 2)> -> 1 ; =>`."""
    runs = {"values": None, "steps": P.step_trace, "flow": P.flow_trace}
    if style not in runs:
        raise ValueError(f"trace style={style!r}: expected one of {tuple(runs)}")
    run = runs[style]

    def execution(x, r) -> list[str]:
        return [] if run is None else run(item.program, x, r)

    s = steps(item)
    out = ["abduce"]
    for r, y, ok in s["abduction"]:
        out += ["r", *map(str, r), *execution(item.x0, r), "->", str(y), "==", str(y), str(item.y0)]
        out += ["T", "ok"] if ok else ["F"]
    out += ["predict", "x", str(item.x1)]
    for r, y in s["prediction"]:
        out += ["r", *map(str, r), *execution(item.x1, r), "->", str(y), ";"]
    return out + ["=>"]


def abduced_latents(text: str | None, n_latents: int) -> frozenset[tuple[int, ...]] | None:
    """The latents a compact trace marks `ok` in its abduction step (`abduce r v.. <run> -> y ok r ..`, up to
    `predict` or `=>`), or those an English trace in `trace_text`'s form calls consistent; None when the text
    has no abduction step in either form or a run names other than `n_latents` values. Compared with
    `steps(item)["consistent"]`, it separates a wrong abduction (planning or its execution) from a wrong
    prediction after a right one."""
    words = (text or "").split()
    if "abduce" not in words:
        return _abduced_latents_english(text or "", n_latents)
    seg = words[words.index("abduce") + 1:]
    for stop in ("predict", "=>"):
        if stop in seg:
            seg = seg[:seg.index(stop)]
    starts = [i for i, w in enumerate(seg) if w == "r"]
    if not starts or starts[0] != 0:
        return None
    consistent = set()
    for a, b in zip(starts, starts[1:] + [len(seg)]):
        run = seg[a + 1:b]
        try:
            latent = tuple(int(w) for w in run[:n_latents])
        except ValueError:
            return None
        if len(latent) != n_latents:
            return None
        if run and run[-1] == "ok":
            consistent.add(latent)
    return frozenset(consistent)


_ENGLISH_RUN = re.compile(r"^\s*-\s*(.+?):\s*f\(-?\d+\)\s*=\s*-?\d+\s*(\(consistent\))?\s*$")


def _abduced_latents_english(text: str, n_latents: int) -> frozenset[tuple[int, ...]] | None:
    """The same for `trace_text`'s English (`- r = 3: f(8) = 3 (consistent)` lines before `Intervention:`)."""
    consistent, runs = set(), 0
    for line in text.split("Intervention:")[0].splitlines():
        m = _ENGLISH_RUN.match(line)
        if not m:
            continue
        values = re.findall(r"=\s*(-?\d+)", m.group(1))
        if len(values) != n_latents:
            return None
        runs += 1
        if m.group(2):
            consistent.add(tuple(int(v) for v in values))
    return frozenset(consistent) if runs else None


_ENGLISH = re.compile(r"(abduct|consistent with|values? of [a-z0-9, ]+ (?:that|which) (?:fit|match|give|produce))",
                      re.IGNORECASE)


def has_abduction(text: str | None) -> bool:
    """Whether an output performs an explicit abduction step (see the module docstring)."""
    if not text:
        return False
    return "abduce" in text.split() or bool(_ENGLISH.search(text))


__all__ = ["steps", "trace_text", "trace_words", "has_abduction", "abduced_latents"]
