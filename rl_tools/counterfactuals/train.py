"""run(config, workdir): generate the splits, train a small `core.lm` decoder on forward execution and
interventional items of the if_else training templates, evaluate every split's variants, write plots.

The model never sees a counterfactual item: the measured gap is that of a model that can execute programs
(when r is given) but was never taught abduction, the setting of the paper's interventional-vs-counterfactual
comparison.
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
from rl_tools.counterfactuals import baselines, data, generate, harness
from rl_tools.counterfactuals.configs import CFConfig

EVAL_SPLITS = ("if_else", "if_else_long", "while", "multi_r", "math")
TRAIN_VARIANTS = ("factual", "interventional")
EVAL_VARIANTS = ("factual", "interventional", "counterfactual")


def make_splits(config: CFConfig):
    sizes = {"if_else_train": config.n_train, **{s: config.n_eval for s in EVAL_SPLITS}}
    return generate.generate_all(sizes, seed=config.seed, levels=range(1, config.max_level + 1))


def make_optimizer(config: CFConfig) -> optax.GradientTransformation:
    warmup = min(config.warmup, config.steps // 2)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, warmup, config.steps, config.lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98,
                                                                   weight_decay=config.weight_decay))


def train_model(config: CFConfig, train_items, workdir: pathlib.Path, tok: data.CompactTokenizer):
    exs = data.examples(train_items, TRAIN_VARIANTS, tok, trace=config.trace)
    exs = [e for e in exs if len(e[0]) + len(e[1]) <= config.seq_len + 1]  # the rare over-long example
    rows = data.to_rows(exs, config.seq_len)
    graphdef, params = model_lib.init(config.model, jax.random.key(config.seed))
    tx = make_optimizer(config)
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed + 1))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    loader = data_lib.ArrayLoader(rows, min(config.batch_size, rows["inputs"].shape[0]), seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.steps, workdir=workdir, config=config,
                                   log_every=config.log_every, ckpt_every=config.steps, progress_bar=False)
    return graphdef, state.params, history


def save_params(params, path: pathlib.Path) -> None:
    """The parameter leaves as an .npz (load with `load_params` against a freshly initialised model)."""
    leaves = jax.tree.leaves(jax.device_get(params))
    np.savez(path, *[np.asarray(x) for x in leaves])


def load_params(model_config, path: pathlib.Path, seed: int = 0):
    """(graphdef, params) of `model_config` with the leaves saved by `save_params`."""
    graphdef, params = model_lib.init(model_config, jax.random.key(seed))
    treedef = jax.tree.structure(params)
    with np.load(path) as z:
        leaves = [z[f"arr_{i}"] for i in range(len(z.files))]
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"{path}: {len(leaves)} arrays, expected {treedef.num_leaves} for this model config")
    return graphdef, jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])


def evaluate_model(config: CFConfig, graphdef, params, items, tok, *, max_new_tokens: int | None = None,
                   variants=EVAL_VARIANTS, splits=EVAL_SPLITS) -> dict[str, Any]:
    adapter = harness.LMAdapter(graphdef, params, tok,
                                max_new_tokens=max_new_tokens or (32 if config.trace else 10),
                                batch_size=config.eval_batch, name="cf-small")
    evals = {s: items[s] for s in splits}
    return harness.evaluate(evals, adapter, variants=variants, prompt=data.prompt_text, keep_predictions=True)


def plot_results(rows, path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    splits = list(dict.fromkeys(r["split"] for r in rows))
    table = {(r["split"], r["variant"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.27
    for j, v in enumerate(EVAL_VARIANTS):
        xs = np.arange(len(splits)) + (j - 1) * width
        em = [table[(s, v)]["em"] for s in splits]
        lo = [table[(s, v)]["em"] - table[(s, v)]["em_lo"] for s in splits]
        hi = [table[(s, v)]["em_hi"] - table[(s, v)]["em"] for s in splits]
        ax.bar(xs, em, width, yerr=[lo, hi], capsize=2, label=v)
    ax.set_xticks(np.arange(len(splits)), splits)
    ax.set_ylabel("exact match (95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title("small decoder trained on execution + interventional if_else items")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(config: CFConfig, workdir: pathlib.Path | str) -> dict[str, Any]:
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tok = data.CompactTokenizer()
    items, stats = make_splits(config)
    t_gen = time.time() - t0
    graphdef, params, history = train_model(config, items["if_else_train"], workdir, tok)
    t_train = time.time() - t0 - t_gen
    save_params(params, workdir / "params.npz")
    result = evaluate_model(config, graphdef, params, items, tok)
    rows = result["rows"]
    chance = baselines.chance_rows({s: items[s] for s in EVAL_SPLITS}, EVAL_VARIANTS)
    leak = generate.leakage(items["if_else_train"], items["if_else"])
    (workdir / "eval.json").write_text(json.dumps({"rows": rows, "chance": chance, "leakage": leak,
                                                   "predictions": result["predictions"],
                                                   "stats": {k: v.as_dict() for k, v in stats.items()}},
                                                  indent=2) + "\n")
    plot_results(rows, workdir / "iv_vs_cf.png")
    losses_xy = [(r["step"], r["loss"]) for r in history if "loss" in r]
    if losses_xy:
        plots.line_plot(workdir / "loss.png", {"train loss": tuple(zip(*losses_xy))}, title="counterfactuals",
                        xlabel="step", ylabel="answer cross-entropy", logy=True)
    metrics: dict[str, Any] = {}
    for r in rows:
        metrics[f"{r['split']}/{r['variant']}_em"] = r["em"]
        metrics[f"{r['split']}/{r['variant']}_f1"] = r["f1"]
    gaps = harness.gaps(rows, "em")
    metrics.update({f"{s}/gap_em": g for s, g in gaps.items()})
    metrics.update({f"{c['split']}/{c['variant']}_chance_em": c["best_em"] for c in chance})
    metrics = {"if_else/interventional_em": metrics["if_else/interventional_em"],
               "if_else/counterfactual_em": metrics["if_else/counterfactual_em"],
               "mean_gap_em": float(np.mean(list(gaps.values()))), **metrics,
               "final_loss": losses_xy[-1][1] if losses_xy else float("nan"),
               "generate_seconds": t_gen, "train_seconds": t_train, "wall_seconds": time.time() - t0,
               "params": int(sum(np.size(x) for x in jax.tree.leaves(params)))}
    train_lib.write_metrics(workdir, metrics)
    return metrics
