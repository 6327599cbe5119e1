"""Counterfactuals sandbox throughput before and after the defence-in-depth layers (issue 48).

Both sandboxes run in this one process, interleaved: the base commit's `rl_tools/counterfactuals/sandbox.py`
(`git show <base>:...`, loaded as its own module) and the working tree's (the static check with the format
rules, the private helper namespace, the Landlock / user-namespace filesystem layer, the read-only cwd and the
post-job check). Each keeps one warm worker. A pair runs the same job list once on each side, the order
alternating between pairs, and times it (jobs per second of wall clock):

- verifier: `verify.answer_sets` (one sandbox job per item: every latent at x0 and at x1, static check included)
  on generated items of the if_else, while and multi_r splits;
- trivial: a one-call program (the per-job overhead alone: exchange, static check, helpers, post-job check).

Worker start (a restart after a timeout, or the first job) is timed separately: the new worker imports ctypes
and applies its filesystem layer, which is off the per-job path. The kernel probe (`active_layers()`) runs once
before timing. Load averages are recorded; both arms see the same load because they alternate.

    nice -n 10 .venv/bin/python benchmarks/cf_sandbox_throughput.py [--pairs 20 --items 100 --base 82a3fca]
    .venv/bin/python benchmarks/cf_sandbox_throughput.py --claims-from-rows   # recompute the committed claims
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import (  # noqa: E402
    RESULTS_DIR,
    check,
    interval_claim,
    paired_claim,
    recompute_claims,
    speedup_claim,
    write_results,
)

NAME = "cf_sandbox_throughput"
BASE = "82a3fca"  # the last commit before issue 48's sandbox changes
TRIVIAL = "def f(x):\n    r = random.randint(1, 9)\n    return (x - r) % 7\n"
MARGIN = 0.10  # "unchanged within 10 %"
CHUNK = 1  # jobs per interleaved chunk: the sides alternate job by job


def load_base(commit: str):
    """The base commit's sandbox module, loaded from `git show` under its own name."""
    text = subprocess.run(["git", "show", f"{commit}:rl_tools/counterfactuals/sandbox.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    path = pathlib.Path(tempfile.mkdtemp(prefix="cf48-base-")) / "cf_sandbox_base.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("cf_sandbox_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cf_sandbox_base"] = module
    spec.loader.exec_module(module)
    return module


def make_claims(rows: list[dict], starts: dict) -> list[dict]:
    claims = []
    for workload in ("verifier", "trivial"):
        r = [row for row in rows if row["workload"] == workload]
        new = [row["new_jobs_per_s"] for row in r]
        old = [row["base_jobs_per_s"] for row in r]
        ratios = [a / b for a, b in zip(new, old)]
        # on log rates, so that a pair run under a heavier load (both sides slower) weighs the same
        claims.append(paired_claim(
            f"{workload}_throughput_within_10pct",
            f"{workload} jobs per second with the new layers are at least 90% of the base commit's (paired over "
            "interleaved pairs, on log rates: log new - log(0.9 x base) > 0)",
            [math.log(a) for a in new], [math.log((1 - MARGIN) * b) for b in old], higher_is_better=True,
            evidence=f"new/base geometric-mean ratio {math.exp(statistics.mean(map(math.log, ratios))):.3f}, "
                     f"median {statistics.median(ratios):.3f}"))
        claims.append(speedup_claim(
            f"{workload}_every_pair_within_10pct", f"every interleaved pair of {workload} runs keeps >= 0.90x the "
            "base commit's jobs per second", ratios, 1 - MARGIN, label="new / base jobs per second"))
        if all("median_job_ratio" in row for row in r):
            per_pair = [row["median_job_ratio"] for row in r]
            claims.append(interval_claim(
                f"{workload}_median_job_within_10pct",
                f"the median over back-to-back job pairs of base time / new time is at least 0.9 for {workload} "
                "jobs (one median per interleaved pair; t-interval on their logs vs log 0.9; robust to the "
                "preemption tails of a loaded machine, which the jobs-per-second claims carry)",
                [math.log(v) for v in per_pair], null=math.log(1 - MARGIN), label="mean log median ratio",
                evidence=f"median of the per-pair medians {statistics.median(per_pair):.3f}"))
    claims.append(check("same_results", "both sandboxes return the same values on every job of every pair",
                        all(row["same_results"] for row in rows), f"{len(rows)} pair-workloads compared"))
    claims.append(check("no_job_errors", "no verifier job ended with an error on either side",
                        all(row["errors_new"] == 0 and row["errors_base"] == 0 for row in rows),
                        f"errors new {sum(row['errors_new'] for row in rows)}, base "
                        f"{sum(row['errors_base'] for row in rows)}"))
    claims.append(check("start_time_recorded", "worker start time (off the per-job path) measured on both sides",
                        bool(starts["new_s"]) and bool(starts["base_s"]),
                        f"median worker start new {statistics.median(starts['new_s']) * 1e3:.1f} ms, base "
                        f"{statistics.median(starts['base_s']) * 1e3:.1f} ms over {len(starts['new_s'])} starts"))
    return claims


def time_jobs(fn, jobs) -> tuple[float, list, int]:
    t0 = time.perf_counter()
    out = [fn(job) for job in jobs]
    dt = time.perf_counter() - t0
    errors = sum(1 for o in out if isinstance(o, dict) and "error" in o or getattr(o, "error", None))
    return len(jobs) / dt, out, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20, help="interleaved (base, new) pairs per workload")
    ap.add_argument("--items", type=int, default=100, help="generated items per split (if_else, while, multi_r)")
    ap.add_argument("--trivial-jobs", type=int, default=400, help="one-call jobs per trivial run")
    ap.add_argument("--starts", type=int, default=5, help="worker starts timed per side")
    ap.add_argument("--base", default=BASE, help="the commit whose sandbox is the baseline")
    ap.add_argument("--claims-from-rows", action="store_true", help="recompute the committed claims")
    args = ap.parse_args()
    if args.claims_from_rows:
        record = recompute_claims(RESULTS_DIR / f"{NAME}.json", lambda r: make_claims(r["rows"], r["starts"]))
        for c in record["claims"]:
            print(f"[{c['held']}] {c['id']}: {c['evidence']}")
        return
    if args.pairs < 2 or args.items < 1:
        raise SystemExit(f"--pairs={args.pairs} --items={args.items}: expected pairs >= 2 and items >= 1")

    from rl_tools.counterfactuals import generate, verify
    from rl_tools.counterfactuals import sandbox as new_lib

    wall0, load0 = time.perf_counter(), os.getloadavg()
    base_lib = load_base(args.base)
    layers = new_lib.active_layers()  # the once-per-process kernel probe, before any timing
    print("sandbox layers:", ", ".join(layers))
    items, _ = generate.generate_all({"if_else": args.items, "while": args.items, "multi_r": args.items}, seed=0)
    jobs = [it for split in ("if_else", "while", "multi_r") for it in items[split]]
    sides = {"new": new_lib.Sandbox(new_lib.SandboxConfig()), "base": base_lib.Sandbox(base_lib.SandboxConfig())}

    def verifier(sb):
        return lambda it: verify.answer_sets(it.code, it.x0, it.y0, it.x1, sb)

    def trivial(sb):
        return lambda i: sb.run(TRIVIAL, [(i, [1 + i % 9])])

    workloads = {"verifier": (verifier, jobs), "trivial": (trivial, list(range(args.trivial_jobs)))}
    for make, work in workloads.values():  # warm both workers (and the parent's caches) once
        for sb in sides.values():
            time_jobs(make(sb), work[:10])
    rows = []
    for pair in range(args.pairs):
        for name, (make, work) in workloads.items():
            # chunks of CHUNK jobs, the sides alternating chunk by chunk (and which goes first alternating
            # between pairs), so that both see the same load; a side's rate is its jobs over its summed time
            order = ("base", "new") if pair % 2 == 0 else ("new", "base")
            spent, outs, errs = {"base": 0.0, "new": 0.0}, {"base": [], "new": []}, {"base": 0, "new": 0}
            times = {"base": [], "new": []}
            for c, start in enumerate(range(0, len(work), CHUNK)):
                for side in order if c % 2 == 0 else order[::-1]:
                    rate, out, e = time_jobs(make(sides[side]), work[start:start + CHUNK])
                    spent[side] += len(out) / rate
                    times[side].append(len(out) / rate)
                    outs[side] += out
                    errs[side] += e
            res = {side: (len(work) / spent[side], outs[side], errs[side]) for side in order}

            def values(out):
                return [o if isinstance(o, dict) else (o.values, o.error) for o in out]

            rows.append({"pair": pair, "workload": name, "order": "-".join(order), "jobs": len(work),
                         "new_jobs_per_s": res["new"][0], "base_jobs_per_s": res["base"][0],
                         "ratio": res["new"][0] / res["base"][0],
                         # the same job on both sides, back to back: the median of base time / new time
                         "median_job_ratio": statistics.median(b / a for a, b in zip(times["new"], times["base"])),
                         "same_results": values(res["new"][1]) == values(res["base"][1]),
                         "errors_new": res["new"][2], "errors_base": res["base"][2], "load": os.getloadavg()[0]})
            print(f"pair {pair} {name:8s} new {res['new'][0]:8.1f}/s base {res['base'][0]:8.1f}/s "
                  f"ratio {rows[-1]['ratio']:.3f}")
    starts = {"new_s": [], "base_s": []}
    for _ in range(args.starts):
        for side, lib in (("base", base_lib), ("new", new_lib)):
            with lib.Sandbox(lib.SandboxConfig()) as sb:
                t0 = time.perf_counter()
                sb.run(TRIVIAL, [(1, [1])])
                starts[f"{side}_s"].append(time.perf_counter() - t0)
    for sb in sides.values():
        sb.close()
    claims = make_claims(rows, starts)
    path = write_results(
        NAME, rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall0,
        command=shlex.join(["nice", "-n", "10", ".venv/bin/python", "benchmarks/cf_sandbox_throughput.py",
                            *sys.argv[1:]]),
        starts=starts, layers=list(layers), base_commit=args.base,
        scale={"pairs": args.pairs, "items_per_split": args.items, "verifier_jobs": len(jobs),
               "trivial_jobs": args.trivial_jobs, "starts": args.starts},
        load_average_start=list(load0), load_average_end=list(os.getloadavg()))
    print(f"wrote {path}")
    for c in claims:
        print(f"[{c['held']}] {c['id']}: {c['evidence']}")


if __name__ == "__main__":
    main()
