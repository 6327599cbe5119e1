"""A2ASecBench on the a2a-sdk lab: the safety-utility table and spoofing success against k.

    python benchmarks/a2a_security.py                    # the released suite's size: 100 + 100 cases per cell
    python benchmarks/a2a_security.py --cases 30 --k-cases 30

Writes benchmarks/results/a2a_security.json (and the two plots beside it). Every case runs through the SDK
in-process; the coordinators are deterministic, so seeds only change which cases are generated.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shutil
import tempfile
import time

import numpy as np

from core.results import RESULTS_DIR, claim, write_results
from rl_tools.a2a_security.configs import PRESETS
from rl_tools.a2a_security.scenarios import ATTACKS
from rl_tools.a2a_security.train import run

EXECUTION_STAGE = ("CO", "HOTF", "ASRF", "ATSI")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100, help="adversarial (and as many control) cases per cell")
    parser.add_argument("--k-cases", type=int, default=100, help="AS cases per k and domain in the sweep")
    parser.add_argument("--k", default="1,2,3,4,6,8,10", help="spoof counts of the sweep")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = dataclasses.replace(PRESETS["paper"], cases_per_attack=args.cases, k_sweep_cases=args.k_cases,
                                 k_sweep=tuple(int(k) for k in args.k.split(",")), seed=args.seed)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="a2a_bench_"))
    start = time.perf_counter()
    metrics = run(config, workdir)
    wall = time.perf_counter() - start
    import json
    out = json.loads((workdir / "results.json").read_text())
    rows, sweep = out["rows"], out["sweep"]
    for name in ("asr_by_attack.png", "spoofing_vs_k.png"):
        shutil.copy(workdir / name, RESULTS_DIR / f"a2a_security_{name}")

    def cell(attack, coordinator, key):
        return [r[key] for r in rows if r["attack"] == attack and r["coordinator"] == coordinator]

    naive_exec = {a: float(np.mean(cell(a, "naive", "asr"))) for a in EXECUTION_STAGE}
    ks = sorted({s["k"] for s in sweep})
    curve = {sel: [float(np.mean([s["asr"] for s in sweep if s["k"] == k and s["selector"] == sel])) for k in ks]
             for sel in sorted({s["selector"] for s in sweep})}
    heuristic = curve["heuristic"]
    hardened_asr = {a: float(np.mean(cell(a, "hardened", "asr"))) for a in ATTACKS}
    utility = {p: float(np.mean([r["benign_utility"] for r in rows if r["coordinator"] == p]))
               for p in ("naive", "hardened")}
    fpr = float(np.mean([r["false_positive_rate"] for r in rows if r["coordinator"] == "hardened"]))
    cc_benign = float(np.mean(cell("CC", "naive", "benign_utility")))
    cc_attacked = float(np.mean(cell("CC", "naive", "attacked_utility")))
    claims = [
        claim("naive_execution_stage", "The naive coordinator falls to every execution-stage attack (CO, HOTF, "
              "ASRF, ATSI; the paper reports success 1.0 in all three domains)",
              all(v == 1.0 for v in naive_exec.values()),
              ", ".join(f"{a} {v:.2f}" for a, v in naive_exec.items())),
        claim("spoofing_grows_with_k", "AgentCard-spoofing success grows with the number of spoofs k for the "
              "heuristic skill-match selector",
              all(b >= a - 1e-9 for a, b in zip(heuristic, heuristic[1:])) and heuristic[-1] > heuristic[0],
              "heuristic ASR at k=" + ", ".join(f"{k}: {v:.2f}" for k, v in zip(ks, heuristic))),
        claim("hardened_cuts_asr_keeps_utility", "The hardened coordinator cuts attack success without losing "
              "benign utility (and without refusing benign controls)",
              all(hardened_asr[a] < float(np.mean(cell(a, "naive", "asr"))) for a in ATTACKS)
              and utility["hardened"] >= utility["naive"] - 1e-9 and fpr == 0.0,
              "hardened ASR " + ", ".join(f"{a} {v:.2f}" for a, v in hardened_asr.items())
              + f"; benign utility naive {utility['naive']:.3f} vs hardened {utility['hardened']:.3f}; "
              f"hardened false-positive rate {fpr:.3f}"),
        claim("cloaking_costs_utility", "Capability cloaking lowers the naive coordinator's utility "
              "(paper: e.g. 0.853 -> 0.682 in travel)", cc_attacked < cc_benign,
              f"naive utility on CC controls {cc_benign:.2f} -> under attack {cc_attacked:.2f}"),
    ]
    if "learned" in curve:
        learned = curve["learned"]
        claims.append(claim(
            "learned_selector_resists_spoofs", "The learned card selector is spoofed less often than the "
            "heuristic one at the largest k (our addition; spoofs come from the same generator family as its "
            "training cards, so this is an in-distribution result)", learned[-1] < heuristic[-1],
            f"k={ks[-1]}: learned {learned[-1]:.2f} vs heuristic {heuristic[-1]:.2f}; selector test accuracy "
            f"{metrics.get('selector_test_accuracy', float('nan')):.3f}"))
    path = write_results("a2a_security", rows=rows + [{"sweep": True, **s} for s in sweep], claims=claims,
                         wall_seconds=wall, scale={"cases_per_cell": args.cases, "controls_per_cell": args.cases,
                                                   "k_sweep": ks, "k_sweep_cases_per_domain": args.k_cases,
                                                   "domains": list(config.domains)})
    print(f"wrote {path} in {wall:.0f} s")
    for c in claims:
        print(("HELD    " if c["held"] else "NOT HELD"), c["id"], "-", c["evidence"])


if __name__ == "__main__":
    main()
