"""`iclr26 cf datasheet` (split statistics) and `iclr26 cf export` (JSONL per split and variant).

    iclr26 cf datasheet [--n 1000] [--n-train 5000] [--seed 0] [--markdown]
    iclr26 cf export OUT_DIR [--n 1000] [--n-train 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from core.config import BadInputError
from rl_tools.counterfactuals import export, generate


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    if args.n < 1 or args.n_train < 0:
        raise BadInputError(f"--n {args.n} / --n-train {args.n_train}: expected n >= 1 and n-train >= 0")
    sizes = {s: args.n for s in generate.SPLITS}
    sizes["if_else_train"] = args.n_train
    return sizes


def cmd_datasheet(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    items, stats = generate.generate_all(_sizes(args), seed=args.seed)
    rows = export.split_statistics(items, stats)
    print(export.format_table(rows, markdown=args.markdown))
    print(f"\n{sum(len(v) for v in items.values())} items (seed {args.seed}) generated in "
          f"{time.perf_counter() - t0:.1f} s; abduction-irrelevant draws are filtered and counted.")
    if args.json:
        print(json.dumps({"rows": rows, "templates": export.template_counts(items)}, indent=2))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    items, stats = generate.generate_all(_sizes(args), seed=args.seed)
    out = pathlib.Path(args.out)
    total = 0
    for split, its in items.items():
        for variant in generate.VARIANTS:
            domain = "math" if split == "math" else "code"
            total += export.write_jsonl(its, out / f"{domain}-{split}-{variant}.jsonl", variants=(variant,))
    (out / "datasheet.json").write_text(json.dumps(export.split_statistics(items, stats), indent=2) + "\n")
    print(f"wrote {total} records to {out}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("cf", help="executable counterfactuals: datasheet and JSONL export",
                              description="Generate the executable-counterfactual splits (deterministic in "
                                          "--seed) and print their statistics or export them as JSONL.")
    sub = p.add_subparsers(dest="cf_command", metavar="SUBCOMMAND", required=True)
    for name, func, helptext in (("datasheet", cmd_datasheet, "print split statistics"),
                                 ("export", cmd_export, "write one JSONL file per split and variant")):
        q = sub.add_parser(name, help=helptext, description=helptext)
        if name == "export":
            q.add_argument("out", help="output folder")
        q.add_argument("--n", type=int, default=1000, help="items per test split (default 1000)")
        q.add_argument("--n-train", type=int, default=5000, help="if_else training items (default 5000)")
        q.add_argument("--seed", type=int, default=0)
        if name == "datasheet":
            q.add_argument("--markdown", action="store_true", help="print a markdown table")
            q.add_argument("--json", action="store_true", help="also print the rows and template counts as JSON")
        q.set_defaults(func=func)
