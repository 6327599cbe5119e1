"""Seeded, deterministic generation of executable-counterfactual items.

An item is a program with hidden latent(s) r, a factual pair (x0, y0 = f(x0; r*)) and an intervened input
x1. Its three questions share the program:

- counterfactual: r hidden, (x0, y0) observed; answer {f(x1; r) : r consistent with f(x0; r) = y0}
  (abduction, intervention, prediction);
- interventional twin: r revealed; answer {f(x1; r*)};
- factual-only control: r revealed; answer {f(x0; r*)} (execution alone).

Items whose counterfactual set equals the prior set {f(x1; r) : any r} do not need abduction (the
observation tells nothing, or the output does not depend on r); they are filtered and counted.
Duplicates (same program up to surface names, same query) are dropped and counted. Splits: `if_else_train`
and `if_else` share the 8 training templates (in-distribution) but are split **by program**: a program (its
canonical compact form, `programs.canonical`, so renaming variables does not make a new one) belongs to the
test side when the first bytes of its SHA-256 are 0 mod 5 and to the training side otherwise, for every seed
and size, so no test program and no exact test computation (program, input, latent) appears in training
(`leakage` measures both; tested). `if_else_long`, `while`, `multi_r` and `math` use their own templates only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterable
from typing import Any

from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals.templates import FAMILIES, LEVELS, Template, templates_of

SPLITS = ("if_else_train", "if_else", "if_else_long", "while", "multi_r", "math")
FAMILY_OF = {"if_else_train": "if_else", "if_else": "if_else", "if_else_long": "if_else_long",
             "while": "while", "multi_r": "multi_r", "math": "math"}
VARIANTS = ("counterfactual", "interventional", "factual")


@dataclasses.dataclass(frozen=True)
class Item:
    """One generated item (all three variants). `r_true` is hidden from counterfactual prompts."""

    id: str
    split: str
    template_id: str
    difficulty: int
    program: P.Program
    x0: int
    y0: int
    x1: int
    r_true: tuple[int, ...]
    consistent: tuple[tuple[int, ...], ...]  # latents consistent with (x0, y0)
    answer_cf: tuple[int, ...]  # sorted sets
    answer_iv: tuple[int, ...]
    answer_factual: tuple[int, ...]
    prior: tuple[int, ...]
    story: str | None = None

    @property
    def code(self) -> str:
        return P.to_python(self.program)

    @property
    def domain(self) -> str:
        return "math" if self.story is not None else "code"

    def answer(self, variant: str) -> tuple[int, ...]:
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}: expected one of {VARIANTS}")
        return {"counterfactual": self.answer_cf, "interventional": self.answer_iv,
                "factual": self.answer_factual}[variant]

    def key(self) -> tuple:
        return (P.canonical(self.program), self.x0, self.y0, self.x1)


@dataclasses.dataclass
class SplitStats:
    split: str
    items: int = 0
    attempts: int = 0
    filtered_abduction_irrelevant: int = 0  # cf set == prior set
    filtered_r_independent: int = 0  # ... of which the output does not depend on r at all
    duplicates: int = 0
    rejected_loop_limit: int = 0
    other_side: int = 0  # if_else programs drawn for the other side of the train/test program split

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


TEST_SHARE = 5  # one program in TEST_SHARE goes to the in-distribution test side


def program_side(program: P.Program) -> str:
    """"test" or "train": the in-distribution split side of a program, from the hash of its canonical form."""
    digest = hashlib.sha256(P.canonical(program).encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") % TEST_SHARE == 0 else "train"


SIDE_OF = {"if_else_train": "train", "if_else": "test"}


def computations(item: Item) -> set[tuple]:
    """Every (program, input, latents) execution an item's questions and its teacher trace involve: f(x0; r)
    and f(x1; r) for every latent r (the factual and interventional questions are two of them)."""
    canon = P.canonical(item.program)
    return {(canon, x, r) for x in (item.x0, item.x1) for r in P.latent_domain(item.program)}


def leakage(train: Iterable[Item], test: Iterable[Item]) -> dict[str, float]:
    """Share of test items whose program appears in `train`, and share of the test items' computations
    (`computations`) that any training item also involves."""
    train = list(train)
    test = list(test)
    progs = {P.canonical(it.program) for it in train}
    comps = set().union(*(computations(it) for it in train)) if train else set()
    test_comps = set().union(*(computations(it) for it in test)) if test else set()
    return {"program_overlap": sum(P.canonical(it.program) in progs for it in test) / max(len(test), 1),
            "computation_overlap": len(test_comps & comps) / max(len(test_comps), 1),
            "test_programs": len({P.canonical(it.program) for it in test}), "train_programs": len(progs)}


def solve(program: P.Program, x0: int, y0: int, x1: int) -> tuple[tuple, tuple[int, ...], tuple[int, ...]]:
    """(consistent latents, counterfactual answer set, prior set) by enumerating every latent value."""
    domain = P.latent_domain(program)
    consistent = tuple(r for r in domain if P.run(program, x0, r) == y0)
    cf = sorted({P.run(program, x1, r) for r in consistent})
    prior = sorted({P.run(program, x1, r) for r in domain})
    return consistent, tuple(cf), tuple(prior)


def _make(template: Template, split: str, index: int, rng: random.Random, level: int,
          stats: SplitStats) -> Item | None:
    k = LEVELS[level]
    program = template.build(rng, k)
    if split in SIDE_OF and program_side(program) != SIDE_OF[split]:
        stats.other_side += 1
        return None
    x0 = rng.randint(template.x_lo, k.x_hi)
    x1 = rng.randint(template.x_lo, k.x_hi - 1)
    x1 = x1 + 1 if x1 >= x0 else x1  # x1 != x0
    domain = P.latent_domain(program)
    r_true = domain[rng.randrange(len(domain))]
    try:
        y0 = P.run(program, x0, r_true)
        consistent, cf, prior = solve(program, x0, y0, x1)
    except P.LoopLimitError:
        stats.rejected_loop_limit += 1
        return None
    if cf == prior:
        stats.filtered_abduction_irrelevant += 1
        stats.filtered_r_independent += len(prior) == 1
        return None
    return Item(id=f"{split}-{index:06d}", split=split, template_id=template.id, difficulty=level, program=program,
                x0=x0, y0=y0, x1=x1, r_true=tuple(r_true), consistent=consistent, answer_cf=cf,
                answer_iv=(P.run(program, x1, r_true),), answer_factual=(y0,), prior=prior,
                story=template.story(program) if template.story else None)


def generate_split(split: str, n: int, *, seed: int = 0, levels: Iterable[int] = (1, 2, 3),
                   exclude: set | None = None) -> tuple[list[Item], SplitStats]:
    """`n` items of `split`, deterministic in (split, seed, levels). `exclude`: keys (`Item.key()`) that must not
    appear (e.g. the training items, for the in-distribution test)."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    if n < 0:
        raise ValueError(f"n={n}: expected >= 0")
    levels = tuple(levels)
    if not levels or any(lv not in LEVELS for lv in levels):
        raise ValueError(f"levels={levels}: expected a non-empty subset of {tuple(LEVELS)}")
    rng = random.Random(f"counterfactuals:{split}:{seed}")
    templates = templates_of(FAMILY_OF[split])
    seen = set(exclude or ())
    stats = SplitStats(split)
    items: list[Item] = []
    while len(items) < n:
        stats.attempts += 1
        if stats.attempts > 60 * n + 1000:
            raise RuntimeError(f"split {split}: only {len(items)} of {n} distinct items after {stats.attempts} "
                               "attempts; lower n or widen the difficulty levels")
        template = templates[rng.randrange(len(templates))]
        level = levels[rng.randrange(len(levels))]
        item = _make(template, split, len(items), rng, level, stats)
        if item is None:
            continue
        if item.key() in seen:
            stats.duplicates += 1
            continue
        seen.add(item.key())
        items.append(item)
    stats.items = len(items)
    return items, stats


