"""PredNext on moving digits: base SSL vs + PredNext vs + forced consistency, two base objectives, 3 seeds.

    .venv/bin/python -u benchmarks/prednext.py --speed-stride1 --cache /tmp/pn500.jsonl   # the committed run
    .venv/bin/python benchmarks/prednext.py --steps 1000 --bases simsiam simclr byol

For each base objective, every (variant, seed) run is pretrained with the same compiled step (variants are
traced loss switches; runs with the same seed share the initial weights, the batches and the augmentations),
then the frozen backbone is evaluated: linear probes for the motion class (8 classes) and the digit (10),
temporal inconsistency E_consistency of the per-step features, and the collapse monitor. Also measures
train steps/s of the spiking CNN at T = 8, 32x32, batch 32. Writes benchmarks/results/prednext.json, PNG
plots, and the README table between the table markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.plots import bar_plot  # noqa: E402
from core.results import RESULTS_DIR, claim, write_results  # noqa: E402
from forecasting.prednext import configs, train  # noqa: E402
from forecasting.prednext.data import make_datasets  # noqa: E402

README = ROOT / "forecasting" / "prednext" / "README.md"
METRICS = ("probe_motion", "probe_digit", "inconsistency_z", "inconsistency_f", "disjoint_clip_cos_z", "z_std",
           "spike_rate_f")
PAPER = {  # UCF101 top-1 (%) from the method notes (two third-party notes agree; unconfirmed)
    "simclr": (57.04, 59.47), "simsiam": (50.81, 54.93), "byol": (56.41, 58.58), "barlowtwins": (56.15, 59.76)}


def step_speed(config: configs.Config, steps: int = 10) -> dict:
    """Steps/s of one PredNext training step (both views, future clips, all heads) at the config's size."""
    _, init_fn, _, step, _, _ = train.programs(train._shape_key(config))  # the benchmark's compiled step
    state = init_fn(jax.random.key(0))
    c, b = config.data, config.train.batch_size
    rng = np.random.default_rng(0)
    batch = {"clip": rng.integers(0, 255, (b, c.clip_len + 2 * c.jitter, c.canvas, c.canvas), dtype=np.uint8),
             "future": rng.integers(0, 255, (b, c.clip_len, c.canvas, c.canvas), dtype=np.uint8)}
    sw = jnp.asarray([configs.VARIANTS["prednext"][k] for k in train.SWITCHES], jnp.float32)
    t = time.time()
    state, m = step(state, batch, sw)
    jax.block_until_ready(m)
    compile_s = time.time() - t
    t = time.time()
    for _ in range(steps):
        state, m = step(state, batch, sw)
    jax.block_until_ready(m)
    per = (time.time() - t) / steps
    return {"steps_per_s": 1.0 / per, "step_seconds": per, "compile_seconds": compile_s,
            "channels": list(config.model.channels), "stem_stride": config.model.stem_stride,
            "T": c.clip_len, "size": c.canvas, "batch": b, "load_average": os.getloadavg()[0]}


def fmt(s: dict, scale: float = 100.0, digits: int = 1) -> str:
    return f"{scale * s['mean']:.{digits}f} ± {scale * s['std']:.{digits}f}"


def fmt_n(s: dict, scale: float = 100.0, digits: int = 1) -> str:
    """mean ± std, with the number of seeds when it is not the full count."""
    return fmt(s, scale, digits) + (f" (n={s['n']})" if s.get("n", 3) != 3 else "")


def paired(runs: list[dict], base: str, a: str, b: str, metric: str, lower: bool = False) -> str:
    ra = {r["seed"]: r[metric] for r in runs if r["base"] == base and r["variant"] == a}
    rb = {r["seed"]: r[metric] for r in runs if r["base"] == base and r["variant"] == b}
    common = sorted(set(ra) & set(rb))
    wins = sum((ra[s] < rb[s]) if lower else (ra[s] > rb[s]) for s in common)
    return f"{wins}/{len(common)} paired seeds"


