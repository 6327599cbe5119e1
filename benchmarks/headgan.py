"""BalanceHead's conditioning study on HeadsLite renders (paper 3's central claims), all arms in one process.

    nice -n 10 .venv/bin/python -u benchmarks/headgan.py    # the committed run: bench preset, seeds 0,1,2
    .venv/bin/python benchmarks/headgan.py --preset gpu      # 64 px, 20k steps of batch 32 per arm (GPU; unrun)

Arms (configs.BENCH_ARMS, balanced multi-view data as the paper's ablation): camera conditioning without and with
the collapse remedy (+fix), the GPC sweep p in {0, 0.5, 0.7}, view + semantic, unconditional, semantic and semantic
+ ViCiCo, trained together (vmapped, one compiled program, the same initialisation within a seed); then single-view
GAN inversion on the camera and semantic generators. Each seed trains all arms once and claims are paired over seeds
(95% t-intervals of the differences). Writes benchmarks/results/headgan.json, headgan_fd_random.png,
headgan_rotation_<arm>.png (first seed) and the README table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import pickle
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.config import apply_overrides  # noqa: E402
from core.plots import line_plot  # noqa: E402
from core.results import (  # noqa: E402
    RESULTS_DIR,
    censored,
    check,
    claim,
    interval_claim,
    paired_claim,
    write_results,
)
from generative.headgan import configs, train  # noqa: E402
from generative.headgan.data import prepare  # noqa: E402
from generative.headgan.metrics import (  # noqa: E402
    Evaluator,
    inversion_scores,
    make_generate_w_fn,
    make_inverter,
    w_z_share,
)

README = ROOT / "generative" / "headgan" / "README.md"
COLS = ("fd_random", "fd_front_std", "fd_front", "fd_side", "fd_back", "back_front_gap", "diversity_back",
        "xview_spread")
PAPER = {  # the paper's conditioning ablation (FID on BalanceHead360 at 512 px; method notes, unconfirmed)
    "camera": {"fd_random": 13.82, "fd_front_std": 8.42},
    "semantic": {"fd_random": 4.45, "fd_front_std": 4.11},
    "semantic+vicico": {"fd_random": 3.67, "fd_front_std": 3.51},
}


def images_to_reach(seen: list[int], curve: list[float], target: float) -> float:
    """First number of images seen at which the FD curve is at or below `target` (inf if never)."""
    for s, v in zip(seen, curve):
        if v <= target:
            return float(s)
    return float("inf")


def _per_seed(rows: list[dict], arm: str, key: str) -> dict[int, object]:
    return {r["seed"]: r[key] for r in rows if r["arm"] == arm}


def _arms(rows: list[dict], a: str, b: str, key: str) -> tuple[list, list]:
    """Two arms' values on the seeds both ran (within a seed the arms share the initialisation: paired)."""
    ra, rb = _per_seed(rows, a, key), _per_seed(rows, b, key)
    seeds = sorted(set(ra) & set(rb))
    return [ra[s] for s in seeds], [rb[s] for s in seeds]


def _all_of(id_: str, statement: str, parts: list[dict], **fields) -> dict:
    """Held when every part holds, not held when any fails, else inconclusive; carries the n, effect and
    interval of the part that decides it."""
    verdicts = [p["held"] for p in parts]
    held = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    decisive = next(p for p in parts if p["held"] is held) if held in verdicts else parts[0]
    return claim(id_, statement, held, "; ".join(f"{p['id']}: {p['evidence']}" for p in parts)
                 + f"; held only if every part holds (n, effect and interval of {decisive['id']})",
                 n=decisive["n"], effect=decisive["effect"], interval=decisive["interval"], test=decisive["test"],
                 parts={p["id"]: p["held"] for p in parts}, **fields)


def _images_to_reach(row: dict, target: float):
    """Images seen until the row's FD-random curve reaches `target`; a curve that never does is carried as the
    bound >= the last evaluation (never dropped)."""
    n = images_to_reach(row["images_seen"], row["fd_random_curve"], target)
    return n if np.isfinite(n) else censored(row["images_seen"][-1], ">=")


