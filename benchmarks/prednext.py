"""PredNext on generated videos: base SSL vs + PredNext for SimSiam, SimCLR and MoCo, two tasks, 3 seeds paired.

    nice -n 10 .venv/bin/python -u benchmarks/prednext.py --cache /tmp/pn44.jsonl   # the committed run
    .venv/bin/python benchmarks/prednext.py --steps 1000 --bases simsiam simclr byol --variants base prednext forced

Tasks: "motion" (moving digits, 8 motion classes) and "order" (three bar glyphs cycled in one of two orders: the
classes are time reverses of each other, so the label needs the frame order and step / clip prediction is not
identity).
For each (task, base) every (variant, seed) run is pretrained with the same compiled step (variants are traced
loss switches; runs with the same seed share the initial weights, the batches and the augmentations), then
evaluated: a linear probe on the frozen backbone, supervised fine-tuning of the backbone + a linear head (the
paper's metric), nearest-neighbour retrieval R@1 / R@5, temporal inconsistency of the backbone features (probed)
and of the projector outputs (where the losses act), and the collapse monitor. Writes
benchmarks/results/prednext.json, PNG plots, and the README table between the table markers.
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
from core.results import RESULTS_DIR, claim, paired_claim, sample_sd, write_results  # noqa: E402
from forecasting.prednext import configs, train  # noqa: E402
from forecasting.prednext.data import make_datasets  # noqa: E402

README = ROOT / "forecasting" / "prednext" / "README.md"
METRICS = ("probe_task", "finetune_task", "retrieval_r1", "retrieval_r5", "probe_digit", "inconsistency_f",
           "inconsistency_z", "z_std", "spike_rate_f")
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


CHANCE = {"motion": 1 / 8, "order": 1 / 2}  # eight motion classes; two cyclic orders of the three bar glyphs


def _per_seed(rows: list[dict], base: str, variant: str, metric: str) -> dict[int, float]:
    return {r["seed"]: float(r[metric]) for r in rows if r["base"] == base and r["variant"] == variant}


def _arms(rows: list[dict], base: str, a: str, b: str, metric: str) -> tuple[list[float], list[float], list[int]]:
    """Two variants' values of one metric on the seeds both ran (same order: a paired comparison)."""
    ra, rb = _per_seed(rows, base, a, metric), _per_seed(rows, base, b, metric)
    seeds = sorted(set(ra) & set(rb))
    return [ra[s] for s in seeds], [rb[s] for s in seeds], seeds


def _all_of(id_: str, statement: str, parts: list[dict]) -> dict:
    """A claim made of several paired parts: held when every part holds, not held when any fails, else
    inconclusive; carries the n, effect and interval of the part that decides it."""
    verdicts = [p["held"] for p in parts]
    held = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    decisive = next(p for p in parts if p["held"] is held) if held in verdicts else parts[0]
    return claim(id_, statement, held, "; ".join(f"{p['id']}: {p['evidence']}" for p in parts)
                 + f"; held only if every part holds (n, effect and interval of {decisive['id']})",
                 n=decisive["n"], effect=decisive["effect"], interval=decisive["interval"], test=decisive["test"],
                 parts={p["id"]: p["held"] for p in parts})


def claims_from_rows(rows: list[dict]) -> list[dict]:
    """Every claim, recomputed from the stored per-(task, base, variant, seed) rows: paired over seeds (runs with
    the same seed share the initial weights, batches and augmentations), 95% t-interval of the paired differences."""
    claims = []
    for task in dict.fromkeys(r.get("task", "motion") for r in rows):
        trows = [r for r in rows if r.get("task", "motion") == task]
        init = [r for r in trows if r["variant"] == "random_init"]
        chance = CHANCE[task]
        for base in dict.fromkeys(r["base"] for r in trows if r["base"] != "none"):
            variants = {r["variant"] for r in trows if r["base"] == base}
            tag = f"{task}/{base}"
            if {"prednext", "base"} <= variants:
                for metric, what in (("probe_task", "linear probe"), ("finetune_task", "fine-tuning accuracy"),
                                     ("retrieval_r1", "retrieval R@1")):
                    if not all(metric in r for r in trows if r["base"] == base):
                        continue
                    ref = (f"; untrained network {100 * np.mean([r[metric] for r in init]):.1f} %"
                           if init and all(metric in r for r in init) else "")
                    a, b, _ = _arms(trows, base, "prednext", "base", metric)
                    claims.append(paired_claim(
                        f"{task}_{base}_prednext_{metric}",
                        f"{tag}: + PredNext beats the base objective on the {task} task's {what}", a, b,
                        chance=chance, evidence=f"{what} (top-1 / recall){ref}"))
                a, b, _ = _arms(trows, base, "prednext", "base", "inconsistency_f")
                claims.append(paired_claim(
                    f"{task}_{base}_prednext_consistency",
                    f"{tag}: + PredNext makes the per-step backbone features (the probed features, the paper's f) "
                    "more consistent over time (lower E_consistency) than the base objective", a, b,
                    higher_is_better=False, evidence="E_consistency of the backbone spike-rate features"))
                a, b, _ = _arms(trows, base, "prednext", "base", "inconsistency_z")
                claims.append(paired_claim(
                    f"{task}_{base}_prednext_consistency_projector",
                    f"{tag}: + PredNext makes the per-step projector outputs z (where its losses act) more "
                    "consistent over time than the base objective", a, b, higher_is_better=False,
                    evidence="E_consistency of the projector outputs z"))
            if {"forced", "base"} <= variants:
                fc, bc, _ = _arms(trows, base, "forced", "base", "inconsistency_z")
                fm, bm, _ = _arms(trows, base, "forced", "base", "probe_task")
                claims.append(_all_of(
                    f"{task}_{base}_forced_consistency_not_accuracy",
                    f"{tag}: forced consistency lowers E_consistency (of z, where its term acts here) but lowers "
                    "the linear probe accuracy (the paper's Table 4)",
                    [paired_claim("consistency", "forced lowers E_consistency(z)", fc, bc, higher_is_better=False),
                     paired_claim("accuracy", "forced lowers the probe", fm, bm, higher_is_better=False)]))
    return claims