def make_claims(results: dict) -> list[dict]:
    claims = []
    for base, res in results.items():
        if base == "init":
            continue
        st, runs = res["variants"], res["runs"]
        if "prednext" in st and "base" in st:
            pm, bm = st["prednext"]["probe_motion"], st["base"]["probe_motion"]
            claims.append(claim(f"{base}_prednext_motion_probe",
                                f"{base}: + PredNext beats the base objective on the motion linear probe",
                                pm["mean"] > bm["mean"],
                                f"motion probe {fmt(pm)} vs base {fmt(bm)} % (PredNext better on "
                                f"{paired(runs, base, 'prednext', 'base', 'probe_motion')})"))
            pc, bc = st["prednext"]["inconsistency_z"], st["base"]["inconsistency_z"]
            claims.append(claim(f"{base}_prednext_consistency",
                                f"{base}: + PredNext makes per-step features more consistent over time (lower "
                                "E_consistency) than the base objective",
                                pc["mean"] < bc["mean"],
                                f"E_consistency {fmt(pc, 1, 4)} vs base {fmt(bc, 1, 4)} (PredNext lower on "
                                f"{paired(runs, base, 'prednext', 'base', 'inconsistency_z', lower=True)})"))
        if "forced" in st and "base" in st:
            fc, bc = st["forced"]["inconsistency_z"], st["base"]["inconsistency_z"]
            fm, bm = st["forced"]["probe_motion"], st["base"]["probe_motion"]
            claims.append(claim(f"{base}_forced_consistency_not_accuracy",
                                f"{base}: forced consistency lowers E_consistency but does not raise the motion "
                                "probe accuracy",
                                fc["mean"] < bc["mean"] and fm["mean"] <= bm["mean"],
                                f"E_consistency {fmt(fc, 1, 4)} vs base {fmt(bc, 1, 4)}; motion probe {fmt(fm)} vs "
                                f"base {fmt(bm)} %"))
            if "prednext" in st:
                pm = st["prednext"]["probe_motion"]
                claims.append(claim(f"{base}_prednext_beats_forced",
                                    f"{base}: + PredNext beats forced consistency on the motion probe",
                                    pm["mean"] > fm["mean"],
                                    f"motion probe {fmt(pm)} vs forced {fmt(fm)} % (PredNext better on "
                                    f"{paired(runs, base, 'prednext', 'forced', 'probe_motion')})"))
    return claims


def render_table(results: dict, claims: list[dict], speed: list[dict], scale: dict, wall: float) -> str:
    lines = [f"Moving digits (32x32, T = 8, 8 motion classes, 10 digits), {scale['n_train']} train / "
             f"{scale['n_test']} test videos, {scale['steps']} pretraining steps at batch {scale['batch']}, "
             f"{scale['seeds']} seeds; mean ± std over seeds. Probe: linear softmax on frozen, time- and "
             f"{scale['eval_clips']}-clip-averaged backbone spike rates (top-1 %). E_cons.: temporal "
             "inconsistency of the per-step features z (lower = more consistent). Run time "
             f"{wall:.0f} s (wall time of one process, plus the recorded time of runs restored from the cache).", "",
             "| base | variant | motion probe ↑ | digit probe ↑ | E_cons. (z) ↓ | E_cons. (backbone) ↓ | "
             "cos(disjoint clips) | feature std (1/√d = " + f"{1 / np.sqrt(scale['proj_dim']):.3f}) |",
             "|---|---|---|---|---|---|---|---|"]
    for base, res in results.items():
        for v, st in res["variants"].items():
            lines.append(f"| {base} | {v} | {fmt_n(st['probe_motion'])} | {fmt(st['probe_digit'])} | "
                         f"{fmt(st['inconsistency_z'], 1, 4)} | {fmt(st['inconsistency_f'], 1, 4)} | "
                         f"{fmt(st['disjoint_clip_cos_z'], 1, 3)} | {fmt(st['z_std'], 1, 4)} |")
    lines += ["", "| claim | held | evidence |", "|---|---|---|"]
    lines += [f"| {c['statement']} | **{'held' if c['held'] else 'not held'}** | {c['evidence']} |" for c in claims]
    lines += ["", "Speed (train steps at T = 8, 32x32, batch 32 on the 2 CPU cores; a PredNext step encodes two views "
              "and two future clips, base and forced steps skip the future clips):", ""]
    for base, res in results.items():
        if base == "init":
            continue
        for v in res["variants"]:
            runs = [r for r in res["runs"] if r["variant"] == v and "step_seconds_median" in r]
            t = [r["step_seconds_median"] for r in runs]
            load = [r["load_average"] for r in runs if "load_average" in r]
            if t:
                lines.append(f"- {base} / {v} step ({'/'.join(map(str, scale['channels']))} channels, first-conv "
                             f"stride {scale['stem_stride']}), median over the benchmark's runs: "
                             f"{1 / np.median(t):.2f} steps/s ({np.median(t):.2f} s/step), fastest run "
                             f"{1 / np.min(t):.2f} steps/s" + (f" (load average {min(load):.1f}-{max(load):.1f} at the "
                                                            "runs' ends)" if load else ""))
    lines += [f"- channels {'/'.join(map(str, s['channels']))}, first-conv stride {s['stem_stride']}: "
              f"{s['steps_per_s']:.2f} steps/s ({s['step_seconds']:.2f} s/step, compile {s['compile_seconds']:.0f} s, "
              f"load average {s['load_average']:.1f})" for s in speed]
    return "\n".join(lines)


