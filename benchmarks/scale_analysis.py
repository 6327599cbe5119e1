"""Benchmark of interp/scale_analysis: P* of 2- and 3-layer erf networks on He3 against the scale analysis.

    .venv/bin/python benchmarks/scale_analysis.py [--budget-minutes 58] [--preset bench] [--set key=value ...]

Runs the `paper` preset (the issue's acceptance scale, 6 seeds: 34 min on an idle 2-core CPU) or the smaller
`bench` scale below (for a shared machine), writes benchmarks/results/scale_analysis.json after every point (so a run cut by
its time budget still leaves its measured rows), the PNG plots, and the README results section.
"""

from __future__ import annotations

import argparse
import functools
import dataclasses
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

print = functools.partial(print, flush=True)  # noqa: A001 (progress lines reach a redirected log)
from core import config as core_config  # noqa: E402
from core.results import write_results  # noqa: E402
from interp.scale_analysis import configs, train  # noqa: E402

NAME = "scale_analysis"


def bench() -> configs.Config:
    """What fits this shared 2-core machine (run at nice 10 beside ~7 other jobs): d in {16, 32, 64} for both
    depths at widths N = d/2, the two-layer N sweep N in {16, 32, 64} at d = 16, the three-layer N1 sweep
    N1 in {4, 16, 64} at d = 16, N2 = 32; P over 4, 12, 36 times the calculator's E_min (P <= 3,456);
    2 seeds x 2 initialisations (prior draw, planted), 1,500 Langevin steps per chain."""
    return configs.Config(
        n_seeds=2, kappa=0.1, n_test=512, n_probe=128, p_over_energy=(4.0, 12.0, 36.0), bucket_ratio=3.0,
        sweeps=("two_d", "three_d", "three_n1", "two_n"),
        two_d=(16, 32, 64), two_width_ratio=0.5, three_d=(16, 32, 64), three_width_ratio=0.5,
        two_n_d=16, two_n=(16, 32, 64), three_n1_d=16, three_n1_n2=32, three_n1=(4, 16, 64),
        sampler=configs.SamplerConfig(n_records=12, record_every=125, step_size=0.7))


def render_readme(record_path: pathlib.Path) -> None:
    """Rewrite only this method's results block in interp/scale_analysis/README.md."""
    import json
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import render  # the shared renderer (benchmarks/render.py)
    readme = ROOT / "interp" / "scale_analysis" / "README.md"
    if readme.exists():
        text = readme.read_text()
        readme.write_text(render.render_text(text, {NAME: json.loads(record_path.read_text())}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper", help="paper (default), bench, or a preset of configs.PRESETS")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value override")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="stop after the point that passes this wall-clock budget (its rows are kept)")
    ap.add_argument("--out-dir", default=None, help="results directory (default benchmarks/results)")
    ap.add_argument("--claims-only", action="store_true",
                    help="recompute claims, fits and plots from the rows already in the results JSON (no sampling)")
    args = ap.parse_args(argv)
    if args.claims_only:
        import json
        out_dir = pathlib.Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "results"
        record = json.loads((out_dir / f"{NAME}.json").read_text())
        claims, fits = train.make_claims(record["rows"])
        extra = {k: v for k, v in record.items()
                 if k not in ("command", "git_commit", "wall_seconds", "rows", "claims", "fits")}
        extra.setdefault("rows_sampled_at_commit", record["git_commit"])
        path = write_results(NAME, rows=record["rows"], claims=claims, wall_seconds=record["wall_seconds"],
                             command=record["command"], fits=fits, directory=out_dir, **extra)
        train.plot({"rows": record["rows"], "fits": fits}, out_dir, prefix=f"{NAME}_")
        if out_dir == ROOT / "benchmarks" / "results":
            render_readme(path)
        for c in claims:
            print(("HELD     " if c["held"] else "NOT HELD ") + c["id"] + ": " + c["evidence"])
        return 0
    cfg = bench() if args.preset == "bench" else configs.PRESETS[args.preset]
    cfg = core_config.apply_overrides(cfg, args.overrides)
    out_dir = pathlib.Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "results"
    t0 = time.time()
    deadline = t0 + 60 * args.budget_minutes if args.budget_minutes else None
    scale = {"preset": args.preset, "config": dataclasses.asdict(cfg),
             "acceptance_scale": "d <= 64, widths <= 256, P <= 4096, seeds for intervals, within 60 min",
             "note": "P* = the P at which the held-out alignment A_f (posterior mean over both inits and the "
                     "last half of each chain) crosses 1/2, interpolated in log P; intervals are 95% t-intervals "
                     "of log-log OLS over per-seed P*"}

    def write(rows, claims, fits, done=False):
        path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.time() - t0, scale=scale,
                             fits=fits, complete=done, directory=out_dir)
        return path

    result = train.experiment(cfg, on_row=lambda r, c, f: write(r, c, f), deadline=deadline, log=print)
    scale["stopped_early"] = result["stopped_early"]
    path = write(result["rows"], result["claims"], result["fits"], done=not result["stopped_early"])
    train.plot(result, out_dir, prefix=f"{NAME}_")
    if out_dir == ROOT / "benchmarks" / "results":
        render_readme(path)
    for c in result["claims"]:
        print(("HELD     " if c["held"] else "NOT HELD ") + c["id"] + ": " + c["evidence"])
    print(f"wall {time.time() - t0:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
