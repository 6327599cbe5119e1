"""Questions (prompt text), JSONL export in a documented schema, and split statistics (the datasheet).

One JSONL record per (item, variant). Config names: where the released dataset
(`Raidriar-Dai/executable-counterfactuals`, per its dataset card) has a configuration for the same split and
variant, the export uses that exact name (`RELEASED_CONFIGS`: `code-if_else-counterfactual`,
`math-gsm-interventional`, `code-if_else-counterfactual-train`, ...) and records it in `released_config`;
every other (split, variant) keeps our own name `<domain>-<split>-<variant>` and `released_config` is null.
A matching name means the same *kind* of question only: the released rows could not be downloaded here, so
the items, prompt text, answer format and schema are our reconstruction and do not match the released files.
Schema, every field always present:

| field | type | meaning |
|---|---|---|
| id | str | `<item_id>-<variant>` |
| item_id | str | shared by the three variants of one item |
| config | str | the released name where one exists (`RELEASED_CONFIGS`), else `<domain>-<split>-<variant>` |
| released_config | str or null | the released configuration of the same split and variant, null where there is none |
| split, variant, domain | str | split name; counterfactual / interventional / factual; code / math |
| template_id, difficulty | str, int | the template (`if_else/T3`) and the difficulty level (1-3) |
| code | str | the Python program (`def f(x)`; latents drawn by `random.randint(lo, hi)`) |
| story | str or null | the word problem (math split) |
| latents | [[name, lo, hi]] | latent names and ranges |
| x_factual, y_factual, x_intervened | int | the factual pair and the intervened input |
| revealed_latents | {name: int} or null | null for counterfactual records (r is never in them) |
| question | str | the prompt text (the harness sends it as the user message) |
| answer | [int] | the sorted answer set |
| consistent_latents | [[int]] | the abduction set (null outside counterfactual) |
| prior_answer | [int] | the answer set without the observation (null outside counterfactual) |
"""

from __future__ import annotations

import collections
import json
import pathlib
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.config import BadInputError
from core.data import input_file
from rl_tools.counterfactuals.generate import VARIANTS, Item, SplitStats

RELEASED_CONFIGS = {  # (split, variant) -> configuration name on the released dataset's card
    ("if_else", "counterfactual"): "code-if_else-counterfactual",
    ("if_else_long", "counterfactual"): "code-if_else_long-counterfactual",
    ("multi_r", "counterfactual"): "code-multi_r-counterfactual",
    ("while", "counterfactual"): "code-while-counterfactual",
    ("multi_r", "interventional"): "code-multi_r-interventional",
    ("while", "interventional"): "code-while-interventional",
    ("math", "counterfactual"): "math-gsm-counterfactual",
    ("math", "interventional"): "math-gsm-interventional",
    ("if_else_train", "counterfactual"): "code-if_else-counterfactual-train",
}


def config_name(split: str, variant: str) -> str:
    """The released configuration's name for (split, variant) where there is one, else ours."""
    domain = "math" if split == "math" else "code"
    return RELEASED_CONFIGS.get((split, variant), f"{domain}-{split}-{variant}")


ANSWER_FORMAT = "Answer with the set of every possible value in braces, e.g. {1, 4}; a single value is {3}."


def _latent_text(item: Item) -> str:
    return ", ".join(f"{n} = {v}" for n, v in zip(item.program.latent_names, item.r_true))


def _names(item: Item) -> str:
    names = item.program.latent_names
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def question(item: Item, variant: str) -> str:
    """The prompt of one variant. Counterfactual prompts never contain the latent values."""
    if variant not in VARIANTS:
        raise BadInputError(f"variant={variant!r}: expected one of {VARIANTS}")
    lat = _names(item)
    if item.story is not None:
        head = item.story + "\n\n"
        if variant == "counterfactual":
            body = (f"On one day x was {item.x0} and the answer was {item.y0}. Had x been {item.x1} on that same day "
                    f"(the same {lat}), what would the answer have been?")
        elif variant == "interventional":
            body = (f"On one day x was {item.x0} and the answer was {item.y0}; that day {_latent_text(item)}. Had x "
                    f"been {item.x1} on that same day, what would the answer have been?")
        else:
            body = f"On one day {_latent_text(item)} and x was {item.x0}. What was the answer that day?"
        return head + body + " " + ANSWER_FORMAT
    head = f"```python\n{item.code}```\n"
    if variant == "counterfactual":
        body = (f"The function f draws {lat} once with random.randint; the value is hidden from you and stays the "
                f"same across the calls below. We ran f({item.x0}) and it returned {item.y0}. With the same {lat}, "
                f"what would f({item.x1}) have returned?")
    elif variant == "interventional":
        body = (f"The function f draws {lat} once with random.randint. We ran f({item.x0}) and it returned "
                f"{item.y0}; in that run {_latent_text(item)}. With the same {lat}, what would f({item.x1}) have "
                f"returned?")
    else:
        body = (f"The function f draws {lat} once with random.randint. Suppose {_latent_text(item)}. "
                f"What does f({item.x0}) return?")
    return head + body + " " + ANSWER_FORMAT