CAM0, CAM, SEM = "camera/balanced", "camera/balanced+fix", "semantic/balanced+fix"
CAMSEM, NONE, VIC = "camera_semantic/balanced+fix", "none/balanced+fix", "semantic/balanced+fix+vicico"
GPC0, GPC05 = "camera/balanced+fix+gpc=0", "camera/balanced+fix+gpc=0.5"
INVERT_ARMS = (CAM, SEM)  # single-view GAN inversion is run on these arms' generators


def claims_from_rows(rows: list[dict]) -> list[dict]:
    """Every claim, recomputed from the stored per-(arm, seed) rows: paired over seeds (95% t-intervals of the
    per-seed differences; within a seed all arms share the initialisation). The paper's claims compare the
    remedied arms (+fix: every arm gets the same remedy); the remedy's own effect is the first claim."""
    claims = []
    arms = {r["arm"] for r in rows}

    def have(*names):
        return all(n in arms for n in names)

    if have(CAM0, CAM):
        claims.append(paired_claim(
            "remedy_restores_z_diversity",
            "the collapse remedy (D minibatch stddev + mapping lr x0.01, EG3D) raises the camera-conditioned G's "
            "z-diversity at a fixed condition (project's diagnostic, not a paper claim)",
            *_arms(rows, CAM, CAM0, "zdiv"), evidence="z-diversity (feature distance within fixed-condition groups "
            "over the data's at one view; 1 = as diverse as the data, 0 = collapsed), +fix vs without", oracle=1.0))
        claims.append(paired_claim(
            "remedy_lowers_fd_random", "the collapse remedy lowers the camera arm's FD-random (project's)",
            *_arms(rows, CAM, CAM0, "fd_random"), higher_is_better=False, evidence="FD-random, +fix vs without"))
    if have(CAM, SEM):
        gap = "back_front_excess_gap"
        claims.append(_all_of(
            "view_gap_closed",
            "camera conditioning shows a back-vs-front quality gap under the fixed frontal condition (FD-back - "
            "FD-front, each above its bin's real-vs-real floor) that semantic conditioning closes (smaller gap)",
            [interval_claim("camera_gap", "camera gap > 0", list(_per_seed(rows, CAM, gap).values()),
                            label="camera gap"),
             paired_claim("semantic_smaller", "semantic gap < camera gap", *_arms(rows, SEM, CAM, gap),
                          higher_is_better=False)]))
        claims.append(paired_claim(
            "semantic_better_fd_random", "semantic conditioning gives a lower FD-random than camera conditioning",
            *_arms(rows, SEM, CAM, "fd_random"), higher_is_better=False, evidence="FD-random semantic vs camera"))
        claims.append(paired_claim(
            "semantic_better_fd_front", "semantic conditioning gives a lower FD-front (standard protocol)",
            *_arms(rows, SEM, CAM, "fd_front_std"), higher_is_better=False, evidence="FD-front semantic vs camera"))
        claims.append(paired_claim(
            "semantic_more_coherent",
            "semantic conditioning gives better cross-view identity consistency (lower within-head spread over "
            "the real heads' spread)", *_arms(rows, SEM, CAM, "xview_spread"), higher_is_better=False,
            evidence="cross-view spread semantic vs camera, both over the real heads' attribute std; oracle = real "
                     "renders", oracle=[r["real_xview_spread"] for r in rows if r["arm"] == SEM]))
        sem_rows, cam_rows = ({r["seed"]: r for r in rows if r["arm"] == a} for a in (SEM, CAM))
        seeds = sorted(set(sem_rows) & set(cam_rows))
        # target: the camera arm's last FD-random on the curve (the curves use fewer samples than the final FD)
        faster = paired_claim(
            "semantic_trains_faster",
            "semantic conditioning reaches the camera arm's final FD-random in fewer images (per seed, that "
            "seed's camera target on the training curve)",
            [_images_to_reach(sem_rows[s], cam_rows[s]["fd_random_curve"][-1]) for s in seeds],
            [_images_to_reach(cam_rows[s], cam_rows[s]["fd_random_curve"][-1]) for s in seeds],
            higher_is_better=False, evidence=f"images seen (evaluated every {rows[0]['images_seen'][0]} images)")
        if faster["interval"][0] == faster["interval"][1] and faster["held"] is not None:
            faster["held"] = None  # the evaluation grid, not seed noise, sets a zero-width interval
            faster["evidence"] += ("; every seed's difference is the same multiple of the evaluation interval, so "
                                   "the zero-width interval measures the grid, not seed noise: inconclusive")
        claims.append(faster)
        if "inv_heldout_mse" in rows[0] or any("inv_heldout_mse" in r for r in rows):
            claims.append(_all_of(
                "semantic_inverts_better",
                "single-view GAN inversion generalises better to the held-out views with semantic conditioning "
                "(lower held-out pixel MSE and attribute error)",
                [paired_claim("heldout_mse", "lower held-out MSE", *_arms(rows, SEM, CAM, "inv_heldout_mse"),
                              higher_is_better=False),
                 paired_claim("heldout_attr", "lower held-out attribute error",
                              *_arms(rows, SEM, CAM, "inv_heldout_attr_err"), higher_is_better=False)]))
            for arm in INVERT_ARMS:
                inv, base = (list(_per_seed(rows, arm, k).values()) for k in ("inv_input_mse", "mean_head_input_mse"))
                claims.append(check(
                    f"inversion_fits_{arm.split('/')[0]}", f"{arm}: the inversion fits its input view better than "
                    "the un-optimised mean head (the optimiser works)", bool(np.all(np.array(inv) < np.array(base))),
                    f"input-view MSE {np.round(inv, 4).tolist()} vs mean head {np.round(base, 4).tolist()}"))
    if have(CAMSEM, SEM):
        claims.append(paired_claim(
            "view_semantic_worse_than_semantic",
            "view + semantic conditioning gives a higher FD-random than semantic alone (paper: 46.24 vs 4.45)",
            *_arms(rows, CAMSEM, SEM, "fd_random"), evidence="FD-random view+semantic vs semantic"))
    if have(NONE, SEM):
        claims.append(paired_claim(
            "semantic_beats_unconditional", "semantic conditioning gives a lower FD-random than an unconditional "
            "G (project's)", *_arms(rows, SEM, NONE, "fd_random"), higher_is_better=False,
            evidence="FD-random semantic vs unconditional"))
    if have(GPC0, CAM):
        claims.append(paired_claim(
            "gpc_lowers_fd_random", "GPC p = 0.7 gives the camera arm a lower FD-random than p = 0 (project's; the "
            "sweep p in {0, 0.5, 0.7} is in the rows)", *_arms(rows, CAM, GPC0, "fd_random"),
            higher_is_better=False, evidence="FD-random p=0.7 vs p=0"))
    if have(VIC, SEM):
        claims.append(_all_of(
            "vicico_helps", "semantic conditioning: ViCiCo lowers FD-random and FD-front",
            [paired_claim("fd_random", "ViCiCo lowers FD-random", *_arms(rows, VIC, SEM, "fd_random"),
                          higher_is_better=False),
             paired_claim("fd_front", "ViCiCo lowers FD-front", *_arms(rows, VIC, SEM, "fd_front_std"),
                          higher_is_better=False)]))
    return claims


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="bench", help="bench (the committed run) or tiny (a check of this script)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--n-images", type=int, default=None)
    ap.add_argument("--eval-samples", type=int, default=None, help="samples per view bin in the final evaluation")
    ap.add_argument("--curve-samples", type=int, default=None, help="samples of FD-random on the training curve")
    ap.add_argument("--invert-n", type=int, default=16, help="identities inverted per arm and seed")
    ap.add_argument("--invert-steps", type=int, default=40, help="Adam steps of the single-view inversion")
    ap.add_argument("--seeds", default="0,1,2", help="training seeds (comma-separated): each trains all arms once")
    ap.add_argument("--raw", default="/tmp/headgan_bench_raw_s{seed}.pkl",
                    help="trained parameters and histories of each seed are saved here; an existing file is "
                         "reused (no training)")
    ap.add_argument("--workdir", default="/tmp/headgan_bench_work",
                    help="checkpoints after every evaluation (one folder per seed): a killed run resumes there")
    ap.add_argument("--fast-compile", action="store_true", help="XLA optimisation level 0 for the training step")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides, e.g. data.res=32 model.raw_res=16 (the 32 px setting)")
    ap.add_argument("--name", default="headgan")
    ap.add_argument("--claims-from-rows", action="store_true",
                    help="recompute the claims (and the README table) from the rows in the committed JSON; command, "
                         "git_commit, wall_seconds and rows are kept as they were")
    args = ap.parse_args(argv)
    if args.claims_from_rows:
        from core.results import git_commit
        path = RESULTS_DIR / f"{args.name}.json"
        rec = json.loads(path.read_text())
        rec["claims"] = claims_from_rows(rec["rows"])
        rec["claims_recomputed"] = f"{git_commit()[:7]} (from the stored rows)"
        path.write_text(json.dumps(rec, indent=2) + "\n")
        if args.name == "headgan":
            render(path)
        for c in rec["claims"]:
            print({True: "HELD", False: "NOT HELD", None: "INCONCLUSIVE"}[c["held"]], c["id"], c.get("effect"),
                  c.get("interval"))
        return
    t0 = time.time()
    load_before = os.getloadavg()
    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = configs.PRESETS[args.preset]
    cfg = apply_overrides(dataclasses.replace(cfg, arms=configs.BENCH_ARMS), args.set)
    tc = cfg.train
    args.steps, args.eval_every = args.steps or tc.steps, args.eval_every or tc.eval_every
    args.batch, args.eval_samples = args.batch or tc.batch_size, args.eval_samples or tc.eval_samples
    args.curve_samples = args.curve_samples or tc.curve_samples
    args.n_images = args.n_images or cfg.data.n_images
    cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, n_images=args.n_images),
        train=dataclasses.replace(tc, steps=args.steps, eval_every=args.eval_every, batch_size=args.batch,
                                  eval_samples=args.eval_samples, curve_samples=args.curve_samples,
                                  fast_compile=args.fast_compile or tc.fast_compile))
    prepared = prepare(cfg.data, cfg.encoder)
    evaluator = Evaluator(cfg, prepared)
    print(f"[bench] data + encoders ready in {time.time() - t0:.0f}s", flush=True)
    results = {}
    g_graphdef = train.make_models(cfg)[0]["g"]
    invert = make_inverter(cfg, g_graphdef, steps=args.invert_steps)
    generate_w = make_generate_w_fn(cfg, g_graphdef)
    for seed in seeds:
        cfg_s = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=seed))
        raw = pathlib.Path(args.raw.format(seed=seed))
        if raw.exists():
            res = pickle.loads(raw.read_bytes())
            res["g_params"] = jax.tree.map(jnp.asarray, res["g_params"])
            res["generate"] = train.make_generate_fn(cfg_s, train.make_models(cfg_s)[0])
            t0 -= res["wall_seconds"]
        else:
            print(f"[bench] seed {seed}", flush=True)
            res = train.train_and_evaluate(cfg_s, pathlib.Path(args.workdir) / f"seed{seed}", prepared=prepared,
                                           evaluator=evaluator)
            t_inv = time.time()
            res["inversion"] = {}
            for a in INVERT_ARMS:
                if a in res["arms"]:
                    gp = jax.tree.map(lambda x, i=res["arms"].index(a): x[i], res["g_params"])
                    res["inversion"][a] = inversion_scores(cfg_s, evaluator, generate_w, invert, gp, a,
                                                           n=args.invert_n, seed=seed)
            for i, a in enumerate(res["arms"]):  # the z path's share of w (the mapping network's collapse)
                gp = jax.tree.map(lambda x, i=i: x[i], res["g_params"])
                cond = evaluator.conditions(a, jax.random.key(5), 16)
                res["final"][a]["w_z_share"] = w_z_share(cfg_s, g_graphdef, gp, cond)
            print(f"[bench] seed {seed} inversion {time.time() - t_inv:.0f}s: {res['inversion']}", flush=True)
            keep = {k: v for k, v in res.items() if k != "generate"}
            keep["g_params"] = jax.device_get(res["g_params"])
            raw.write_bytes(pickle.dumps(keep))
        res["evaluator"] = evaluator
        results[seed] = res
    first = results[seeds[0]]
    plots = []
    with tempfile.TemporaryDirectory() as tmp:  # the rotation grids of the first seed
        for p in train.write_plots(first, cfg, pathlib.Path(tmp))[1:]:
            dst = RESULTS_DIR / f"{args.name}_{pathlib.Path(p).name}"
            dst.write_bytes(pathlib.Path(p).read_bytes())
            plots.append(dst.name)
    arms, seen = first["arms"], first["history"]["images_seen"]
    curves = {a: np.array([results[s]["history"]["fd_random"][a] for s in seeds]) for a in arms}
    line_plot(RESULTS_DIR / f"{args.name}_fd_random.png",
              {a: (seen, c.mean(0), c.min(0), c.max(0)) for a, c in curves.items()},
              title=f"FD-random vs images seen (G_ema; mean and range over {len(seeds)} seeds)",
              xlabel="images seen per arm", ylabel="FD-random", logy=True)
    plots.insert(0, f"{args.name}_fd_random.png")
    rows = [{"arm": a, "seed": s, **results[s]["final"][a], **results[s].get("inversion", {}).get(a, {}),
             "fd_random_curve": results[s]["history"]["fd_random"][a], "images_seen": seen}
            for s in seeds for a in arms]
    claims = claims_from_rows(rows)
    res = first
    m = cfg.model
    scale = {"seeds": seeds, "steps": res["speed"]["steps"], "batch_size": args.batch,
             "images_seen_per_arm": res["speed"]["steps"] * args.batch, "n_images_per_regime": args.n_images,
             "data_res": cfg.data.res, "raw_res": m.raw_res, "plane_res": m.plane_res,
             "plane_channels": m.plane_channels, "samples_per_ray": [m.n_coarse, m.n_fine],
             "eval_samples": args.eval_samples, "curve_samples": args.curve_samples, "fast_compile": args.fast_compile,
             "invert": {"n": args.invert_n, "steps": args.invert_steps, "arms": list(INVERT_ARMS)},
             "load_before": load_before, "load_after": os.getloadavg(),
             "issue_acceptance": "issue 43: 3 seeds, >= 1k evaluation samples per bin, <= 25-30 min on the loaded "
                                 "2-core machine",
             "reductions": f"{cfg.data.res} px output from {m.raw_res} px volume rendering (paper 512 from 64), "
                           f"{m.n_coarse}+{m.n_fine} samples per ray (48+48), tri-plane 3x{m.plane_res}x{m.plane_res}x"
                           f"{m.plane_channels} (3x256x256x32), z/w {m.z_dim}/{m.w_dim} (512/512), {len(seeds)} seeds, "
                           f"{res['speed']['steps'] * args.batch} images per arm (paper 32M); the method is unchanged"}
    speed = {**res["speed"], "images_per_s_all_arms": float(np.mean([r["speed"]["images_per_s_all_arms"]
                                                                      for r in results.values()])),
             "train_wall_seconds": sum(r["wall_seconds"] for r in results.values())}
    path = write_results(args.name, rows=rows, claims=claims, wall_seconds=time.time() - t0, scale=scale,
                         speed=speed, encoders=res["encoders"], plots=plots, paper=PAPER)
    print(f"wrote {path} in {time.time() - t0:.0f}s", flush=True)
    if args.name == "headgan":  # the README shows the committed run only
        render(path)


