"""The persistent compilation cache on short CLI runs: the same `iclr26 run` with the cache off (every program
compiled) and warm (the cache folder filled by one earlier run), interleaved in pairs (issue 47).

Each measurement is its own `iclr26 run` process into a fresh folder, timed from launch to exit (imports, data,
compile, train, evaluation, plots), and its metrics.json gives `compile_seconds` (trace + lowering + backend
compile, from JAX's monitoring events), the backend compiles and the cache hits. The order inside a pair
alternates, so both arms see the same machine. The load average is recorded before and after.

    .venv/bin/python benchmarks/compile_cache.py                        # PhaseFormer ETTh1-96, 2 epochs, 3 pairs
    .venv/bin/python benchmarks/compile_cache.py --experiment regression --preset demo --pairs 5
    .venv/bin/python benchmarks/compile_cache.py --claims-from-rows     # recompute the claims from the rows
    -> benchmarks/results/compile_cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import RESULTS_DIR, check, paired_claim, recompute_claims, speedup_claim, write_results  # noqa: E402

NAME = "compile_cache"


def measure(args: argparse.Namespace, arm: str, workdir: pathlib.Path, cache: pathlib.Path) -> dict:
    env = {**os.environ, "ICLR26_COMPILE_CACHE": "off" if arm == "cold" else str(cache)}
    command = [sys.executable, "-m", "core.cli", "run", args.experiment, "--preset", args.preset,
               *[a for s in args.set for a in ("--set", s)], "--workdir", str(workdir)]
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    metrics = json.loads((workdir / "metrics.json").read_text())
    return {"arm": arm, "process_seconds": round(seconds, 2), "run_seconds": metrics.get("wall_seconds"),
            "compile_seconds": metrics.get("compile_seconds"), "backend_compiles": metrics.get("backend_compiles"),
            "cache_hits": metrics.get("compile_cache_hits"), "load_1min": round(os.getloadavg()[0], 2)}


def make_claims(record: dict) -> list[dict]:
    rows = record["rows"]
    pairs = sorted({r["pair"] for r in rows})
    by = {(r["pair"], r["arm"]): r for r in rows}
    cold = [by[p, "cold"]["process_seconds"] for p in pairs]
    warm = [by[p, "warm"]["process_seconds"] for p in pairs]
    what = record["scale"]["workload"]
    return [
        speedup_claim("warm_cache_faster_every_pair",
                      f"a warm cache makes the whole process of `{what}` faster than compiling everything, in "
                      "every interleaved pair", [c / w for c, w in zip(cold, warm)], goal=1.0,
                      label="cold / warm process time"),
        paired_claim("warm_cache_saves_seconds", f"a warm cache shortens the whole process of `{what}` "
                     "(warm - cold seconds, paired, below 0)", warm, cold, higher_is_better=False, units="s"),
        check("warm_runs_hit_the_cache", "every warm run loaded executables from the cache and every cold run none",
              all(by[p, "warm"]["cache_hits"] > 0 and by[p, "cold"]["cache_hits"] == 0 for p in pairs),
              "cache hits per run from metrics.json"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="phaseformer")
    parser.add_argument("--preset", default="etth1_96")
    parser.add_argument("--set", action="append", default=None, help="overrides (default: epochs=2)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--claims-from-rows", action="store_true")
    args = parser.parse_args()
    if args.claims_from_rows:
        recompute_claims(RESULTS_DIR / f"{NAME}.json", make_claims)
        return
    args.set = args.set if args.set is not None else ["epochs=2"]
    t0 = time.time()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        cache = tmp / "cache"
        measure(args, "warm", tmp / "fill", cache)  # fills the cache; not a measurement
        rows = []
        for pair in range(args.pairs):
            for arm in (("cold", "warm") if pair % 2 == 0 else ("warm", "cold")):
                row = {"pair": pair, **measure(args, arm, tmp / f"{arm}{pair}", cache)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    workload = f"iclr26 run {args.experiment} --preset {args.preset} " + " ".join(f"--set {s}" for s in args.set)
    record = {"rows": rows, "scale": {"workload": workload.strip(), "pairs": args.pairs,
                                      "load_before": [round(x, 2) for x in load_before],
                                      "load_after": [round(x, 2) for x in os.getloadavg()]}}
    write_results(NAME, rows=rows, claims=make_claims(record), wall_seconds=time.time() - t0, scale=record["scale"],
                  summary={arm: {k: float(np.median([r[k] for r in rows if r["arm"] == arm]))
                                 for k in ("process_seconds", "run_seconds", "compile_seconds")}
                           for arm in ("cold", "warm")})


if __name__ == "__main__":
    main()