def sample_summary(runs: list[dict]) -> dict:
    """Per-variant mean and sample sd (ddof 1) over seeds of every numeric metric."""
    out = {}
    for v in dict.fromkeys(r["variant"] for r in runs):
        rs = [r for r in runs if r["variant"] == v]
        keys = [k for k, x in rs[0].items() if k not in ("base", "variant", "seed")
                and isinstance(x, (int, float)) and not isinstance(x, bool)]
        out[v] = {k: {"mean": float(np.mean([r[k] for r in rs])), "std": sample_sd([r[k] for r in rs]),
                      "n": len(rs)} for k in keys}
    return out


def render_table(results: dict, claims: list[dict], speed: list[dict], scale: dict, wall: float) -> str:
    lines = [f"Generated videos (32x32, T = 8): moving digits (8 motion classes) and an order task (three bar "
             f"glyphs shown {scale.get('order_hold', 2)} frames each in one of 2 cyclic orders: the classes are "
             f"time reverses, the label needs the frame order); {scale['n_train']} train / {scale['n_test']} test "
             "videos, "
             f"{scale['steps']} pretraining steps at batch {scale['batch']}, {scale['seeds']} seeds; mean ± sample sd "
             f"over seeds. Probe: linear softmax on frozen, time- and {scale['eval_clips']}-clip-averaged backbone "
             f"spike rates; fine-tune: backbone + linear head trained {scale['finetune_steps']} steps on the labels "
             "(for `init`: training from scratch); R@k: a test clip's k nearest train clips (cosine of the "
             "backbone features) include its class. E_cons.: temporal inconsistency of the per-step features "
             f"(lower = more consistent). Run time {wall:.0f} s (one process, plus runs restored from the cache).", "",
             "| task | base | variant | probe ↑ | fine-tune ↑ | R@1 ↑ | R@5 ↑ | E_cons. (backbone) ↓ | "
             "E_cons. (z) ↓ | feature std (1/√d = " + f"{1 / np.sqrt(scale['proj_dim']):.3f}) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (task, base), res in results.items():
        for v, st in res["variants"].items():
            cell = {k: (fmt(st[k]) if k in st else "–") for k in ("finetune_task", "retrieval_r1", "retrieval_r5")}
            lines.append(f"| {task} | {base} | {v} | {fmt_n(st['probe_task'])} | {cell['finetune_task']} | "
                         f"{cell['retrieval_r1']} | {cell['retrieval_r5']} | {fmt(st['inconsistency_f'], 1, 4)} | "
                         f"{fmt(st['inconsistency_z'], 1, 4)} | {fmt(st['z_std'], 1, 4)} |")
    verdicts = {True: "**held**", False: "**not held**", None: "**inconclusive**"}
    lines += ["", "Claims (paired over seeds; effect = mean paired difference with its 95% t-interval):", "",
              "| claim | result | n | effect [interval] |", "|---|---|---|---|"]
    lines += [f"| {c['statement']} | {verdicts[c['held']]} | {c['n']} | {c['effect']:.4g} "
              f"[{', '.join('–' if v is None else f'{v:.4g}' for v in c['interval'])}] |"
              for c in claims]
    lines += ["", "Speed (train steps at T = 8, 32x32, batch 32 on the shared 2 CPU cores, median over the "
              "benchmark's runs; a PredNext step also encodes the future clips):", ""]
    for (task, base), res in results.items():
        if base == "init":
            continue
        for v in res["variants"]:
            runs = [r for r in res["runs"] if r["variant"] == v and "step_seconds_median" in r]
            t = [r["step_seconds_median"] for r in runs]
            load = [r["load_average"] for r in runs if "load_average" in r]
            if t:
                lines.append(f"- {task} / {base} / {v}: {1 / np.median(t):.2f} steps/s ({np.median(t):.2f} s/step)"
                             + (f", load average {min(load):.1f}-{max(load):.1f} at the runs' ends" if load else ""))
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
    """{(task, base): {"runs": rows, "variants": per-variant mean/std}} from the finished runs."""
    out = {}
    for task, base in dict.fromkeys((r.get("task", "motion"), r["base"]) for r in rows):
        runs = [r for r in rows if r.get("task", "motion") == task and r["base"] == base]
        out[(task, "init" if base == "none" else base)] = {"runs": runs, "variants": sample_summary(runs)}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", default=["order", "motion"], choices=["motion", "order"])
    p.add_argument("--bases", nargs="+", default=["simsiam", "simclr", "moco"], choices=configs.BASES)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--finetune-steps", type=int, default=40)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--variants", nargs="+", default=["base", "prednext"])
    p.add_argument("--n-train", type=int, default=384)
    p.add_argument("--n-test", type=int, default=192)
    p.add_argument("--eval-clips", type=int, default=2)
    p.add_argument("--calibrate-batches", type=int, default=40,
                   help="train-mode forward passes that set the untrained network's BN statistics")
    p.add_argument("--speed", action="store_true", help="also time a PredNext step on a fixed batch at the end")
    p.add_argument("--render-only", action="store_true",
                   help="train nothing: write the JSON, plots and README table from the cached runs")
    p.add_argument("--train-seeds", type=int, nargs="+", default=None,
                   help="train only these seeds (e.g. to run seeds in parallel processes); default: all")
    p.add_argument("--cache", default=str(pathlib.Path(tempfile.gettempdir()) / "prednext_bench_runs.jsonl"),
                   help="finished runs (one JSON per line); a restarted benchmark with the same scale skips them")
    p.add_argument("--claims-from-rows", action="store_true",
                   help="recompute the claims (and the README table) from the rows in the committed JSON; command, "
                        "git_commit, wall_seconds and rows are kept as they were")
    args = p.parse_args(argv)
    if args.claims_from_rows:
        return recompute_claims()
    t0 = time.time()
    load_start = os.getloadavg()
    cfg0 = configs.bench(args.bases[0], steps=args.steps, seeds=1)
    cfg0 = dataclasses.replace(cfg0, variants=tuple(args.variants),
                               data=dataclasses.replace(cfg0.data, n_train=args.n_train, n_test=args.n_test),
                               train=dataclasses.replace(cfg0.train, batch_size=args.batch, eval_clips=args.eval_clips,
                                                         finetune_steps=args.finetune_steps))
    scale = {"n_train": args.n_train, "n_test": args.n_test, "steps": args.steps, "batch": args.batch,
             "seeds": args.seeds, "eval_clips": args.eval_clips, "proj_dim": cfg0.model.proj_dim,
             "finetune_steps": args.finetune_steps, "channels": list(cfg0.model.channels),
             "stem_stride": cfg0.model.stem_stride, "proj_out_bn": cfg0.model.proj_out_bn,
             "per_view_bn": cfg0.model.per_view_bn, "moco_queue": cfg0.loss.moco_queue,
             "moco_momentum": cfg0.loss.moco_momentum, "calibrate_batches": args.calibrate_batches,
             "order_symbols": cfg0.data.symbols, "order_hold": cfg0.data.hold,
             "issue_scale": "~1k steps at batch 32 per run (notes); 80 at batch 16 so that 36 runs + fine-tuning "
                            "fit ~25-30 min on the 2-core machine at load ~13"}
    cache = pathlib.Path(args.cache)
    key = json.dumps(scale, sort_keys=True)

    def same_scale(r: dict) -> bool:  # the number of seeds is not part of a run's identity
        other = json.loads(r.get("scale", "{}"))
        return {k: v for k, v in other.items() if k != "seeds"} == {k: v for k, v in scale.items() if k != "seeds"}

    rows = [r for r in (json.loads(x) for x in cache.read_text().splitlines() if x.strip())
            if same_scale(r) and r["seed"] < args.seeds and r.get("task") in args.tasks] if cache.exists() else []
    for r in rows:
        r["cached"] = True
    done = {(r["task"], r["base"], r["variant"], r["seed"]) for r in rows}
    speed: list[dict] = []
    histories: dict = {}

    def save(final: bool = False):
        results = summarize_all(rows)
        claims = claims_from_rows(rows)
        wall = time.time() - t0 + sum(r.get("seconds", 0.0) for r in rows if r.get("cached"))
        write_results("prednext", rows=[{k: v for k, v in r.items() if k not in ("scale", "cached")} for r in rows],
                      claims=claims, wall_seconds=wall, scale=scale, speed=speed, paper_ucf101_top1=PAPER,
                      summary={f"{t}/{b}": r["variants"] for (t, b), r in results.items()}, history=histories,
                      load_average_start=load_start, load_average_end=os.getloadavg(), complete=final)
        return results, claims, wall

    def record(row: dict) -> None:
        row["scale"] = key
        rows.append(row)
        with cache.open("a") as f:
            f.write(json.dumps(row) + "\n")
        save()

    train_seeds = args.train_seeds if args.train_seeds is not None else range(args.seeds)
    # task-major, then seed-major: whatever has finished at any time is a complete comparison for its seeds
    for task in ([] if args.render_only else args.tasks):
        tcfg = dataclasses.replace(cfg0, data=dataclasses.replace(cfg0.data, task=task))
        data = make_datasets(tcfg.data)
        extract = train.programs(train.eval_key(tcfg))[4]
        for seed in train_seeds:
            scfg = dataclasses.replace(tcfg, train=dataclasses.replace(tcfg.train, seed=seed))
            if (task, "none", "random_init", seed) not in done:
                t = time.time()
                init_state = train.calibrated_init(scfg, 0, data, batches=args.calibrate_batches)
                e = train.evaluate_runs(scfg, extract, [init_state], data, seeds=[seed])[0]
                record({"task": task, "base": "none", "variant": "random_init", "seed": seed, **e,
                        "seconds": time.time() - t})
                done.add((task, "none", "random_init", seed))
            for base in args.bases:
                cfg = dataclasses.replace(scfg, loss=dataclasses.replace(scfg.loss, base=base))
                for variant in args.variants:
                    if (task, base, variant, seed) in done:
                        continue
                    t = time.time()
                    with tempfile.TemporaryDirectory() as tmp:  # the run's checkpoints (resume is per run here)
                        state, history, step_times = train.train_run(cfg, variant, 0, data, workdir=tmp,
                                                                     progress_bar=False)
                    e = train.evaluate_runs(cfg, extract, [state], data, seeds=[seed])[0]
                    histories[f"{task}/{base}/{variant}/{seed}"] = history
                    record({"task": task, "base": base, "variant": variant, "seed": seed, **e,
                            "seconds": time.time() - t,
                            "step_seconds_median": float(np.median(step_times[1:] or step_times)),
                            "load_average": os.getloadavg()[0]})
                    print(f"[prednext] {task}/{base}/{variant}/seed{seed} ({time.time() - t:.0f} s): "
                          + json.dumps({k: round(e[k], 4) for k in METRICS if k in e}), flush=True)
    results = summarize_all(rows)
    for (task, base), res in results.items():
        if base == "init":
            continue
        st = res["variants"]
        for metric, title in (("probe_task", "linear probe (%)"), ("finetune_task", "fine-tuning (%)")):
            if all(metric in st[v] for v in st):
                bar_plot(RESULTS_DIR / f"prednext_{task}_{base}_{metric}.png",
                         {v: 100 * st[v][metric]["mean"] for v in st}, {v: 100 * st[v][metric]["std"] for v in st},
                         title=f"{task} / {base}: {title}", ylabel="top-1 %")
    if args.speed:
        speed.append(step_speed(cfg0))
        print("[prednext] speed", speed, flush=True)
    results, claims, wall = save(final=True)
    write_readme_table(render_table(results, claims, speed, scale, wall))
    for c in claims:
        print(f"[prednext] {({True: 'HELD', False: 'NOT HELD', None: 'INCONCLUSIVE'})[c['held']]}: {c['id']} "
              f"{c['effect']:.4g} {c['interval']}")


def recompute_claims() -> int:
    from core.results import git_commit
    path = RESULTS_DIR / "prednext.json"
    record = json.loads(path.read_text())
    rows = record["rows"]
    claims = claims_from_rows(rows)
    results = summarize_all(rows)
    record["claims"] = claims
    record["summary"] = {f"{t}/{b}": r["variants"] for (t, b), r in results.items()}
    record["claims_recomputed"] = f"{git_commit()[:7]} (from the stored rows)"
    path.write_text(json.dumps(record, indent=2) + "\n")
    write_readme_table(render_table(results, claims, record.get("speed", []), record["scale"],
                                    record["wall_seconds"]))
    for c in claims:
        print(f"[prednext] {({True: 'HELD', False: 'NOT HELD', None: 'INCONCLUSIVE'})[c['held']]}: {c['id']} "
              f"{c['effect']:.4g} {c['interval']}")
    return 0


if __name__ == "__main__":
    main()
