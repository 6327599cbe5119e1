"""run(config, workdir): train the small decoder on the generated suite, then the FV / CV analysis, plots.

Writes metrics.json (ICL accuracy per cell, top heads, vector cosines, steering summary), analysis.json (the
per-head scores and steering rows) and the layer x head heat maps cie.png, rsa_concept.png, rsa_format.png,
plus steering.png and loss.png.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import jax
import numpy as np
import optax

from core import data as data_lib
from core import plots
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from interp.concept_vectors import pipeline
from interp.concept_vectors.configs import CVConfig
from interp.concept_vectors.world import World


def make_optimizer(config: CVConfig) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, min(config.warmup, config.steps), config.steps,
                                                  config.lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98,
                                                                   weight_decay=config.weight_decay))


def train_model(config: CVConfig, workdir: pathlib.Path, *, progress_bar: bool = True):
    """Next-token training on packed rows of the training cells (loss on every answer token)."""
    world = World(config.world)
    num_rows = min(config.steps * config.batch_size, 16384)
    rows = world.training_rows(num_rows, config.seq_len, seed=config.seed)
    graphdef, params = model_lib.init(config.model, jax.random.key(config.seed))
    tx = make_optimizer(config)
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed + 1))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    loader = data_lib.ArrayLoader(rows, config.batch_size, seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.steps, workdir=workdir, config=config,
                                   log_every=config.log_every, ckpt_every=config.steps, progress_bar=progress_bar)
    return graphdef, state.params, history


def heatmap(path: pathlib.Path, values: np.ndarray, title: str, marks=()) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * values.shape[1], 0.8 + 0.45 * values.shape[0]))
    im = ax.imshow(values, cmap="viridis", aspect="auto")
    for layer, head in marks:
        ax.add_patch(plt.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def steering_plot(path: pathlib.Path, rows, config: CVConfig) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    extracts = list(dict.fromkeys(r["extract"] for r in rows))
    fig, axes = plt.subplots(1, len(config.steer_weights), figsize=(4 * len(config.steer_weights), 3.2),
                             sharey=True)
    for ax, w in zip(np.atleast_1d(axes), config.steer_weights):
        for m, style in (("FV", "-"), ("CV", "--"), ("random", ":")):
            for j, e in enumerate(extracts):
                ys = [np.mean([r["delta_p"] for r in rows if r["setting"] == "zero_shot" and r["method"] == m
                               and r["extract"] == e and r["weight"] == w and r["layer"] == li])
                      for li in range(config.model.num_layers)]
                ax.plot(range(config.model.num_layers), ys, style, color=f"C{j}", label=f"{m} {e}")
        ax.set_title(f"zero-shot OE-L1, w = {w:g}", fontsize=9)
        ax.set_xlabel("layer")
    np.atleast_1d(axes)[0].set_ylabel("delta p(correct first token)")
    np.atleast_1d(axes)[-1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_metrics(result: dict[str, Any]) -> dict[str, Any]:
    scores, heads = result["scores"], result["heads"]
    acc = scores["accuracy"]
    metrics: dict[str, Any] = {f"icl_acc/{k}": v for k, v in acc.items()}
    metrics["corrupted_acc"] = scores["corrupted_accuracy"]
    for m in pipeline.METHODS:
        cos = [r for r in result["cosines"] if r["method"] == m]
        metrics[f"{m}/cos_OE_MC"] = float(np.mean([r["cos_OE_MC"] for r in cos]))
        metrics[f"{m}/cos_L1_L2"] = float(np.mean([r["cos_L1_L2"] for r in cos]))
        metrics[f"{m}/heads"] = [f"L{l}H{h}" for l, h in heads[m]]
        metrics[f"{m}/steer_layer"] = result["steering"]["choice"][m]["layer"]
        metrics[f"{m}/steer_weight"] = result["steering"]["choice"][m]["weight"]
        for k, v in result["steering"]["means"][m].items():
            metrics[f"{m}/steer_{k}"] = v
    from interp.concept_vectors.heads import jaccard
    metrics["jaccard_FV_CV"] = jaccard(heads["FV"], heads["CV"])
    return metrics


def run(config: CVConfig, workdir: pathlib.Path | str) -> dict[str, Any]:
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    graphdef, params, history = train_model(config, workdir)
    t_train = time.time() - t0
    result = pipeline.analyse(config, graphdef, params)
    scores = result["scores"]
    heatmap(workdir / "cie.png", scores["cie"], "CIE (mean over datasets); red: FV heads", result["heads"]["FV"])
    heatmap(workdir / "rsa_concept.png", scores["rsa"]["concept"], "RSA rho, same-concept design; red: CV heads",
            result["heads"]["CV"])
    heatmap(workdir / "rsa_format.png", scores["rsa"]["format"], "RSA rho, same-format design")
    steering_plot(workdir / "steering.png", result["steer_rows"], config)
    losses_xy = [(r["step"], r["loss"]) for r in history if "loss" in r]
    if losses_xy:
        plots.line_plot(workdir / "loss.png", {"train loss": tuple(zip(*losses_xy))}, title="concept_vectors",
                        xlabel="step", ylabel="answer cross-entropy", logy=True)
    (workdir / "analysis.json").write_text(json.dumps({
        "cie": scores["cie"].tolist(), "rsa": {k: v.tolist() for k, v in scores["rsa"].items()},
        "heads": result["heads"], "cosines": result["cosines"], "steering": result["steering"],
        "steer_rows": result["steer_rows"]}, indent=1) + "\n")
    metrics = summary_metrics(result)
    metrics.update({"final_loss": losses_xy[-1][1] if losses_xy else float("nan"), "train_seconds": t_train,
                    "wall_seconds": time.time() - t0,
                    "params": int(sum(np.size(x) for x in jax.tree.leaves(params)))})
    train_lib.write_metrics(workdir, metrics)
    return metrics
