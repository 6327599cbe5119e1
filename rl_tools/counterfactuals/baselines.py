"""Chance baselines beside every accuracy: what an answer that does no abduction (or no reasoning) scores.

Per item and variant, three guesses (expected exact match and set F1, exact by enumeration):

- `random_latent`: answer {f(x; r)} with r drawn uniformly from the latent domain (x = x1 for the
  counterfactual and interventional questions, x0 for the factual one): execution without abduction;
- `uniform`: a single value drawn uniformly from the answer space 0..m-1 (the range of `% m`);
- `prior`: the no-abduction prior set {f(x; r) : every r} (exact match 0 on every counterfactual item the
  generator keeps, since those whose counterfactual set equals the prior set are filtered; F1 above 0).

`chance_rows` averages them per split and variant and adds the mean answer-set size, so per-split
comparisons can account for it; `best_chance` is the strongest of the three (the bar a model must clear).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals import verify
from rl_tools.counterfactuals.generate import VARIANTS, Item

GUESSES = ("random_latent", "uniform", "prior")


def item_chance(item: Item, variant: str) -> dict[str, float]:
    """{guess_em, guess_f1 for every guess in GUESSES} for one item and variant."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: expected one of {VARIANTS}")
    gold = item.answer(variant)
    x = item.x0 if variant == "factual" else item.x1
    domain = P.latent_domain(item.program)
    outs = [P.run(item.program, x, r) for r in domain]
    m = item.program.modulus
    out = {
        "random_latent_em": sum(verify.exact_match({o}, gold) for o in outs) / len(outs),
        "random_latent_f1": sum(verify.set_f1({o}, gold) for o in outs) / len(outs),
        "uniform_em": sum(verify.exact_match({v}, gold) for v in range(m)) / m,
        "uniform_f1": sum(verify.set_f1({v}, gold) for v in range(m)) / m,
        "prior_em": verify.exact_match(set(outs), gold),
        "prior_f1": verify.set_f1(set(outs), gold),
    }
    return out


def best_chance(ch: Mapping[str, float], metric: str = "em") -> float:
    return max(ch[f"{g}_{metric}"] for g in GUESSES)


def chance_rows(items: Mapping[str, Sequence[Item]], variants: Sequence[str] = VARIANTS) -> list[dict[str, Any]]:
    """One row per (split, variant): the mean of every guess's EM and F1, the best guess's EM and F1, and
    the mean answer-set size."""
    rows = []
    for split, its in items.items():
        for v in variants:
            per = [item_chance(it, v) for it in its]
            n = max(len(per), 1)
            row: dict[str, Any] = {"split": split, "variant": v, "n": len(per)}
            for key in per[0] if per else ():
                row[key] = round(sum(p[key] for p in per) / n, 4)
            row["best_em"] = round(max(row.get(f"{g}_em", 0.0) for g in GUESSES), 4)
            row["best_f1"] = round(max(row.get(f"{g}_f1", 0.0) for g in GUESSES), 4)
            row["set_size"] = round(sum(len(it.answer(v)) for it in its) / n, 3)
            rows.append(row)
    return rows


__all__ = ["GUESSES", "item_chance", "best_chance", "chance_rows"]