def record(item: Item, variant: str) -> dict[str, Any]:
    cf = variant == "counterfactual"
    return {
        "id": f"{item.id}-{variant}", "item_id": item.id, "config": config_name(item.split, variant),
        "released_config": RELEASED_CONFIGS.get((item.split, variant)),
        "split": item.split, "variant": variant, "domain": item.domain, "template_id": item.template_id,
        "difficulty": item.difficulty, "code": item.code, "story": item.story,
        "latents": [list(t) for t in item.program.latents], "x_factual": item.x0, "y_factual": item.y0,
        "x_intervened": item.x1,
        "revealed_latents": None if cf else dict(zip(item.program.latent_names, item.r_true)),
        "question": question(item, variant), "answer": list(item.answer(variant)),
        "consistent_latents": [list(r) for r in item.consistent] if cf else None,
        "prior_answer": list(item.prior) if cf else None,
    }


def write_jsonl(items: Iterable[Item], path: str | pathlib.Path, variants: Sequence[str] = VARIANTS) -> int:
    """Write one record per (item, variant); returns the number of records."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w") as fh:
        for item in items:
            for v in variants:
                fh.write(json.dumps(record(item, v), sort_keys=True) + "\n")
                n += 1
    return n


def read_jsonl(path: str | pathlib.Path) -> list[dict[str, Any]]:
    path = pathlib.Path(path)
    if not path.exists():
        raise BadInputError(f"path {str(path)!r}: expected an existing JSONL file")
    input_file(path, "a JSONL file (one JSON object per line)", allow_empty=True)
    try:
        text = path.read_text()
    except UnicodeDecodeError as err:
        raise BadInputError(f"{path}: not UTF-8 text ({err}); expected a JSONL file") from None
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadInputError(f"{path}:{i}: expected a JSON object per line ({err.msg})") from None
            if not isinstance(row, dict):
                raise BadInputError(f"{path}:{i}: a JSON {type(row).__name__}: expected a JSON object per line")
            rows.append(row)
    return rows


def split_statistics(items: Mapping[str, Sequence[Item]], stats: Mapping[str, SplitStats]) -> list[dict[str, Any]]:
    """One row per split: sizes, templates, answer-set sizes, filtered and duplicate counts."""
    rows = []
    for split, its in items.items():
        st = stats[split]
        sizes = [len(it.answer_cf) for it in its]
        prior = [len(it.prior) for it in its]
        tried = st.items + st.filtered_abduction_irrelevant + st.duplicates + st.rejected_loop_limit
        rows.append({
            "split": split, "items": len(its), "templates": len({it.template_id for it in its}),
            "difficulty_1/2/3": "/".join(str(sum(it.difficulty == d for it in its)) for d in (1, 2, 3)),
            "cf_set_size_mean": round(statistics.fmean(sizes), 3) if sizes else 0.0,
            "cf_unique_frac": round(sum(s == 1 for s in sizes) / max(len(sizes), 1), 3),
            "prior_set_size_mean": round(statistics.fmean(prior), 3) if prior else 0.0,
            "filtered_abduction_irrelevant": st.filtered_abduction_irrelevant,
            "filtered_frac_of_draws": round(st.filtered_abduction_irrelevant / max(tried, 1), 3),
            "duplicates": st.duplicates,
        })
    return rows


def format_table(rows: Sequence[Mapping[str, Any]], markdown: bool = False) -> str:
    if not rows:
        return "(no rows)"
    header = list(rows[0])
    cells = [[str(r[h]) for h in header] for r in rows]
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths)) for cell in cells]
    return "\n".join(lines)


def template_counts(items: Mapping[str, Sequence[Item]]) -> dict[str, dict[str, int]]:
    return {s: dict(sorted(collections.Counter(it.template_id for it in its).items())) for s, its in items.items()}
