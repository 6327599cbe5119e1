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
import jax.numpy as jnp
import numpy as np
import optax

from core import data as data_lib
from core import plots
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from rl_tools.counterfactuals import baselines, data, generate, harness
from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals.configs import CFConfig

EVAL_SPLITS = ("if_else", "if_else_long", "while", "multi_r", "math")
TRAIN_VARIANTS = ("factual", "interventional")
EVAL_VARIANTS = ("factual", "interventional", "counterfactual")


EXEC_SEED_OFFSET = 1_000_003  # the execution-training draws of a family use their own random stream


def make_splits(config: CFConfig):
    """The evaluation splits, `if_else_train`, and `<family>_exec` for each of `config.exec_families`: items
    of that family drawn from another seed's stream, keeping only programs absent from its evaluation split
    (so no evaluated program is ever trained on, in any family)."""
    levels = range(1, config.max_level + 1)
    sizes = {"if_else_train": config.n_train, **{s: config.n_eval for s in EVAL_SPLITS}}
    items, stats = generate.generate_all(sizes, seed=config.seed, levels=levels)
    for family in config.exec_families:
        held_out = {P.canonical(it.program) for it in items[family]}
        drawn, stats[f"{family}_exec"] = generate.generate_split(family, config.n_exec, levels=levels,
                                                                 seed=config.seed + EXEC_SEED_OFFSET)
        items[f"{family}_exec"] = [it for it in drawn if P.canonical(it.program) not in held_out]
    return items, stats


def base_training_items(config: CFConfig, items) -> list:
    """What the base learns to execute: the if_else training programs and the `exec_families` draws."""
    return list(items["if_else_train"]) + [it for f in config.exec_families for it in items[f"{f}_exec"]]


FOURIER_PERIODS = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 20, 25, 50, 100, 200, 400)


def fourier_number_init(params, tok: data.CompactTokenizer, scale: float = 0.05):
    """Number words' embedding rows start at cos / sin of 2 pi v / T for periods T (then trainable), the rest
    of each row keeps its random init: addition becomes a rotation and comparisons a projection, which a small
    model learns from far fewer examples than a table of random vectors (Fourier number embeddings, Zhou et
    al. 2025, used here as an initialisation). Returns new params."""
    table = np.array(params["embed_tokens"].get_value())
    pairs = table.shape[1] // 2 - 2  # keep a few random dimensions in every row
    periods = FOURIER_PERIODS[:pairs]
    numbers = [(tok.ids[w], int(w)) for w in tok.words if w.lstrip("-").isdigit()]
    rows = np.array([i for i, _ in numbers])
    angle = 2 * np.pi * np.array([v for _, v in numbers], dtype=np.float64)[:, None] / np.array(periods)[None, :]
    feats = np.stack([np.cos(angle), np.sin(angle)], axis=-1).reshape(len(numbers), 2 * len(periods))
    table[rows, : feats.shape[1]] = scale * feats
    params = jax.tree.map(lambda x: x, params)  # a new outer tree; the embedding leaf is replaced below
    params["embed_tokens"].set_value(jnp.asarray(table, dtype=params["embed_tokens"].get_value().dtype))
    return params



def make_optimizer(config: CFConfig) -> optax.GradientTransformation:
    warmup = min(config.warmup, config.steps // 2)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, warmup, config.steps, config.lr * 0.05)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98,
                                                                   weight_decay=config.weight_decay))


def train_model(config: CFConfig, train_items, workdir: pathlib.Path, tok: data.CompactTokenizer):
    exs = data.examples(train_items, TRAIN_VARIANTS, tok, trace=config.trace, trace_style=config.trace_style)
    exs = [e for e in exs if len(e[0]) + len(e[1]) <= config.seq_len + 1]  # the rare over-long example
    rows = data.to_rows(exs, config.seq_len)
    graphdef, params = model_lib.init(config.model, jax.random.key(config.seed))
    if config.number_init == "fourier":
        params = fourier_number_init(params, tok)
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
    for i, (got, want) in enumerate(zip(leaves, jax.tree.leaves(params))):
        if got.shape != want.shape:  # e.g. a base trained at another width
            raise ValueError(f"{path}: array {i} has shape {got.shape}, expected {want.shape} for this model "
                             f"config (hidden_size={model_config.hidden_size}, "
                             f"num_layers={model_config.num_layers})")
    return graphdef, jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])


def evaluate_model(config: CFConfig, graphdef, params, items, tok, *, max_new_tokens: int | None = None,
                   variants=EVAL_VARIANTS, splits=EVAL_SPLITS) -> dict[str, Any]:
    default_tokens = (32 if config.trace_style == "values" else 192) if config.trace else 10
    adapter = harness.LMAdapter(graphdef, params, tok, max_new_tokens=max_new_tokens or default_tokens,
                                batch_size=config.eval_batch, name="cf-small")
    evals = {s: items[s] for s in splits}
    return harness.evaluate(evals, adapter, variants=variants, prompt=data.prompt_fn(config.trace_style),
                            keep_predictions=True)


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
    graphdef, params, history = train_model(config, base_training_items(config, items), workdir, tok)
    t_train = time.time() - t0 - t_gen
    save_params(params, workdir / "params.npz")
    result = evaluate_model(config, graphdef, params, items, tok)
    rows = result["rows"]
    chance = baselines.chance_rows({s: items[s] for s in EVAL_SPLITS}, EVAL_VARIANTS)
    leak = generate.leakage(items["if_else_train"], items["if_else"])
    leak["exec"] = {f: generate.leakage(items[f"{f}_exec"], items[f]) for f in config.exec_families}
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