def write_readme_table(text: str) -> None:
    if not README.exists():
        return
    src = README.read_text()
    new = re.sub(r"(<!-- table:prednext -->\n).*?(\n<!-- /table:prednext -->)",
                 lambda m: m.group(1) + text + m.group(2), src, flags=re.S)
    README.write_text(new)


def summarize_all(rows: list[dict]) -> dict:
    """{base: {"runs": rows, "variants": per-variant mean/std}} from the finished runs."""
    out = {}
    for base in dict.fromkeys(r["base"] for r in rows):
        runs = [r for r in rows if r["base"] == base]
        out["init" if base == "none" else base] = {"runs": runs, "variants": train.summarize(runs)}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bases", nargs="+", default=["simsiam", "simclr"], choices=configs.BASES)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--variants", nargs="+", default=["base", "prednext", "forced"])
    p.add_argument("--n-train", type=int, default=1024)
    p.add_argument("--n-test", type=int, default=512)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--render-only", action="store_true",
                   help="train nothing: write the JSON, plots and README table from the cached runs")
    p.add_argument("--speed-stride1", action="store_true", help="also time the first conv at stride 1 (slow compile)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=None,
                   help="train only these seeds (e.g. to run seeds in parallel processes); default: all")
    p.add_argument("--cache", default=str(pathlib.Path(tempfile.gettempdir()) / "prednext_bench_runs.jsonl"),
                   help="finished runs (one JSON per line); a restarted benchmark with the same scale skips them")
    args = p.parse_args(argv)
    t0 = time.time()
    cfg0 = configs.bench(args.bases[0], steps=args.steps, seeds=1)
    cfg0 = dataclasses.replace(cfg0, variants=tuple(args.variants),
                               data=dataclasses.replace(cfg0.data, n_train=args.n_train, n_test=args.n_test))
    data = None if args.render_only else make_datasets(cfg0.data)
    scale = {"n_train": args.n_train, "n_test": args.n_test, "steps": args.steps, "batch": cfg0.train.batch_size,
             "seeds": args.seeds, "eval_clips": cfg0.train.eval_clips, "proj_dim": cfg0.model.proj_dim,
             "channels": list(cfg0.model.channels), "stem_stride": cfg0.model.stem_stride,
             "issue_scale": "~1k steps per run (notes); 500 so that the whole benchmark fits the issue's 60 minutes"}
    cache = pathlib.Path(args.cache)
    key = json.dumps(scale, sort_keys=True)

    def same_scale(r: dict) -> bool:  # the number of seeds is not part of a run's identity
        other = json.loads(r.get("scale", "{}"))
        return {k: v for k, v in other.items() if k != "seeds"} == {k: v for k, v in scale.items() if k != "seeds"}

    rows = [r for r in (json.loads(x) for x in cache.read_text().splitlines() if x.strip())
            if same_scale(r) and r["seed"] < args.seeds] if cache.exists() else []
    for r in rows:
        r["cached"] = True
    done = {(r["base"], r["variant"], r["seed"]) for r in rows}
    speed: list[dict] = []
    histories: dict = {}

    def save(final: bool = False):
        results = summarize_all(rows)
        claims = make_claims(results)
        wall = time.time() - t0 + sum(r.get("seconds", 0.0) for r in rows if r.get("cached"))
        write_results("prednext", rows=[{k: v for k, v in r.items() if k not in ("scale", "cached")} for r in rows],
                      claims=claims,
                      wall_seconds=wall, scale=scale, speed=speed, paper_ucf101_top1=PAPER,
                      summary={b: r["variants"] for b, r in results.items()}, history=histories,
                      complete=final)
        return results, claims, wall

    def record(row: dict) -> None:
        row["scale"] = key
        rows.append(row)
        with cache.open("a") as f:
            f.write(json.dumps(row) + "\n")
        save()

    # seed-major order: whatever has finished at any time is a complete comparison for its seeds
    def finished_elsewhere(run: tuple) -> bool:  # another process may have appended it to the cache
        if not cache.exists():
            return False
        return any(same_scale(r) and (r["base"], r["variant"], r["seed"]) == run
                   for r in (json.loads(x) for x in cache.read_text().splitlines() if x.strip()))

    train_seeds = args.train_seeds if args.train_seeds is not None else range(args.seeds)
    for seed in ([] if args.render_only else train_seeds):
        for base in args.bases:
            cfg = dataclasses.replace(cfg0, loss=dataclasses.replace(cfg0.loss, base=base),
                                      train=dataclasses.replace(cfg0.train, seed=seed))
            extract = train.programs(train._shape_key(cfg))[4]
            if ("none", "random_init", seed) not in done:
                t = time.time()
                e = train.evaluate_runs(cfg, extract, [train.calibrated_init(cfg, 0, data)], data)[0]
                record({"base": "none", "variant": "random_init", "seed": seed, **e, "seconds": time.time() - t})
                done.add(("none", "random_init", seed))
            for variant in args.variants:
                if (base, variant, seed) in done or finished_elsewhere((base, variant, seed)):
                    continue
                t = time.time()
                with tempfile.TemporaryDirectory() as tmp:  # the run's checkpoints (resume is per run here)
                    state, history, step_times = train.train_run(cfg, variant, 0, data, workdir=tmp)
                e = train.evaluate_runs(cfg, extract, [state], data)[0]
                histories[f"{base}/{variant}/{seed}"] = history
                record({"base": base, "variant": variant, "seed": seed, **e, "seconds": time.time() - t,
                        "step_seconds_median": float(np.median(step_times[1:] or step_times)),
                        "load_average": os.getloadavg()[0]})
                print(f"[prednext] {base}/{variant}/seed{seed}: " + json.dumps({k: round(e[k], 4) for k in METRICS}),
                      flush=True)
    results = summarize_all(rows)
    plots = []
    for base, res in results.items():
        if base == "init":
            continue
        st = res["variants"]
        plots.append(str(bar_plot(RESULTS_DIR / f"prednext_{base}_motion_probe.png",
                                  {v: 100 * st[v]["probe_motion"]["mean"] for v in st},
                                  {v: 100 * st[v]["probe_motion"]["std"] for v in st},
                                  title=f"{base}: motion linear probe (%)", ylabel="top-1 %")))
        plots.append(str(bar_plot(RESULTS_DIR / f"prednext_{base}_consistency.png",
                                  {v: st[v]["inconsistency_z"]["mean"] for v in st},
                                  {v: st[v]["inconsistency_z"]["std"] for v in st},
                                  title=f"{base}: temporal inconsistency (lower = more consistent)",
                                  ylabel="E_consistency")))
    if not args.no_speed:
        speed.append(step_speed(cfg0))
        if args.speed_stride1:
            full = dataclasses.replace(cfg0, model=dataclasses.replace(cfg0.model, stem_stride=1))
            speed.append(step_speed(full))
        print("[prednext] speed", speed, flush=True)
    results, claims, wall = save(final=True)
    write_readme_table(render_table(results, claims, speed, scale, wall))
    for c in claims:
        print(f"[prednext] {'HELD' if c['held'] else 'NOT HELD'}: {c['statement']} ({c['evidence']})")


if __name__ == "__main__":
    main()
