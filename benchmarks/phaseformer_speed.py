"""One training epoch of the official PhaseFormer code (PyTorch Lightning, ``neumyor/PhaseFormer``) against ours on
ETTh1-96 and ETTm1-96, interleaved, on this machine (issues 44 and 47; goal: ours <= 1/3 of the official time).

The official code is not part of this project (no licence; never committed): bring it in and unpack it under /tmp,
install torch CPU and Lightning through the ``phaseformer_peer`` extra, then run this script::

    git --git-dir=<fetched bare repo> archive HEAD | tar -x -C /tmp/pf_official
    git --git-dir=<fetched bare repo> rev-parse HEAD > /tmp/pf_official/COMMIT   # recorded as the peer's commit
    .venv/bin/pip install -e .[phaseformer_peer]
    nice -n 10 .venv/bin/python benchmarks/phaseformer_speed.py --official-dir /tmp/pf_official
    .venv/bin/python benchmarks/phaseformer_speed.py --claims-from-rows
    -> benchmarks/results/phaseformer_speed.json

Each measurement is its own process (``--worker official`` / ``--worker ours``). Both arms train the same
configuration (the released ETTh1 / ETTm1 scripts' model at H = 96, L = 720, Adam lr 1e-3, Huber loss, training
loader with drop_last) on the same shipped CSV, at the same batch size. What is timed is training steps only, the
first ``--steps`` of an epoch (default 100; 0 for a whole epoch), scaled to the epoch's step count: the official
code's from the first batch's start to the last batch's end (Lightning callbacks, validation off, its data loaders as
the scripts make them with ``num_workers`` from its base config, their start-up left out), ours one call of the jitted
epoch function on those windows after a warm-up call (its compile seconds are recorded apart). The pair order
alternates, and ``uptime`` is read before and after every measurement.

``--whole-run`` times what a user waits for instead (issue 47's "whole 2-epoch run"): one process from launch to
exit, imports, data, compilation, ``--epochs`` training epochs with validation and the per-epoch test (the
released ETTh1 script's ``EpochTestCallback``), the final test and, on our side, checkpoints and plots. Ours is
``iclr26 run phaseformer --preset etth1_96[_b256] --set epochs=N`` twice over: with the compile cache off (a
first run) and warm (the second run: its cache filled by one unmeasured run first); the official arm is
Lightning's ``fit`` with the validation loader, then ``test``. The three arms rotate their order pair by pair.

    nice -n 10 .venv/bin/python benchmarks/phaseformer_speed.py --whole-run --batch-sizes 16 256 --pairs 3
    -> benchmarks/results/phaseformer_whole_run.json
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import RESULTS_DIR, check, recompute_claims, speedup_claim, write_results  # noqa: E402

NAME = "phaseformer_speed"
WHOLE_RUN_NAME = "phaseformer_whole_run"
GOAL = 3.0  # official / ours per-epoch time
PRESETS = {"ETTh1": "etth1_96", "ETTm1": "ettm1_96"}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def worker_ours(dataset: str, batch_size: int, steps: int) -> dict:
    import dataclasses

    t_import = time.perf_counter()
    import jax
    from flax import nnx

    from forecasting import data as data_lib
    from forecasting.phaseformer import EXPERIMENT, train
    config = dataclasses.replace(EXPERIMENT.presets[PRESETS[dataset]], batch_size=batch_size, plot=False)
    data = data_lib.load(config.dataset, config.seq_len, config.pred_len)
    n_train = data.num_windows("train")
    full_steps = n_train // batch_size  # drop_last, as the released loader
    steps = min(steps, full_steps) if steps else full_steps
    graphdef, params = nnx.split(train.build_model(config, jax.random.key(config.seed)), nnx.Param)
    tx = train.make_optimizer(config)
    opt_state = tx.init(params)
    epoch = train.make_epoch_fn(config, graphdef, tx, steps * batch_size)  # the first `steps` batches' windows
    series = jax.numpy.asarray(data.train)
    t0 = time.perf_counter()
    params, opt_state, loss = epoch(params, opt_state, series, jax.random.key(0), config.lr)
    float(loss)
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    params, opt_state, loss = epoch(params, opt_state, series, jax.random.key(1), config.lr)
    loss = float(loss)
    seconds = time.perf_counter() - t0
    return {"timed_seconds": seconds, "seconds_per_step": seconds / steps,
            "epoch_seconds": seconds / steps * full_steps,
            "first_call_seconds_with_compile": warmup, "train_loss": loss, "train_windows": n_train,
            "steps": steps, "epoch_steps": full_steps, "setup_seconds": t0 - t_import - seconds,
            "version": f"jax {jax.__version__}", "params": sum(int(p.size) for p in jax.tree.leaves(params)),
            "settings": {"preset": PRESETS[dataset], "latent_dim": config.latent_dim, "layers": config.num_layers,
                         "routers": config.num_routers, "heads": config.num_heads, "batch_size": batch_size,
                         "train_drop_last": config.train_drop_last, "device": str(jax.devices()[0])}}


def worker_official(dataset: str, batch_size: int, steps: int, official_dir: pathlib.Path, epochs: int = 0) -> dict:
    """Build the official model and loaders the way its run_<dataset>.py does (H = 96), then fit one epoch (its first
    ``steps`` batches when ``steps`` > 0), timed from the first batch's start to the last batch's end; with
    ``epochs`` > 0, the script's whole run instead: ``epochs`` epochs with validation and the per-epoch test, then
    the test."""
    t_import = time.perf_counter()
    os.chdir(official_dir)
    sys.path.insert(0, str(official_dir))
    import importlib

    import pytorch_lightning as pl
    import torch

    base = importlib.import_module("config.base_config")
    from src.dataset.data_factory import data_provider
    from src.models.PhaseFormer import PhaseFormer
    script = importlib.import_module(f"run_{dataset.lower()}")
    best = script.get_best_config_for_horizon(96)
    pl.seed_everything(2021, workers=True)
    torch.set_float32_matmul_precision("medium")
    args = base.config
    args.model_args.model = "PhaseFormer"
    args.model_args.input_len = args.dataset_args.seq_len = 720
    t = args.training_args
    t.itr, t.patience, t.ema, t.train_epochs, t.loss_func = 1, 8, False, 1, "mse"
    t.lr_schedule_config.type = "type3"
    t.use_huber_loss, t.huber_delta, t.learning_rate, t.batch_size = True, 1.0, best["learning_rate"], batch_size
    d = args.dataset_args
    d.percent, d.data, d.data_path, d.batch_size = 100, "ett_h" if dataset.startswith("ETTh") else "ett_m", \
        f"{dataset}.csv", batch_size
    d.root_path = str(ROOT / "forecasting" / "datasets" / "ett")
    d.var_needed = args.model_args.num_variants = 7
    d.pred_len, d.noisy_ratio = 96, 0.0
    # the base config's freq "t" (minutes) is an alias pandas 3 removed; "min" is the same offset and the same time
    # features (which PhaseFormer does not read)
    d.freq = "min" if d.freq == "t" else d.freq

    class ModelConfig:  # the attributes the run scripts set on the model's config object
        seq_len, pred_len, enc_in, period_len, target_var_index = 720, 96, 7, 24, -1
        training_args, dataset_args = t, d
        latent_dim, phase_layers = best["latent_dim"], best["layers"]
        phase_encoder_hidden, predictor_hidden = best["phase_encoder_hidden"], best["predictor_hidden"]
        phase_attn_heads, phase_attn_dropout = best["phase_attn_heads"], 0.1
        phase_attn_use_relpos, phase_attn_window, phase_attention_dim = True, None, None
        phase_num_routers, phase_use_pos_embed, phase_pos_dropout = best["phase_num_routers"], True, 0.0
        use_revin, revin_affine, revin_eps, use_huber_loss, huber_delta = True, False, 1e-5, True, 1.0

        def get(self, key, default=None):
            return getattr(self, key, default)

    _, train_loader = data_provider(d, "train")
    model = PhaseFormer(ModelConfig())
    if epochs:
        return _official_whole_run(pl, torch, script, model, d, train_loader, epochs, batch_size, official_dir)
    times = {}

    full_steps = len(train_loader)
    steps = min(steps, full_steps) if steps else full_steps

    class StepTimer(pl.Callback):  # the training steps only: the loader workers' start-up is left out
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            times.setdefault("start", time.perf_counter())

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            times["end"], times["steps"] = time.perf_counter(), batch_idx + 1

    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, deterministic=True, limit_train_batches=steps,
                         callbacks=[StepTimer()])
    setup = time.perf_counter() - t_import
    trainer.fit(model, train_dataloaders=train_loader)
    loss = trainer.callback_metrics.get("train_loss")
    seconds = times["end"] - times["start"]
    # the interval spans all `steps` steps: from the first one's start to the last one's end
    return {"timed_seconds": seconds, "seconds_per_step": seconds / times["steps"],
            "epoch_seconds": seconds / times["steps"] * full_steps, "setup_seconds": setup,
            "train_loss": None if loss is None else float(loss), "steps": times["steps"], "epoch_steps": full_steps,
            "train_windows": len(train_loader.dataset),
            "params": sum(p.numel() for p in model.parameters()),
            "version": f"torch {torch.__version__}, pytorch-lightning {pl.__version__}",
            "settings": {"script": f"run_{dataset.lower()}.py", "latent_dim": best["latent_dim"],
                         "layers": best["layers"], "routers": best["phase_num_routers"],
                         "heads": best["phase_attn_heads"], "batch_size": batch_size, "train_drop_last": True,
                         "num_workers": d.num_workers, "torch_threads": torch.get_num_threads(), "freq": d.freq,
                         "commit": _official_commit(official_dir)}}


def _official_commit(official_dir: pathlib.Path) -> str | None:
    marker = official_dir / "COMMIT"
    return marker.read_text().strip() if marker.exists() else None


def _official_whole_run(pl, torch, script, model, dataset_args, train_loader, epochs: int, batch_size: int,
                        official_dir: pathlib.Path) -> dict:
    from src.dataset.data_factory import data_provider
    _, val_loader = data_provider(dataset_args, "val")
    _, test_loader = data_provider(dataset_args, "test")
    with tempfile.TemporaryDirectory() as root:  # Lightning's checkpoint of the best epoch, as the script keeps
        trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, default_root_dir=root,
                             enable_progress_bar=False, enable_model_summary=False, deterministic=True,
                             callbacks=[script.EpochTestCallback(test_loader)])
        trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader)
        test = trainer.test(model, dataloaders=test_loader, verbose=False)
    return {"epochs_run": trainer.current_epoch, "test": test[0] if test else None,
            "params": sum(p.numel() for p in model.parameters()),
            "version": f"torch {torch.__version__}, pytorch-lightning {pl.__version__}",
            "settings": {"batch_size": batch_size, "num_workers": dataset_args.num_workers,
                         "torch_threads": torch.get_num_threads(), "commit": _official_commit(official_dir)}}


def measure_whole_run(arm: str, dataset: str, batch_size: int, epochs: int, official_dir: pathlib.Path,
                      workdir: pathlib.Path, cache: pathlib.Path) -> dict:
    """One whole run in its own process, timed from launch to exit. Arms: official, ours_cold (compile cache
    off), ours_warm (the cache in `cache`, filled beforehand)."""
    preset = PRESETS[dataset] + ("" if batch_size == 16 else f"_b{batch_size}")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        if arm == "official":
            command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", "official", "--whole-run",
                       "--dataset", dataset, "--batch-size", str(batch_size), "--epochs", str(epochs), "--official-dir",
                       str(official_dir), "--out", out.name]
            env = dict(os.environ)
        else:
            command = [sys.executable, "-m", "core.cli", "run", "phaseformer", "--preset", preset, "--set",
                       f"epochs={epochs}", "--workdir", str(workdir)]
            env = {**os.environ, "ICLR26_COMPILE_CACHE": "off" if arm == "ours_cold" else str(cache)}
        before = uptime()
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        process = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{arm} {dataset} b{batch_size}: failed:\n{done.stderr[-3000:]}")
        if arm == "official":
            result = json.loads(pathlib.Path(out.name).read_text())
        else:
            metrics = json.loads((workdir / "metrics.json").read_text())
            result = {"epochs_run": metrics.get("epochs_run"), "test": {"test_mse": metrics.get("mse"),
                                                                       "test_mae": metrics.get("mae")},
                      "params": metrics.get("params"), "compile_seconds": metrics.get("compile_seconds"),
                      "cache_hits": metrics.get("compile_cache_hits", 0), "preset": preset}
    return {"arm": arm, "dataset": dataset, "horizon": 96, "batch_size": batch_size, "epochs": epochs, **result,
            "process_seconds": round(process, 2), "uptime_before": before, "uptime_after": uptime()}


def make_whole_run_claims(record: dict) -> list[dict]:
    rows = record["rows"]
    claims = []
    for dataset, batch in dict.fromkeys((r["dataset"], r["batch_size"]) for r in rows):
        sel = [r for r in rows if r["dataset"] == dataset and r["batch_size"] == batch]
        pairs = sorted({r["pair"] for r in sel})
        by = {(r["pair"], r["arm"]): r for r in sel}
        epochs = sel[0]["epochs"]
        for arm, which in (("ours_warm", "a second run (warm compile cache)"),
                           ("ours_cold", "a first run (compile cache off)")):
            claims.append(speedup_claim(
                f"whole_run_{arm}_faster_{dataset}_96_b{batch}",
                f"{which}: a whole {epochs}-epoch {dataset}-96 run at batch {batch} through `iclr26 run` (launch to "
                "exit: imports, data, compile, training with validation and per-epoch test, final test, checkpoints, "
                "plots) takes at most the official script's whole run",
                [by[p, "official"]["process_seconds"] / by[p, arm]["process_seconds"] for p in pairs], goal=1.0,
                label=f"official / {arm} process time"))
        same = all(by[p, a]["epochs_run"] == epochs and by[p, a]["params"] == by[p, "official"]["params"]
                   for p in pairs for a in ("official", "ours_cold", "ours_warm"))
        claims.append(check(
            f"whole_run_same_work_{dataset}_96_b{batch}", f"every arm trained {epochs} epochs of a model of the same "
            f"parameter count ({dataset}-96, batch {batch})", same,
            "; ".join(f"pair {p}: epochs " + "/".join(str(by[p, a]["epochs_run"]) for a in
                                                    ("official", "ours_cold", "ours_warm"))
                      + f", params {by[p, 'official']['params']} vs {by[p, 'ours_warm']['params']}" for p in pairs)))
        claims.append(check(
            f"whole_run_warm_hits_cache_{dataset}_96_b{batch}", "every warm run of ours loaded executables from the "
            "cache and every cold one none", all(by[p, "ours_warm"]["cache_hits"] > 0 and
                                                   by[p, "ours_cold"]["cache_hits"] == 0 for p in pairs),
            "; ".join(f"pair {p}: hits warm {by[p, 'ours_warm']['cache_hits']}, cold {by[p, 'ours_cold']['cache_hits']}"
                      for p in pairs)))
    return claims


def run_whole(args: argparse.Namespace) -> None:
    t0 = time.time()
    before = uptime()
    rows = []
    arms = ("official", "ours_cold", "ours_warm")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        cache = tmp / "cache"
        for dataset in args.datasets:
            for batch in args.batch_sizes:
                fill = tmp / f"fill-{dataset}-{batch}"  # one unmeasured run fills the cache
                measure_whole_run("ours_warm", dataset, batch, args.epochs, args.official_dir, fill, cache)
                for pair in range(args.pairs):
                    order = arms[pair % 3:] + arms[:pair % 3]  # each arm first once in three pairs
                    for arm in order:
                        row = {"pair": pair, **measure_whole_run(arm, dataset, batch, args.epochs, args.official_dir,
                                                                 tmp / f"{arm}-{dataset}-{batch}-{pair}", cache)}
                        print(json.dumps(row), flush=True)
                        rows.append(row)
                    scale = {"datasets": args.datasets, "batch_sizes": args.batch_sizes, "pairs": args.pairs,
                             "epochs": args.epochs, "horizon": 96, "seq_len": 720, "uptime_before": before,
                             "uptime_after": uptime(),
                             "peer": next((r["version"] for r in rows if r["arm"] == "official"), None),
                             "peer_commit": _official_commit(args.official_dir),
                             "timed": "each run its own process, launch to exit; official: Lightning fit with "
                                      "validation and the script's EpochTestCallback, then test; ours: iclr26 run "
                                      "with the compile cache off (cold) or filled by one unmeasured run (warm)"}
                    write_results(WHOLE_RUN_NAME, rows=rows, claims=make_whole_run_claims({"rows": rows}),
                                  wall_seconds=time.time() - t0, scale=scale)


def measure(arm: str, dataset: str, batch_size: int, steps: int, official_dir: pathlib.Path) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", arm, "--dataset", dataset,
                   "--batch-size", str(batch_size), "--steps", str(steps), "--official-dir", str(official_dir),
                   "--out", out.name]
        before = uptime()
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        process = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{arm} {dataset}: worker failed:\n{done.stderr[-3000:]}")
        result = json.loads(pathlib.Path(out.name).read_text())
    return {"arm": arm, "dataset": dataset, "horizon": 96, "batch_size": batch_size, **result,
            "process_seconds": round(process, 2), "uptime_before": before, "uptime_after": uptime()}


def make_claims(record: dict) -> list[dict]:
    rows = record["rows"]
    claims = []
    for dataset, batch in dict.fromkeys((r["dataset"], r["batch_size"]) for r in rows):
        pairs = sorted({r["pair"] for r in rows if r["dataset"] == dataset and r["batch_size"] == batch})
        by = {(r["pair"], r["arm"]): r for r in rows if r["dataset"] == dataset and r["batch_size"] == batch}
        ratios = [by[p, "official"]["epoch_seconds"] / by[p, "ours"]["epoch_seconds"] for p in pairs]
        claims.append(speedup_claim(
            f"ours_3x_faster_{dataset}_96_b{batch}", f"on {dataset}-96 at batch {batch}, one training epoch of ours "
            f"takes at most 1/3 of the official Lightning code's on this CPU", ratios, goal=GOAL,
            label="official / ours epoch time"))
        same = all(by[p, "official"]["steps"] == by[p, "ours"]["steps"]
                   and by[p, "official"]["epoch_steps"] == by[p, "ours"]["epoch_steps"]
                   and by[p, "official"]["params"] == by[p, "ours"]["params"] for p in pairs)
        claims.append(check(
            f"same_work_{dataset}_96_b{batch}", f"both arms run the same number of optimizer steps on a model of the "
            f"same parameter count ({dataset}-96, batch {batch})", same,
            "; ".join(f"pair {p}: steps {by[p, 'official']['steps']} vs {by[p, 'ours']['steps']}, params "
                      f"{by[p, 'official']['params']} vs {by[p, 'ours']['params']}" for p in pairs)))
    return claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--official-dir", type=pathlib.Path, default=pathlib.Path("/tmp/pf_official"))
    parser.add_argument("--datasets", nargs="*", choices=list(PRESETS),
                        help="default: ETTh1 and ETTm1; with --whole-run, ETTh1 (the batch-256 presets are ETTh's)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100, help="timed training steps per measurement (0: a whole "
                        "epoch); the epoch time is seconds per step x the epoch's steps")
    parser.add_argument("--append", action="store_true", help="keep the stored rows of other (dataset, batch) "
                        "combinations and add these")
    parser.add_argument("--whole-run", action="store_true", help="time whole CLI runs against the official script's "
                        "(see the docstring)")
    parser.add_argument("--epochs", type=int, default=2, help="with --whole-run: training epochs per run")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 256], help="with --whole-run")
    parser.add_argument("--claims-from-rows", action="store_true")
    parser.add_argument("--worker", choices=("ours", "official"), help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.datasets is None:
        args.datasets = ["ETTh1"] if args.whole_run else ["ETTh1", "ETTm1"]
    if args.worker:
        result = (worker_ours(args.dataset, args.batch_size, args.steps) if args.worker == "ours"
                  else worker_official(args.dataset, args.batch_size, args.steps, args.official_dir,
                                       epochs=args.epochs if args.whole_run else 0))
        pathlib.Path(args.out).write_text(json.dumps(result))
        return
    if args.claims_from_rows:
        recompute_claims(RESULTS_DIR / f"{WHOLE_RUN_NAME if args.whole_run else NAME}.json",
                         make_whole_run_claims if args.whole_run else make_claims)
        return
    if not (args.official_dir / "src" / "models" / "PhaseFormer.py").exists():
        sys.exit(f"{args.official_dir}: no official PhaseFormer code there; unpack neumyor/PhaseFormer first "
                 "(see this script's docstring)")
    if args.whole_run:
        run_whole(args)
        return
    t0 = time.time()
    before = uptime()
    rows, kept, earlier = [], [], None
    if args.append and (RESULTS_DIR / f"{NAME}.json").exists():
        earlier = json.loads((RESULTS_DIR / f"{NAME}.json").read_text())
        kept = [r for r in earlier["rows"]
                if not (r["dataset"] in args.datasets and r["batch_size"] == args.batch_size)]
    for dataset in args.datasets:
        for pair in range(args.pairs):
            for arm in (("official", "ours") if pair % 2 == 0 else ("ours", "official")):
                row = {"pair": pair, **measure(arm, dataset, args.batch_size, args.steps, args.official_dir)}
                print(json.dumps(row), flush=True)
                rows.append(row)
            # written after every pair, so a run stopped early leaves the pairs it finished
            scale = {"datasets": args.datasets, "batch_size": args.batch_size, "pairs": args.pairs,
                     "steps": args.steps, "horizon": 96, "seq_len": 720, "uptime_before": before,
                     "uptime_after": uptime(), "pairs_done": len(rows) // 2,
                     "peer": next((r["version"] for r in rows if r["arm"] == "official"), None),
                     "peer_commit": _official_commit(args.official_dir),
                     "timed": "the first `steps` training steps of an epoch (no validation; official: first batch "
                              "start to last batch end, loader start-up excluded; ours: one jitted call after a "
                              "warm-up call), scaled to the epoch's steps; each measurement its own process"}
            if kept:
                scale["earlier"] = {"command": earlier["command"], "git_commit": earlier["git_commit"],
                                    "wall_seconds": earlier["wall_seconds"], "scale": earlier["scale"],
                                    "rows": len(kept)}
            record = {"rows": kept + rows, "scale": scale}
            write_results(NAME, rows=kept + rows, claims=make_claims(record), wall_seconds=time.time() - t0,
                          scale=scale)


if __name__ == "__main__":
    main()
