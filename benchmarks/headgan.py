"""BalanceHead's conditioning study on HeadsLite renders (paper 3's central claims), all arms in one process.

    .venv/bin/python -u benchmarks/headgan.py               # the committed run: seeds 0,1 (see scale in JSON)
    .venv/bin/python benchmarks/headgan.py --seeds 0,1,2 --steps 20000 --batch 32  # GPU

Arms: camera vs semantic conditioning on imbalanced and balanced data (the 2x2 grid) and semantic + ViCiCo on
balanced data, trained together (vmapped, one compiled program, the same initialisation within a seed); each seed
trains all arms once and claims are decided on the seed means. Writes benchmarks/results/headgan.json,
headgan_fd_random.png, headgan_rotation_<arm>.png (first seed) and the README table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
from core.results import RESULTS_DIR, claim, write_results  # noqa: E402
from generative.headgan import configs, train  # noqa: E402
from generative.headgan.data import prepare  # noqa: E402
from generative.headgan.metrics import Evaluator  # noqa: E402

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="bench", help="bench (the committed run) or tiny (a check of this script)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--n-images", type=int, default=None)
    ap.add_argument("--eval-samples", type=int, default=None)
    ap.add_argument("--seeds", default="0,1", help="training seeds (comma-separated): each trains all arms once")
    ap.add_argument("--raw", default="/tmp/headgan_bench_raw_s{seed}.pkl",
                    help="trained parameters and histories of each seed are saved here; an existing file is "
                         "reused (no training)")
    ap.add_argument("--workdir", default="/tmp/headgan_bench_work",
                    help="checkpoints after every evaluation (one folder per seed): a killed run resumes there")
    ap.add_argument("--fast-compile", action="store_true", help="XLA optimisation level 0 for the training step")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides, e.g. data.res=32 model.raw_res=16 (the 32 px setting)")
    ap.add_argument("--name", default="headgan")
    args = ap.parse_args(argv)
    t0 = time.time()
    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = configs.PRESETS[args.preset]
    cfg = apply_overrides(dataclasses.replace(cfg, arms=configs.bench().arms), args.set)
    tc = cfg.train
    args.steps, args.eval_every = args.steps or tc.steps, args.eval_every or tc.eval_every
    args.batch, args.eval_samples = args.batch or tc.batch_size, args.eval_samples or tc.eval_samples
    args.n_images = args.n_images or cfg.data.n_images
    cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, n_images=args.n_images),
        train=dataclasses.replace(tc, steps=args.steps, eval_every=args.eval_every, batch_size=args.batch,
                                  eval_samples=args.eval_samples, fast_compile=args.fast_compile or tc.fast_compile))
    prepared = prepare(cfg.data, cfg.encoder)
    evaluator = Evaluator(cfg, prepared)
    print(f"[bench] data + encoders ready in {time.time() - t0:.0f}s", flush=True)
    results = {}
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
    rows = [{"arm": a, "seed": s, **results[s]["final"][a], "fd_random_curve": results[s]["history"]["fd_random"][a],
             "images_seen": seen} for s in seeds for a in arms]
    final = {a: {k: float(np.mean([results[s]["final"][a][k] for s in seeds])) for k in results[seeds[0]]["final"][a]
                 if np.isscalar(results[seeds[0]]["final"][a][k])} for a in arms}
    claims = []

    def fmt(a, k):
        """The seed mean, then each seed's value."""
        per = " / ".join(f"{results[s]['final'][a][k]:.3f}" for s in seeds)
        return f"{final[a][k]:.3f} ({per})"

    def agree(test) -> str:
        return f"; {sum(bool(test(results[s]['final'])) for s in seeds)} of {len(seeds)} seeds agree"

    for regime in configs.REGIMES:
        cam, sem = f"camera/{regime}", f"semantic/{regime}"
        if cam in final and sem in final:
            gap = "back_front_excess_gap"
            gap_closed = lambda f: f[cam][gap] > 0 and f[sem][gap] < f[cam][gap]
            claims.append(claim(
                f"view_gap_closed_{regime}",
                f"{regime} data: camera conditioning shows a back-vs-front quality gap under the fixed frontal "
                f"condition (FD-back - FD-front, each above its bin's real-vs-real floor) that semantic "
                f"conditioning closes (smaller gap)",
                gap_closed(final),
                f"gap camera {fmt(cam, gap)} (front {fmt(cam, 'fd_front')}, back {fmt(cam, 'fd_back')}) vs semantic "
                f"{fmt(sem, gap)} (front {fmt(sem, 'fd_front')}, back {fmt(sem, 'fd_back')}); real floors front "
                f"{final[cam]['real_fd_front']:.3f}, back {final[cam]['real_fd_back']:.3f}{agree(gap_closed)}"))
            lower = lambda f: f[sem]["fd_random"] < f[cam]["fd_random"]
            claims.append(claim(
                f"semantic_better_fd_random_{regime}",
                f"{regime} data: semantic conditioning gives a lower FD-random than camera conditioning",
                lower(final), f"FD-random semantic {fmt(sem, 'fd_random')} vs camera {fmt(cam, 'fd_random')}"
                              f"{agree(lower)}"))
            coherent = lambda f: f[sem]["xview_spread"] < f[cam]["xview_spread"]
            claims.append(claim(
                f"semantic_more_coherent_{regime}",
                f"{regime} data: semantic conditioning gives better cross-view identity consistency (lower spread)",
                coherent(final),
                f"cross-view spread semantic {fmt(sem, 'xview_spread')} vs camera {fmt(cam, 'xview_spread')} "
                f"(real renders {final[sem]['real_xview_spread']:.3f}){agree(coherent)}"))
            target = final[cam]["fd_random"]
            n_sem = images_to_reach(seen, curves[sem].mean(0), target)
            n_cam = images_to_reach(seen, curves[cam].mean(0), target)
            claims.append(claim(
                f"semantic_trains_faster_{regime}",
                f"{regime} data: semantic conditioning reaches the camera arm's final FD-random in fewer images "
                f"(seed-mean curves)",
                n_sem < n_cam,
                f"target FD-random {target:.3f}: semantic after {n_sem:.0f} images, camera after {n_cam:.0f} "
                f"(evaluated every {args.eval_every * args.batch} images)"))
    if "semantic/balanced" in final and "semantic/balanced+vicico" in final:
        a, b = "semantic/balanced+vicico", "semantic/balanced"
        helps = lambda f: f[a]["fd_random"] < f[b]["fd_random"] and f[a]["fd_front_std"] < f[b]["fd_front_std"]
        claims.append(claim(
            "vicico_helps", "balanced data, semantic conditioning: ViCiCo lowers FD-random and FD-front",
            helps(final),
            f"FD-random {fmt(a, 'fd_random')} with ViCiCo vs {fmt(b, 'fd_random')} without; FD-front "
            f"{fmt(a, 'fd_front_std')} vs {fmt(b, 'fd_front_std')}{agree(helps)}"))
    res = first
    m = cfg.model
    scale = {"seeds": seeds, "steps": res["speed"]["steps"], "batch_size": args.batch,
             "images_seen_per_arm": res["speed"]["steps"] * args.batch, "n_images_per_regime": args.n_images,
             "data_res": cfg.data.res, "raw_res": m.raw_res, "plane_res": m.plane_res,
             "plane_channels": m.plane_channels, "samples_per_ray": [m.n_coarse, m.n_fine],
             "eval_samples": args.eval_samples, "fast_compile": args.fast_compile,
             "issue_acceptance": "benchmark within 90 min on this machine; 32-64 px renders",
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
             "| back − front above the real floors ↓ | diversity back | cross-view spread ↓ |",
             "|---|---|---|---|---|---|---|"]
    arms = list(dict.fromkeys(r["arm"] for r in rec["rows"]))
    for a in arms:
        rs = [r for r in rec["rows"] if r["arm"] == a]
        m = {k: float(np.mean([r[k] for r in rs])) for k in rs[0] if isinstance(rs[0][k], (int, float))}
        per = " / ".join(f"{r['fd_random']:.3f}" for r in rs)
        lines.append(f"| {a} | {m['fd_random']:.3f} ({per}) | {m['fd_front_std']:.3f} | {m['fd_front']:.3f} / "
                     f"{m['fd_side']:.3f} / {m['fd_back']:.3f} | {m.get('back_front_excess_gap', m['back_front_gap']):.3f} | "
                     f"{m['diversity_back']:.3f} (real {m['real_diversity_back']:.3f}) | {m['xview_spread']:.3f} "
                     f"(real {m['real_xview_spread']:.3f}) |")
    if "real_fd_front" in rs[0]:
        lines += ["", "Real-vs-real FD floor (fresh renders against the reference, same sample size): front "
                  f"{rs[0]['real_fd_front']:.3f}, side {rs[0]['real_fd_side']:.3f}, back {rs[0]['real_fd_back']:.3f}."]
    lines += ["", "| claim | held | evidence |", "|---|---|---|"]
    lines += [f"| {c['statement']} | {'held' if c['held'] else '**not held**'} | {c['evidence']} |" for c in rec["claims"]]
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
