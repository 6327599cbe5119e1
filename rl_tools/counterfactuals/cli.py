"""`iclr26 cf datasheet` (split statistics), `iclr26 cf export` (JSONL per split and variant) and
`iclr26 cf eval` (the paper's interventional-vs-counterfactual table for a model behind an OpenAI-compatible
endpoint).

    iclr26 cf datasheet [--n 1000] [--n-train 5000] [--seed 0] [--markdown]
    iclr26 cf export OUT_DIR [--n 1000] [--n-train 5000] [--seed 0]
    iclr26 cf eval --endpoint http://127.0.0.1:8000/v1 --model Qwen2.5-7B-Instruct [--n 200] [--reasoning]
        [--max-tokens 4096] [--workers 8] [--cache answers.jsonl] [--out table.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

from core.config import BadInputError
from rl_tools.counterfactuals import baselines, export, generate, harness

EVAL_SPLITS = ("if_else", "if_else_long", "while", "multi_r", "math")


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
    manifest = []
    for split, its in items.items():
        for variant in generate.VARIANTS:
            name = export.config_name(split, variant)
            n = export.write_jsonl(its, out / f"{name}.jsonl", variants=(variant,))
            total += n
            released = export.RELEASED_CONFIGS.get((split, variant))
            manifest.append({"file": f"{name}.jsonl", "config": name, "split": split, "variant": variant,
                             "records": n, "released_config": released,
                             "matches": ("the released configuration's name and kind of question; items, prompts "
                                         "and schema are reconstructed, not the released rows") if released
                             else "no released configuration: ours only"})
    (out / "datasheet.json").write_text(json.dumps(export.split_statistics(items, stats), indent=2) + "\n")
    (out / "configs.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {total} records to {out}; {sum(m['released_config'] is not None for m in manifest)} of "
          f"{len(manifest)} files carry a released configuration name (configs.json says which)")
    return 0


def eval_table(result_rows, chance_rows) -> list[dict]:
    """One row per split: IV and CF exact match and F1, the gaps, and the best chance guess beside each."""
    table = {(r["split"], r["variant"]): r for r in result_rows}
    chance = {(c["split"], c["variant"]): c for c in chance_rows}
    out = []
    for split in dict.fromkeys(r["split"] for r in result_rows):
        iv, cf = table.get((split, "interventional")), table.get((split, "counterfactual"))
        row = {"split": split, "n": (iv or cf)["n"]}
        for short, r, v in (("iv", iv, "interventional"), ("cf", cf, "counterfactual")):
            if r is not None:
                c = chance[(split, v)]
                row.update({f"{short}_em": round(r["em"], 4), f"{short}_f1": round(r["f1"], 4),
                            f"{short}_chance_em": c["best_em"], f"{short}_chance_f1": c["best_f1"]})
        if iv is not None and cf is not None:
            row["gap_em"] = round(iv["em"] - cf["em"], 4)
            row["gap_f1"] = round(iv["f1"] - cf["f1"], 4)
            row["cf_set_size"] = chance[(split, "counterfactual")]["set_size"]
        row["errors"] = sum(r["errors"] for r in (iv, cf) if r is not None)
        out.append(row)
    return out


def cmd_eval(args: argparse.Namespace) -> int:
    import os
    if args.n < 1:
        raise BadInputError(f"--n {args.n}: expected >= 1 items per split")
    bad = [s for s in args.splits if s not in EVAL_SPLITS]
    if bad:
        raise BadInputError(f"--splits {bad}: expected names from {EVAL_SPLITS}")
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        adapter = harness.OpenAIChatAdapter(args.endpoint, args.model, api_key=api_key, max_tokens=args.max_tokens,
                                            workers=args.workers, reasoning=args.reasoning, retries=args.retries,
                                            timeout=args.timeout, cache_path=args.cache)
    except ValueError as err:
        raise BadInputError(str(err)) from None
    items, _ = generate.generate_all({s: args.n for s in args.splits}, seed=args.seed)
    t0 = time.perf_counter()
    result = harness.evaluate(items, adapter, variants=("interventional", "counterfactual"))
    rows = eval_table(result["rows"], baselines.chance_rows(items, ("interventional", "counterfactual")))
    print(export.format_table(rows, markdown=args.markdown))
    print(f"\n{args.model} at {args.endpoint}: {sum(len(v) for v in items.values())} items x 2 variants in "
          f"{time.perf_counter() - t0:.1f} s, {adapter.requests} HTTP requests, {len(adapter.errors)} failed prompts; "
          "chance = the best of a random-latent guess, a uniform value and the prior set on the same items")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"model": args.model, "endpoint": args.endpoint, "rows": rows,
                                                      "n": args.n, "seed": args.seed,
                                                      "errors": adapter.errors[:20]}, indent=2) + "\n")
    return 0 if not adapter.errors or len(adapter.errors) < sum(r["n"] for r in rows) else 1


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
    q = sub.add_parser("eval", help="the IV-vs-CF table of a model behind an OpenAI-compatible endpoint",
                       description="Send every item's interventional and counterfactual question to "
                                   "POST {endpoint}/chat/completions and print EM / F1 per split with the "
                                   "chance baselines beside them.")
    q.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:8000/v1")
    q.add_argument("--model", required=True, help="model name sent in the request")
    q.add_argument("--n", type=int, default=200, help="items per split (default 200)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--splits", nargs="+", default=list(EVAL_SPLITS), help=f"splits (default {' '.join(EVAL_SPLITS)})")
    q.add_argument("--max-tokens", type=int, default=2048, help="completion token budget (default 2048)")
    q.add_argument("--workers", type=int, default=8, help="requests in flight at most (default 8)")
    q.add_argument("--retries", type=int, default=4, help="retries per request with exponential backoff")
    q.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    q.add_argument("--reasoning", action=argparse.BooleanOptionalAction, default=None,
                   help="send max_completion_tokens and no temperature (default: by model name, o1/o3/o4/gpt-5)")
    q.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    q.add_argument("--cache", default=None, help="JSONL answer cache by prompt hash (reruns skip cached prompts)")
    q.add_argument("--out", default=None, help="also write the table as JSON here")
    q.add_argument("--markdown", action="store_true", help="print a markdown table")
    q.set_defaults(func=cmd_eval)
