"""Concept vectors vs function vectors (paper 4) on the small-scale world: a from-scratch decoder trained on
the generated concepts x formats x languages suite, per seed: FV heads by CIE, CV heads by RSA, vectors from
every extraction cell, steering of zero-shot OE-L1 prompts over layers x w in {1, 5, 10}.

    nice -n 10 .venv/bin/python benchmarks/concept_vectors.py [--seeds 0 1 2] [--steps 1500] [--jobs 3]
    .venv/bin/python benchmarks/concept_vectors.py --claims-from-rows   # recompute the claims from the rows

Writes benchmarks/results/concept_vectors.json. The unit of pairing is (seed, concept) for the per-concept
quantities (cosines, steering) and the seed for head-set quantities (Jaccard, layers). Chance baseline: the
same vectors built from random head sets of the same size; oracle for steering: the 5-shot prompt itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import fingerprint  # noqa: E402
from core.results import check, load_results, paired_claim, write_results  # noqa: E402
from interp.concept_vectors import pipeline  # noqa: E402
from interp.concept_vectors.configs import CVConfig, presets  # noqa: E402
from interp.concept_vectors.heads import jaccard  # noqa: E402
from interp.concept_vectors.train import train_model  # noqa: E402
from interp.concept_vectors.world import World  # noqa: E402

NAME = "concept_vectors"
ORTHOGONAL = 0.3  # |cos| below this counts as "nearly orthogonal"
DISTINCT = 0.5  # Jaccard below this: fewer than a third of the union shared


def bench_config(args) -> CVConfig:
    base = presets()[args.preset]
    return dataclasses.replace(base, steps=args.steps or base.steps)


def layer_hist(heads, num_layers: int) -> list[float]:
    counts = np.bincount([l for l, _ in heads], minlength=num_layers)
    return (counts / counts.sum()).tolist()


def seed_rows(config: CVConfig, workdir: pathlib.Path) -> list[dict]:
    t0 = time.time()
    key = hashlib.sha256(fingerprint(config).encode()).hexdigest()[:12]
    run_dir = workdir / f"seed{config.seed}-{key}"  # keyed by the config: a rerun resumes its own checkpoint
    graphdef, params, _ = train_model(config, run_dir, progress_bar=False)
    t_train = time.time() - t0
    result = pipeline.analyse(config, graphdef, params)
    world = World(config.world)
    acc = result["scores"]["accuracy"]
    cells = world.cells()
    held = [c.name for c in cells if world.is_held_out(c)]
    trained = [c.name for c in cells if not world.is_held_out(c)]
    L = config.model.num_layers
    heads = result["heads"]
    rows = [{"kind": "seed", "seed": config.seed,
             "icl_acc_trained_OE": float(np.mean([acc[n] for n in trained if "-OE-" in n])),
             "icl_acc_trained_MC": float(np.mean([acc[n] for n in trained if "-MC-" in n])),
             "icl_acc_held_out": float(np.mean([acc[n] for n in held])),
             "corrupted_acc": result["scores"]["corrupted_accuracy"],
             "fv_heads": [f"L{l}H{h}" for l, h in heads["FV"]], "cv_heads": [f"L{l}H{h}" for l, h in heads["CV"]],
             "random_heads": [f"L{l}H{h}" for l, h in heads["random"]],
             "jaccard_fv_cv": jaccard(heads["FV"], heads["CV"]),
             "jaccard_fv_random": jaccard(heads["FV"], heads["random"]),
             "layer_hist_fv": layer_hist(heads["FV"], L), "layer_hist_cv": layer_hist(heads["CV"], L),
             "layer_hist_random": layer_hist(heads["random"], L),
             "steer_choice": result["steering"]["choice"], "train_seconds": round(t_train, 1),
             "seconds": round(time.time() - t0, 1)}]
    cos = {(r["method"], r["concept"]): r for r in result["cosines"]}
    for r in result["steering"]["per_concept"]:
        c = cos[(r["method"], r["concept"])]
        rows.append({"kind": "concept", "seed": config.seed, **r, "cos_OE_MC": c["cos_OE_MC"],
                     "cos_L1_L2": c["cos_L1_L2"]})
    return rows


def tv(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def claims_from_rows(rows: list[dict]) -> list[dict]:
    seeds = [r for r in rows if r["kind"] == "seed"]
    conc = [r for r in rows if r["kind"] == "concept"]

    def arm(method, key):
        keyed = sorted((r["seed"], r["concept"], r[key]) for r in conc if r["method"] == method
                       and r.get(key) is not None)
        return [v for _, _, v in keyed]

    n_units = f"{len(seeds)} seeds x {len(arm('FV', 'cos_OE_MC')) // max(len(seeds), 1)} concepts"
    out = []
    icl = (float(np.mean([r["icl_acc_trained_OE"] for r in seeds])),
           float(np.mean([r["icl_acc_trained_MC"] for r in seeds])))
    out.append(check("icl_learned", "the trained decoder does the 5-shot task on its trained cells (a precondition)",
                     icl[0] > 0.5 and icl[1] > 0.5,
                     f"5-shot accuracy OE {icl[0]:.2f}, MC {icl[1]:.2f} on trained cells (chance MC 0.25); held-out "
                     f"cells {np.mean([r['icl_acc_held_out'] for r in seeds]):.2f}", n=len(seeds)))
    chance_cos = float(np.mean(arm("random", "cos_OE_MC")))
    out.append(paired_claim(
        "cv_more_format_invariant", "CVs of a concept from OE and MC prompts are more similar than FVs (cosine)",
        arm("CV", "cos_OE_MC"), arm("FV", "cos_OE_MC"), chance=chance_cos,
        evidence=f"cos(vector from OE-L1, from MC-L1), CV vs FV, units {n_units}; random heads {chance_cos:.2f}"))
    fv_abs = [abs(v) for v in arm("FV", "cos_OE_MC")]
    out.append(paired_claim(
        "fv_nearly_orthogonal", f"FVs of the same concept from OE and MC prompts are nearly orthogonal "
        f"(|cosine| below {ORTHOGONAL})", fv_abs, [ORTHOGONAL] * len(fv_abs), higher_is_better=False,
        chance=float(np.mean([abs(v) for v in arm("random", "cos_OE_MC")])),
        evidence=f"FV |cos(OE, MC)| against {ORTHOGONAL}, units {n_units}; CV |cos| "
                 f"{np.mean([abs(v) for v in arm('CV', 'cos_OE_MC')]):.2f}"))
    out.append(paired_claim(
        "cv_more_language_invariant", "CVs of a concept from L1 and L2 prompts are more similar than FVs",
        arm("CV", "cos_L1_L2"), arm("FV", "cos_L1_L2"), chance=float(np.mean(arm("random", "cos_L1_L2"))),
        evidence=f"cos(vector from OE-L1, from OE-L2), units {n_units}"))
    jac = [r["jaccard_fv_cv"] for r in sorted(seeds, key=lambda r: r["seed"])]
    out.append(paired_claim(
        "heads_distinct", f"FV and CV head sets overlap little (Jaccard below {DISTINCT})", jac,
        [DISTINCT] * len(jac), higher_is_better=False,
        chance=float(np.mean([r["jaccard_fv_random"] for r in seeds])),
        evidence=f"top-k FV vs CV heads per seed: {[r['fv_heads'] for r in seeds]} vs "
                 f"{[r['cv_heads'] for r in seeds]}"))
    tv_cv = [tv(r["layer_hist_fv"], r["layer_hist_cv"]) for r in sorted(seeds, key=lambda r: r["seed"])]
    tv_rand = [tv(r["layer_hist_fv"], r["layer_hist_random"]) for r in sorted(seeds, key=lambda r: r["seed"])]
    out.append(paired_claim(
        "similar_layers", "FV and CV heads lie in similar layers: their layer histograms are closer than FV's to "
        "random heads' (total variation)", tv_cv, tv_rand, higher_is_better=False,
        evidence="TV(layer hist FV, CV) vs TV(FV, random) per seed"))
    for setting, key, statement in (
            ("id", "id_delta_p", "FVs steer better in distribution (zero-shot OE-L1, vectors from OE-L1): delta p"),
            ("ood", "ood_delta_p", "CVs steer better out of distribution (vectors from MC-L1, OE-L2, MC-L2): delta p")):
        ours, base = (arm("FV", key), arm("CV", key)) if setting == "id" else (arm("CV", key), arm("FV", key))
        out.append(paired_claim(
            f"{'fv' if setting == 'id' else 'cv'}_better_{setting}", statement, ours, base,
            chance=float(np.mean(arm("random", key))),
            evidence=f"delta p of the correct first token at each method's best ID (layer, w), units {n_units}"))
    for cell, label in (("MC-L1", "across format"), ("OE-L2", "across language"), ("MC-L2", "held-out cell")):
        key = f"ood_{cell}_delta_p"
        out.append(paired_claim(
            f"cv_better_ood_{cell}", f"CVs steer better than FVs {label} (vectors from {cell}): delta p",
            arm("CV", key), arm("FV", key), chance=float(np.mean(arm("random", key))),
            evidence=f"units {n_units}"))
    out.append(paired_claim(
        "cv_steering_more_invariant", "CV-steered distributions move less between ID and OOD extraction "
        "(KL(p_ID || p_OOD))", arm("CV", "kl"), arm("FV", "kl"), higher_is_better=False,
        chance=float(np.mean(arm("random", "kl"))), evidence=f"mean KL over the three OOD cells, units {n_units}"))
    out.append(paired_claim(
        "fv_better_ambiguous_id", "FVs resolve ambiguous prompts (concept vs translation demos) better in "
        "distribution: delta p", arm("FV", "ambiguous_id_delta_p"), arm("CV", "ambiguous_id_delta_p"),
        chance=float(np.mean(arm("random", "ambiguous_id_delta_p"))), evidence="translation excluded"))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=0, help="training steps (0: the preset's)")
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--workdir", default="runs/bench_concept_vectors")
    parser.add_argument("--results-dir", default=None)
    parser.add_argument("--claims-from-rows", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run as parallel processes")
    parser.add_argument("--rows-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.claims_from_rows:
        record = load_results(NAME, args.results_dir)
        record["claims"] = claims_from_rows(record["rows"])
        write_results(NAME, rows=record["rows"], claims=record["claims"], wall_seconds=record["wall_seconds"],
                      command=record["command"], directory=args.results_dir, scale=record.get("scale"))
        return
    t0 = time.time()
    base = bench_config(args)
    if args.rows_out:  # one worker: its seeds' rows only
        rows = [r for seed in args.seeds for r in seed_rows(dataclasses.replace(base, seed=seed),
                                                               pathlib.Path(args.workdir))]
        pathlib.Path(args.rows_out).write_text(json.dumps(rows))
        return
    rows = []
    if args.jobs > 1:  # one niced process per seed; the claims are computed here from their rows
        procs, outs = [], []
        for seed in args.seeds:
            out = pathlib.Path(args.workdir) / f"rows_seed{seed}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, __file__, "--seeds", str(seed), "--steps", str(args.steps), "--preset",
                   args.preset, "--workdir", args.workdir, "--rows-out", str(out)]
            procs.append(subprocess.Popen(cmd))
            outs.append(out)
        for p in procs:
            if p.wait() != 0:
                raise SystemExit(f"worker {p.args} failed with exit code {p.returncode}")
        for out in outs:
            rows += json.loads(out.read_text())
    else:
        for seed in args.seeds:
            config = dataclasses.replace(base, seed=seed)
            rows += seed_rows(config, pathlib.Path(args.workdir))
            print(f"seed {seed} done at {time.time() - t0:.0f} s", flush=True)
    claims = claims_from_rows(rows)
    scale = {"preset": args.preset, "steps": base.steps, "seeds": args.seeds, "model": {
        "layers": base.model.num_layers, "heads": base.model.num_heads, "hidden": base.model.hidden_size,
        "head_dim": base.model.head_dim}, "entities": base.world.num_entities, "mc_share": base.world.mc_share,
        "prompts_per_cell": base.num_prompts,
        "steer_prompts": base.num_steer_prompts, "top_k": base.top_k, "weights": list(base.steer_weights)}
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.time() - t0, directory=args.results_dir,
                         scale=scale)
    for c in claims:
        print(c["id"], c["held"], c["evidence"][:160])
    print(path)


if __name__ == "__main__":
    main()
