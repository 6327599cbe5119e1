"""PTA's central claim at CPU scale: at equal compute, plan-then-act (planner + actioner + requirement memory
with its copy path) against direct text -> commands generation, per instruction level, 3 seeds paired; the
requirement module's two ablations (no memory; the memory in the prompt without the copy path) and the gold plan.

Each seed draws its own corpus and initialisations; every arm of a seed is evaluated on the same test parts at
all four levels. Baselines beside the claims: chance = a random training part's program for each test part
(retrieval without reading the text), oracle = the gold program (Chamfer sampling noise, requirements met 1.0).

    python benchmarks/cad.py                    # 3 seeds at the demo preset's scale, 1,000 actioner steps
    python benchmarks/cad.py --seeds 2 --n-train 500 --actioner-steps 40 --name cad_smoke   # a quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core import results  # noqa: E402
from generative.cad import corpus, metrics, train  # noqa: E402
from generative.cad.configs import presets  # noqa: E402

EXPERT = len(corpus.LEVELS) - 1


def chance_and_oracle(config, train_parts, test_parts) -> list[dict]:
    """Rows for the chance (a random training program per test part) and oracle (the gold program) arms."""
    rng = np.random.default_rng(config.seed + 1000)
    pick = rng.integers(0, len(train_parts), len(test_parts))
    out = []
    for arm, preds in (("chance", [train_parts[i].program for i in pick]), ("oracle", [p.program for p in test_parts])):
        for level in range(len(corpus.LEVELS)):
            scores = metrics.evaluate([p.program for p in test_parts], preds,
                                      [p.requirements[level] for p in test_parts],
                                      chamfer_points=config.chamfer_points)
            out.append({"arm": arm, "level": level, "level_name": corpus.LEVELS[level], "seed": config.seed, **scores})
    return out


def per_seed(rows, arm: str, key: str, levels=None) -> list[float]:
    """Per-seed mean of `key` over `levels` (default all) for `arm`, in seed order."""
    seeds = sorted({r["seed"] for r in rows})
    out = []
    for s in seeds:
        vals = [r[key] for r in rows if r["arm"] == arm and r["seed"] == s and (levels is None or r["level"] in levels)]
        vals = [v for v in vals if np.isfinite(v)]
        out.append(float(np.mean(vals)) if vals else float("nan"))
    return out


def make_claims(rows) -> list[dict]:
    """The claims as a function of the rows (so they can be recomputed from the JSON)."""
    def pc(id_, statement, ours, base, key, *, higher, levels=None, evidence=""):
        chance = per_seed(rows, "chance", key, levels)
        oracle = per_seed(rows, "oracle", key, levels)
        return results.paired_claim(id_, statement, per_seed(rows, ours, key, levels),
                                    per_seed(rows, base, key, levels), higher_is_better=higher, evidence=evidence,
                                    chance=chance, oracle=oracle)

    claims = [
        pc("pta_lowers_invalid_ratio", "PTA (planner + actioner + requirement memory) has a lower invalid ratio than "
           "direct generation at equal compute (mean over the four levels)", "pta", "direct", "invalid_ratio",
           higher=False),
        pc("pta_lowers_chamfer", "PTA has a lower median Chamfer distance (x1e3, valid outputs) than direct generation "
           "(mean over the four levels)", "pta", "direct", "chamfer_median", higher=False),
        pc("pta_lowers_invalid_ratio_expert",
           "PTA has a lower invalid ratio than direct generation at the expert level", "pta", "direct", "invalid_ratio",
           higher=False, levels=(EXPERT,)),
        pc("pta_lowers_chamfer_expert", "PTA has a lower median Chamfer distance than direct generation at the expert "
           "level", "pta", "direct", "chamfer_median", higher=False, levels=(EXPERT,)),
        pc("ram_raises_requirement_satisfaction", "The requirement module raises requirement satisfaction (stated "
           "dimensions within one level), PTA vs PTA without it (levels 1-3)", "pta", "pta_no_ram",
           "requirement_satisfaction", higher=True, levels=(1, 2, 3)),
        pc("copy_raises_requirement_satisfaction", "The copy path raises requirement satisfaction: PTA vs PTA with "
           "the same memory in the prompt only (levels 1-3)", "pta", "pta_no_copy", "requirement_satisfaction",
           higher=True, levels=(1, 2, 3)),
        pc("pta_raises_requirement_satisfaction", "PTA meets more stated requirements than direct generation "
           "(levels 1-3)", "pta", "direct", "requirement_satisfaction", higher=True, levels=(1, 2, 3)),
    ]
    # "Most at the expert level": the Chamfer gain over direct at expert minus the gain at the abstract level.
    gain = {lv: np.subtract(per_seed(rows, "direct", "chamfer_median", (lv,)),
                            per_seed(rows, "pta", "chamfer_median", (lv,)))
            for lv in (0, EXPERT)}
    claims.append(results.interval_claim(
        "pta_gain_largest_at_expert", "PTA's Chamfer gain over direct generation is larger at the expert level than at "
        "the abstract level (gain = direct CD - PTA CD; per-seed expert gain minus abstract gain)",
        list(gain[EXPERT] - gain[0]), null=0.0, higher_is_better=True, label="expert gain - abstract gain"))
    claims.append(pc("gold_plan_bounds_planning", "The gold plan bounds what planning can give: PTA with the gold "
                     "plan has an invalid ratio no higher than PTA with the planner's plan", "pta_gold_plan", "pta",
                     "invalid_ratio", higher=False))
    plan = [r["plan_exact"] for r in rows if r["arm"] == "pta"]
    mem = [r["memory_exact"] for r in rows if r["arm"] == "pta" and r["level"] > 0]
    claims.append(results.check("components_work", "The planner's plans and the tagger's requirement memories are "
                                "exact on most test instructions (what PTA's arms rest on)",
                                bool(np.mean(mem) > 0.9), f"plan exact {np.mean(plan):.3f} (all levels), requirement "
                                f"memory exact {np.mean(mem):.3f} (levels 1-3)"))
    return claims


def main(argv=None) -> None:
    demo = presets()["demo"]  # the defaults: each seed is one demo run without renders, longer actioners
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=demo.n_train)
    ap.add_argument("--n-test", type=int, default=demo.n_test)
    ap.add_argument("--planner-steps", type=int, default=demo.planner_steps)
    ap.add_argument("--actioner-steps", type=int, default=1000,
                    help="the demo's 330 leaves the actioners short of learning the unstated sizes")
    ap.add_argument("--batch-size", type=int, default=demo.batch_size)
    ap.add_argument("--name", default="cad")
    ap.add_argument("--workdir", default="runs/bench_cad")
    ap.add_argument("--rows-from", default="", help="recompute the claims from a previous run's rows.json")
    args = ap.parse_args(argv)
    if args.rows_from:
        import json
        saved = json.loads(pathlib.Path(args.rows_from).read_text())
        claims = make_claims(saved["rows"])
        path = results.write_results(args.name, rows=saved["rows"], claims=claims, wall_seconds=saved["wall_seconds"],
                                     command=saved["command"], scale=saved["scale"])
        for c in claims:
            print(f"{c['id']}: {c['held']} | {c['evidence']}")
        print(path)
        return
    base = dataclasses.replace(presets()["demo"], n_train=args.n_train, n_test=args.n_test,
                               planner_steps=args.planner_steps, actioner_steps=args.actioner_steps,
                               batch_size=args.batch_size, renders=0)
    t0 = time.time()
    rows = []
    for seed in range(args.seeds):
        config = dataclasses.replace(base, seed=seed)
        workdir = pathlib.Path(args.workdir) / f"seed{seed}"
        train_parts, test_parts = train.make_parts(config)
        models = train.train_all(config, train_parts, workdir, progress_bar=False)
        arm_rows, _ = train.evaluate_all(config, models, test_parts)
        rows += arm_rows + chance_and_oracle(config, train_parts, test_parts)
        _save_rows(pathlib.Path(args.workdir) / "rows.json", rows, time.time() - t0, scale_of(args, base))
        print(f"seed {seed} done at {time.time() - t0:.0f} s", flush=True)
        for r in arm_rows:
            print(f"  {r['arm']:14s} {r['level_name']:12s} IR {r['invalid_ratio']:.2f} CD {r['chamfer_median']:.2f} "
                  f"req {r['requirement_satisfaction']:.2f} F1 line {r['f1_line']:.2f} ext {r['f1_extrusion']:.2f}",
                  flush=True)
    claims = make_claims(rows)
    scale = scale_of(args, base)
    path = results.write_results(args.name, rows=rows, claims=claims, wall_seconds=time.time() - t0, scale=scale)
    for c in claims:
        print(f"{c['id']}: {c['held']} | {c['evidence']}")
    print(path)


def _save_rows(path: pathlib.Path, rows, wall: float, scale) -> None:
    import json
    import shlex
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": results._jsonable(rows), "wall_seconds": wall, "scale": scale,
                                "command": shlex.join(["python", *sys.argv])}))


def scale_of(args, base) -> dict:
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_seconds_so_far": round(usage.ru_utime + usage.ru_stime, 1), "seeds": args.seeds,
             "n_train_parts": args.n_train, "n_test_parts": args.n_test,
             "examples_per_part": len(corpus.LEVELS), "planner_steps": args.planner_steps,
             "actioner_steps": args.actioner_steps, "direct_steps": args.planner_steps + args.actioner_steps,
             "batch_size": args.batch_size, "seq_len": base.seq_len,
             "model": {"hidden": base.model.hidden_size, "layers": base.model.num_layers,
                       "heads": base.model.num_heads},
             "chamfer": f"{base.chamfer_points} surface points per shape, frame halved to the unit cube, x1e3"}


if __name__ == "__main__":
    main()
