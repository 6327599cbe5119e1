"""Issue #10's ETTh2-96 baseline check: why SparseTSF and DLinear do better there than their published MSE.

    .venv/bin/python benchmarks/phaseformer_baseline_check.py

Trains both baselines on ETTh2-96 (lookback 720, 3 seeds) on the project's pipeline and scores every test window;
then the same models scored the way the Informer-era loaders did by mistake (`drop_last=True` on the test set,
which drops the last partial batch) at batch 32, 128 and 256; SparseTSF at lr 0.02 (its lr on the other
datasets) beside the released ETTh2 lr 0.03 that the preset uses; and both trained without the last partial
training batch (`drop_last=True` on the training loader, as in the SparseTSF and Time-Series-Library code). Writes
benchmarks/results/phaseformer_baseline_check.json; the phaseformer README renders it.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from core.results import claim, write_results  # noqa: E402
from forecasting import data as data_lib  # noqa: E402
from forecasting.phaseformer import configs, train  # noqa: E402
from phaseformer_ett import PAPER  # noqa: E402

DROP_LAST_BATCHES = (32, 128, 256)


def window_mse(result: train.TrainResult, config: configs.Config, chunk: int = 256) -> np.ndarray:
    """MSE of every test window (scaled values), in window order."""
    apply = jax.jit(train.make_apply(result.graphdef))
    test, n = jnp.asarray(result.data.test), result.data.num_windows("test")
    out = []
    for s in range(0, n, chunk):
        x, y = data_lib.windows(test, jnp.arange(s, min(n, s + chunk)), config.seq_len, config.pred_len)
        out.append(np.asarray(jnp.mean((apply(result.params, x) - y) ** 2, axis=(1, 2))))
    return np.concatenate(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="2021,2022,2023")
    args = ap.parse_args(argv)
    t0 = time.time()
    seeds = [int(s) for s in args.seeds.split(",")]
    data = data_lib.load("ETTh2", 720, 96)
    variants = {("sparsetsf", "preset"): configs.sparsetsf("ETTh2", 96),
                ("sparsetsf", "lr 0.02"): configs.sparsetsf("ETTh2", 96, lr=0.02),
                ("dlinear", "preset"): configs.dlinear("ETTh2", 96),
                ("sparsetsf", "train drop_last"): configs.sparsetsf("ETTh2", 96, train_drop_last=True),
                ("dlinear", "train drop_last"): configs.dlinear("ETTh2", 96, train_drop_last=True)}
    rows = []
    for (model, variant), base in variants.items():
        for seed in seeds:
            config = dataclasses.replace(base, seed=seed)
            result = train.train(config, data=data, show_progress=False)
            err = window_mse(result, config)
            n = len(err)
            row = {"model": model, "variant": variant, "lr": config.lr, "seed": seed, "mse": result.metrics["mse"],
                   "mae": result.metrics["mae"], "test_windows": n, "published_mse": PAPER[model][("ETTh2", 96)][0],
                   **{f"mse_drop_last_{b}": float(err[: n // b * b].mean()) for b in DROP_LAST_BATCHES}}
            # the per-window scores reproduce the pipeline's own test MSE (a check on this script)
            if abs(float(err.mean()) - row["mse"]) > 1e-4 * row["mse"]:
                raise AssertionError(f"{model} seed {seed}: window mean {err.mean():.6f} vs test MSE {row['mse']:.6f}")
            rows.append(row)
            print(f"{model} {variant} seed {seed}: mse {row['mse']:.4f}", flush=True)

    def mean(model, variant, key="mse"):
        return float(np.mean([r[key] for r in rows if r["model"] == model and r["variant"] == variant]))

    def rel(model, variant, key="mse"):
        return mean(model, variant, key) / PAPER[model][("ETTh2", 96)][0] - 1

    models = ("sparsetsf", "dlinear")
    drop = {m: {b: rel(m, "preset", f"mse_drop_last_{b}") for b in DROP_LAST_BATCHES} for m in models}
    claims = [
        claim("better_than_published",
              "On ETTh2-96 both baselines' seed-mean test MSE is below (better than) their published MSE",
              all(rel(m, "preset") < 0 for m in models),
              "; ".join(f"{m} {mean(m, 'preset'):.4f} vs {PAPER[m][('ETTh2', 96)][0]} ({rel(m, 'preset'):+.1%})"
                        for m in models)),
        claim("drop_last_explains_gap",
              "Scoring without the last partial test batch (drop_last=True at batch 32, 128 or 256) brings both "
              "baselines within 2 % of their published ETTh2-96 MSE",
              all(min(abs(v) for v in drop[m].values()) <= 0.02 for m in models),
              "; ".join(f"{m}: " + ", ".join(f"batch {b} {v:+.1%}" for b, v in drop[m].items()) for m in models)),
        claim("sparsetsf_lr_explains_gap",
              "SparseTSF at lr 0.02 (its lr on the other datasets) instead of the released ETTh2 lr 0.03 is within "
              "2 % of its published ETTh2-96 MSE",
              abs(rel("sparsetsf", "lr 0.02")) <= 0.02,
              f"lr 0.02: {mean('sparsetsf', 'lr 0.02'):.4f} ({rel('sparsetsf', 'lr 0.02'):+.1%}); lr 0.03: "
              f"{mean('sparsetsf', 'preset'):.4f} ({rel('sparsetsf', 'preset'):+.1%})"),
        claim("train_drop_last_explains_gap",
              "Both baselines trained without the last partial training batch (the original loaders' drop_last=True) "
              "are within 2 % of their published ETTh2-96 MSE",
              all(abs(rel(m, "train drop_last")) <= 0.02 for m in models),
              "; ".join(f"{m}: {mean(m, 'train drop_last'):.4f} ({rel(m, 'train drop_last'):+.1%}; keeping it "
                        f"{rel(m, 'preset'):+.1%})" for m in models)),
    ]
    path = write_results("phaseformer_baseline_check", rows=rows, claims=claims, wall_seconds=time.time() - t0,
                         scale={"dataset": "ETTh2", "seq_len": 720, "pred_len": 96, "seeds": seeds})
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