def render(path: pathlib.Path):
    """Write the README table between <!-- table:headgan --> markers from the results JSON."""
    rec = json.loads(path.read_text())
    sc, sp = rec["scale"], rec["speed"]
    seeds = sc["seeds"] if isinstance(sc["seeds"], list) else [0]
    lines = [f"HeadsLite renders at {sc['data_res']} px (volume rendering at {sc['raw_res']} px, "
             f"{sc['samples_per_ray'][0]}+{sc['samples_per_ray'][1]} samples per ray), {sc['images_seen_per_arm']} "
             f"images per arm, batch {sc['batch_size']}, G_ema evaluated, {len(seeds)} seed(s) ({seeds}): each cell "
             f"is the seed mean, FD-random also per seed; FD in the project's render-feature space "
             f"({sc['eval_samples']} samples; not comparable to Inception FID). Wall {rec['wall_seconds']:.0f} s.", "",
             "| arm | FD-random ↓ (per seed) | FD-front (std) ↓ | FD front / side / back (frontal cond.) ↓ "
             "| back − front above the real floors ↓ | z-diversity (features / pixels; data = 1) ↑ | w z-share "
             "| cross-view spread ↓ | inversion held-out MSE / attribute error ↓ |",
             "|---|---|---|---|---|---|---|---|---|"]
    arms = list(dict.fromkeys(r["arm"] for r in rec["rows"]))
    for a in arms:
        rs = [r for r in rec["rows"] if r["arm"] == a]
        m = {k: float(np.mean([r[k] for r in rs])) for k in rs[0] if isinstance(rs[0][k], (int, float))}
        per = " / ".join(f"{r['fd_random']:.3f}" for r in rs)
        inv = (f"{m['inv_heldout_mse']:.4f} / {m['inv_heldout_attr_err']:.3f} (mean head "
               f"{m['mean_head_heldout_mse']:.4f} / {m['mean_head_heldout_attr_err']:.3f})"
               if "inv_heldout_mse" in m else "–")
        lines.append(f"| {a} | {m['fd_random']:.3f} ({per}) | {m['fd_front_std']:.3f} | {m['fd_front']:.3f} / "
                     f"{m['fd_side']:.3f} / {m['fd_back']:.3f} | {m['back_front_excess_gap']:.3f} | "
                     f"{m['zdiv']:.3f} / {m['zdiv_pix']:.3f} | {m.get('w_z_share', float('nan')):.3f} | "
                     f"{m['xview_spread']:.3f} (real {m['real_xview_spread']:.3f}) | {inv} |")
    if "real_fd_front" in rs[0]:
        lines += ["", "Real-vs-real FD floor (fresh renders against the reference, same sample size): front "
                  f"{rs[0]['real_fd_front']:.3f}, side {rs[0]['real_fd_side']:.3f}, back {rs[0]['real_fd_back']:.3f}."]
    verdicts = {True: "**held**", False: "**not held**", None: "**inconclusive**"}
    lines += ["", "Claims (paired over seeds; effect = mean paired difference with its 95% t-interval):", "",
              "| claim | result | n | effect [interval] | evidence |", "|---|---|---|---|---|"]
    lines += [f"| {c['statement']} | {verdicts[c['held']]} | {c['n']} | {c['effect']:.4g} "
              f"[{', '.join('–' if v is None else f'{v:.4g}' for v in c['interval'])}] | {c['evidence']} |"
              for c in rec["claims"] if c.get("kind") != "check"]
    lines += [f"- check: {c['statement']}: {'holds' if c['held'] else 'FAILS'} ({c['evidence']})"
              for c in rec["claims"] if c.get("kind") == "check"]
    lines += ["", f"Speed: {sp['images_per_s_all_arms']:.1f} generated+discriminated images/s for the training step "
              f"over all {sp['arms_in_parallel']} arms together (vmapped, batch {sp['batch_size']} each; 2 shared "
              f"CPU cores), i.e. {sp['images_per_s_all_arms'] / sp['arms_in_parallel']:.1f} images/s per arm. "
              f"Paper (FID, 512 px, BalanceHead360): camera FID-random 13.82 / FID-front 8.42; semantic 4.45 / 4.11; "
              f"semantic + ViCiCo 3.67 / 3.51."]
    text = README.read_text()
    start, end = "<!-- table:headgan -->", "<!-- /table:headgan -->"
    if start in text and end in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), start + "\n" + "\n".join(lines) + "\n" + end,
                      text, flags=re.S)
        README.write_text(text)


if __name__ == "__main__":
    main()
