"""Benchmark of interp/scale_analysis: P* of 2- and 3-layer erf networks on He3 against the scale analysis.

    .venv/bin/python benchmarks/scale_analysis.py [--preset paper] [--budget-minutes 30] [--set key=value ...]
    .venv/bin/python benchmarks/scale_analysis.py --claims-from-rows

Runs the `paper` preset (issue 43's repairs at a shared-CPU scale: annealed chains in both directions, equal
simulated time per stage, split-R-hat per (seed, P) with failing points left out of every fit, second-layer
specialists on w*.x, planting matched to the predicted pattern, N >= 4d, a kappa scan, 3 seeds), writes
benchmarks/results/scale_analysis.json after every point (so a run cut by its time budget still leaves its
measured rows), the PNG plots, and the README results section. Claims are built by train.make_claims through
core.results.interval_claim / paired_claim; only the paper's stated predictions are claims, the project's
stricter ones say "project's prediction".
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

print = functools.partial(print, flush=True)  # noqa: A001 (progress lines reach a redirected log)
from core import config as core_config  # noqa: E402
from core.results import recompute_claims, write_results  # noqa: E402
from interp.scale_analysis import configs, train  # noqa: E402

NAME = "scale_analysis"


def claims_from_rows(rows: list[dict]) -> list[dict]:
    """Every claim of this benchmark, recomputed from the stored rows (per-seed P* and specialist counts)."""
    return train.make_claims(rows)[0]


def render_readme(record_path: pathlib.Path, name: str = NAME) -> None:
    """Rewrite only this method's results block in interp/scale_analysis/README.md."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import render  # the shared renderer (benchmarks/render.py)
    readme = ROOT / "interp" / "scale_analysis" / "README.md"
    if readme.exists():
        text = readme.read_text()
        readme.write_text(render.render_text(text, {name: json.loads(record_path.read_text())}))


def _print_claims(claims: list[dict]) -> None:
    for c in claims:
        print({True: "HELD         ", False: "NOT HELD     ", None: "INCONCLUSIVE "}[c["held"]] + c["id"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper", help="a preset of configs.PRESETS (default paper)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value override")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="stop after the point that passes this wall-clock budget (its rows are kept)")
    ap.add_argument("--name", default=NAME, help="results file stem (default scale_analysis; e.g. a sweep-only "
                    "variant beside the committed run)")
    ap.add_argument("--out-dir", default=None, help="results directory (default benchmarks/results)")
    ap.add_argument("--claims-from-rows", "--claims-only", dest="claims_from_rows", action="store_true",
                    help="recompute the claims from the rows already in the results JSON (no sampling); command, "
                         "git_commit, wall_seconds and rows are kept as they were")
    args = ap.parse_args(argv)
    out_dir = pathlib.Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "results"
    if args.claims_from_rows:
        path = out_dir / f"{args.name}.json"
        record = recompute_claims(path, lambda rec: claims_from_rows(rec["rows"]))
        record["not_measured"] = train.make_claims(record["rows"])[1]
        path.write_text(json.dumps(record, indent=2) + "\n")
        _print_claims(record["claims"])
        return 0
    cfg = configs.PRESETS[args.preset]
    cfg = core_config.apply_overrides(cfg, args.overrides)
    t0 = time.time()
    deadline = t0 + 60 * args.budget_minutes if args.budget_minutes else None
    scale = {"preset": args.preset, "config": dataclasses.asdict(cfg),
             "note": "P* = the P at which the held-out alignment A_f (posterior mean over the kept half of both "
                     "anneals' records) crosses 1/2, interpolated in log P, per seed, only where split-R-hat of "
                     "the two anneals is < rhat_max at the grid points it rests on; exponents are per-seed "
                     "log-log slopes with t-intervals over seeds",
             "load_at_start": os.getloadavg()}

    def write(rows, missing, done=False):
        return write_results(args.name, rows=rows, claims=claims_from_rows(rows), wall_seconds=time.time() - t0,
                             scale={**scale, "load_now": os.getloadavg()}, not_measured=missing, complete=done,
                             directory=out_dir)

    result = train.experiment(cfg, on_row=lambda r, c, m: write(r, m), deadline=deadline, log=print)
    scale["stopped_early"] = result["stopped_early"]
    path = write(result["rows"], result["not_measured"], done=not result["stopped_early"])
    train.plot(result, out_dir, prefix=f"{args.name}_")
    if out_dir == ROOT / "benchmarks" / "results":
        render_readme(path, args.name)
    _print_claims(claims_from_rows(result["rows"]))
    print(f"wall {time.time() - t0:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
