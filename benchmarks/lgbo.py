"""LGBO with simulated preferences on Hartmann-6 and the Olympus pools: aligned / misaligned / random boxes vs
plain GP-BO. Writes benchmarks/results/lgbo.json (+ lgbo_<problem>.png) and the README table.

    nice -n 10 .venv/bin/python benchmarks/lgbo.py --seeds 20 --iterations 30          # the issue's scale
    nice -n 10 .venv/bin/python benchmarks/lgbo.py --seeds 3 --iterations 8 --no-readme # a quick look

Claims (each marked held / not held from the run):
- aligned_faster_<problem>: aligned LGBO reaches 90 % of the optimum in fewer iterations (mean over seeds;
  never-reached counts as iterations + 1) than plain BO, on Hartmann-6 and on each Olympus pool;
- misaligned_bounded: misaligned LGBO's final normalised regret is at most 2x plain BO's + 0.02 on every problem;
- random_no_gain: a random box of the same size and confidence is not faster than plain BO (the paired mean
  difference in iterations-to-90 % is not below -2 standard errors, all problems pooled).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.results import RESULTS_DIR, claim, write_results  # noqa: E402
from optimization.lgbo import configs, train  # noqa: E402
from optimization.lgbo.data import get_problem  # noqa: E402

MISALIGNED_FACTOR, MISALIGNED_SLACK = 2.0, 0.02


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", default="hartmann6,crossed_barrel,hplc,lnp3")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--seed-batch", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--candidates", type=int, default=8192)
    ap.add_argument("--fit-steps", type=int, default=40)
    ap.add_argument("--name", default="lgbo")
    ap.add_argument("--no-readme", action="store_true")
    ap.add_argument("--merge", help="comma-separated result names (e.g. partial per-problem runs) to combine "
                                    "into --name instead of running")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args)
    problems = tuple(args.problems.split(","))
    config = dataclasses.replace(configs.paper(), problems=problems, seeds=args.seeds, seed_batch=args.seed_batch,
                                 iterations=args.iterations, n_candidates=args.candidates, fit_steps=args.fit_steps)
    start, load_at_start = time.perf_counter(), os.getloadavg()[0]
    rows = []
    for name in problems:
        problem = get_problem(name)
        t0 = time.perf_counter()
        curves = train.run_problem(problem, config)  # (arms, seeds, T+1)
        secs = time.perf_counter() - t0
        progress = (curves - problem.floor) / (problem.optimum - problem.floor)
        ttt = train.iterations_to_target(progress, config.target)
        summary = train.summarise(problem, curves, config)
        train.plot_curves(RESULTS_DIR / f"{args.name}_{name}.png", f"{name} ({args.seeds} seeds)",
                          {a: summary[a] for a in config.arms}, config.target)
        for i, arm in enumerate(config.arms):
            rows.append({"problem": name, "arm": arm, "seeds": args.seeds, "iterations": config.iterations,
                         "iters_to_90_mean": round(float(ttt[i].mean()), 2),
                         "iters_to_90_median": float(np.median(ttt[i])),
                         "reached_90": round(float((ttt[i] <= config.iterations).mean()), 2),
                         "final_pct_of_opt": round(100 * float(progress[i, :, -1].mean()), 2),
                         "final_norm_regret": round(float(1 - progress[i, :, -1].mean()), 4),
                         "seconds": round(secs, 1),
                         "per_seed_iters_to_90": ttt[i].tolist(),
                         "per_seed_final_progress": progress[i, :, -1].tolist(),
                         "curve_mean_pct": [round(100 * v, 3) for v in progress[i].mean(0)]})
        print(f"{name}: {secs:.0f} s; iters-to-90 mean per arm "
              + ", ".join(f"{a}={ttt[i].mean():.2f}" for i, a in enumerate(config.arms)), flush=True)
        # written after every problem, so a run cut short still leaves its finished problems
        path = write_results(args.name, rows=rows, claims=make_claims(rows, config.arms),
                             wall_seconds=time.perf_counter() - start,
                             scale=scale(args, config, problems, load_at_start))
    for c in make_claims(rows, config.arms):
        print(("HELD     " if c["held"] else "NOT HELD ") + c["id"] + ": " + c["evidence"])
    print(f"wrote {path}")
    if not args.no_readme:
        render_readme()
    return 0


def render_readme() -> None:
    """Refresh the results tables of optimization/lgbo/README.md only (benchmarks/render.py does every README)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from render import load_all, render_text

    readme = ROOT / "optimization" / "lgbo" / "README.md"
    readme.write_text(render_text(readme.read_text(), load_all()))


def scale(args, config, problems, load_at_start: float) -> dict:
    return {"problems": list(problems), "arms": list(config.arms), "seeds": args.seeds,
            "iterations": args.iterations, "n_init": config.n_init, "q": config.q, "n_grid": config.n_grid,
            "n_candidates": args.candidates, "fit_steps": args.fit_steps, "confidence": config.confidence,
            "box_e": config.box_e, "jitter": config.jitter,
            "issue_scale": "20 seeds x 30 iterations",
            "machine": f"{os.cpu_count()} CPU cores, 1-min load average {load_at_start:.1f} at start"}