def trivial_fraction(split: str, n: int = 2000, *, seed: int = 0) -> float:
    """Share of raw (unfiltered, undeduplicated) draws that are abduction-irrelevant."""
    _, stats = generate_split(split, n, seed=seed)
    tried = stats.items + stats.filtered_abduction_irrelevant + stats.duplicates
    return stats.filtered_abduction_irrelevant / max(tried, 1)


def generate_all(sizes: dict[str, int], *, seed: int = 0, levels: Iterable[int] = (1, 2, 3)
                 ) -> tuple[dict[str, list[Item]], dict[str, SplitStats]]:
    """Every split in `sizes`; the in-distribution `if_else` test excludes all `if_else_train` items."""
    for split in sizes:
        if split not in SPLITS:
            raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    items: dict[str, list[Item]] = {}
    stats: dict[str, SplitStats] = {}
    train_keys: set = set()
    for split in SPLITS:
        if split not in sizes:
            continue
        exclude = train_keys if split == "if_else" else None
        items[split], stats[split] = generate_split(split, sizes[split], seed=seed, levels=levels,
                                                    exclude=exclude)
        if split == "if_else_train":
            train_keys = {it.key() for it in items[split]}
    return items, stats


__all__ = ["Item", "SplitStats", "SPLITS", "VARIANTS", "FAMILIES", "solve", "generate_split", "generate_all",
           "trivial_fraction", "program_side", "computations", "leakage"]