def merge(args) -> int:
    """Combine finished runs (same arms and iterations) into one results file and recompute the claims."""
    import json

    start = time.perf_counter()
    rows, scales, walls, parts = [], [], 0.0, []
    for name in args.merge.split(","):
        rec = json.loads((RESULTS_DIR / f"{name}.json").read_text())
        rows += rec["rows"]
        scales.append(rec["scale"])
        walls += rec["wall_seconds"]
        parts.append({k: rec[k] for k in ("command", "git_commit", "wall_seconds")} | {"name": name})
    arms = scales[0]["arms"]
    if any(s["arms"] != arms for s in scales):
        raise ValueError(f"runs {args.merge} differ in their arms; cannot merge")
    merged = dict(scales[0], problems=[r["problem"] for r in rows if r["arm"] == arms[0]],
                  seeds={",".join(s_["problems"]): s_["seeds"] for s_ in scales},
                  iterations={",".join(s_["problems"]): s_["iterations"] for s_ in scales},
                  merged_from=args.merge.split(","))
    claims = make_claims(rows, arms)
    for c in claims:
        print(("HELD     " if c["held"] else "NOT HELD ") + c["id"] + ": " + c["evidence"])
    path = write_results(args.name, rows=rows, claims=claims, wall_seconds=walls + time.perf_counter() - start,
                         scale=merged, parts=parts)
    print(f"wrote {path}")
    if not args.no_readme:
        render_readme()
    return 0


def make_claims(rows, arms) -> list[dict]:
    """Claims from the rows' per-seed data (so merged partial runs give the same claims as one run)."""
    table = {(r["problem"], r["arm"]): r for r in rows}
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    ttt = {k: np.asarray(r["per_seed_iters_to_90"], float) for k, r in table.items()}
    fin = {k: np.asarray(r["per_seed_final_progress"], float) for k, r in table.items()}
    out = []
    if "aligned" in arms:
        for p in problems:
            a, b = ttt[p, "aligned"], ttt[p, "none"]
            iterations = table[p, "none"]["iterations"]
            out.append(claim(f"aligned_faster_{p}",
                             f"aligned LGBO reaches 90% of the optimum of {p} in fewer iterations than plain BO",
                             bool(a.mean() < b.mean()),
                             f"mean iterations to 90%: aligned {a.mean():.2f} vs plain {b.mean():.2f} "
                             f"(medians {np.median(a):.1f} vs {np.median(b):.1f}; aligned faster on "
                             f"{int((a < b).sum())}/{len(a)} seeds, slower on {int((a > b).sum())}; not reached "
                             f"counts as {iterations + 1})"))
    if "misaligned" in arms:
        parts, ok = [], True
        for p in problems:
            rm, rn = 1 - fin[p, "misaligned"].mean(), 1 - fin[p, "none"].mean()
            ok &= bool(rm <= MISALIGNED_FACTOR * rn + MISALIGNED_SLACK)
            parts.append(f"{p} {rm:.4f} vs {rn:.4f}")
        out.append(claim("misaligned_bounded",
                         f"misaligned LGBO's final normalised regret stays within {MISALIGNED_FACTOR:g}x plain BO's "
                         f"+ {MISALIGNED_SLACK} on every problem",
                         ok, "final normalised regret (1 - best/optimum) misaligned vs plain: " + "; ".join(parts)))
    if "random" in arms:
        diff = np.concatenate([ttt[p, "random"] - ttt[p, "none"] for p in problems])
        sem = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
        per = "; ".join(f"{p} {ttt[p, 'random'].mean():.2f} vs {ttt[p, 'none'].mean():.2f}" for p in problems)
        out.append(claim("random_no_gain",
                         "a random box of the same size and confidence gives no gain over plain BO "
                         "(paired mean difference in iterations to 90% not below -2 s.e.)",
                         bool(diff.mean() >= -2 * sem),
                         f"random - plain = {diff.mean():+.2f} +- {sem:.2f} iterations over {len(diff)} runs; "
                         f"per problem random vs plain: {per}"))
        if "aligned" in arms:  # the paper's own ablation: a random box is slower than the LLM's (aligned) box
            d2 = np.concatenate([ttt[p, "random"] - ttt[p, "aligned"] for p in problems])
            out.append(claim("random_slower_than_aligned",
                             "(paper's ablation) a random box of the same size and confidence is slower than the "
                             "aligned preference (mean iterations to 90%, all problems pooled)",
                             bool(d2.mean() > 0),
                             f"random - aligned = {d2.mean():+.2f} +- "
                             f"{(d2.std(ddof=1) / np.sqrt(len(d2)) if len(d2) > 1 else 0.0):.2f} iterations over "
                             f"{len(d2)} runs"))
    return out


if __name__ == "__main__":
    sys.exit(main())
