"""Training and evaluation: a pure jitted step, whole epochs as one `lax.scan`, runs (variants x seeds) vmapped.

`train_and_evaluate(config, workdir)` trains every requested ablation variant for `train.seeds` seeds at
once (one compiled program; the loss-term switches are traced arrays), evaluates validation and test sets
after each epoch, selects each run's epoch by validation loss only (with early stopping after `patience`
epochs without improvement), and writes metrics.json and plots into the workdir.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.checkpoint import Checkpointer
from core.config import BadInputError
from core.plots import bar_plot, line_plot
from core.train import TrainState, check_finite, write_metrics

from . import losses as L
from .bert import load_text_encoder
from .configs import VARIANTS, Config, DataConfig
from .data import LENGTH_KEYS, MODALITIES, prepare
from .metrics import classification_metrics, regression_metrics
from .model import DecAlign

TERMS = ("dec", "hetero", "homo", "ct")


def input_dims(data: dict) -> tuple[int, int, int]:
    return tuple(int(data["train"][m].shape[-1]) for m in MODALITIES)


def make_model(config: Config, dims: tuple[int, int, int]):
    """(graphdef, init_params(key) -> params): the graph is split once, parameters are a plain pytree."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: DecAlign(config.model, dims, rngs=nnx.Rngs(0))), nnx.Param)

    def init_params(key: jax.Array) -> nnx.State:
        return nnx.split(DecAlign(config.model, dims, rngs=nnx.Rngs(params=key)), nnx.Param)[1]

    return graphdef, init_params


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Gradient clipping then AdamW (decoupled decay) or, with `train.optimizer="adam_l2"`, torch's Adam with L2
    weight decay (decay * params added to the clipped gradient before the moments, as the official trainer's
    `optim.Adam(weight_decay=...)` after `clip_grad_norm_`). With `train.scheduler="plateau"` the update is
    scaled by a per-run factor held in the optimizer state (`set_lr_scale`), lowered by `plateau_update`."""
    t = config.train
    if t.optimizer == "adam_l2":
        base = [optax.add_decayed_weights(t.weight_decay), optax.adam(t.lr)]
    else:
        base = [optax.adamw(t.lr, weight_decay=t.weight_decay)]
    tail = [optax.inject_hyperparams(optax.scale)(step_size=1.0)] if t.scheduler == "plateau" else []
    return optax.chain(optax.clip_by_global_norm(t.clip), *base, *tail)


def lr_scale(opt_state) -> jax.Array:
    """The plateau scheduler's learning-rate factor(s) in an optimizer state made by `make_optimizer`."""
    return opt_state[-1].hyperparams["step_size"]


def set_lr_scale(opt_state, scale):
    """Replace the plateau scheduler's learning-rate factor(s) (one per vmapped run)."""
    last = opt_state[-1]
    hp = dict(last.hyperparams)
    hp["step_size"] = jnp.asarray(scale, jnp.asarray(hp["step_size"]).dtype).reshape(jnp.shape(hp["step_size"]))
    return (*opt_state[:-1], last._replace(hyperparams=hp))


def plateau_update(state: dict, val_loss: float, *, patience: int, factor: float, threshold: float = 1e-4) -> dict:
    """One epoch of torch's ReduceLROnPlateau(mode="min", threshold_mode="rel", cooldown=0) on a host dict
    {"best", "bad", "scale"}: a loss below best * (1 - threshold) resets the count, otherwise the count grows, and
    once it exceeds `patience` the scale is multiplied by `factor` and the count restarts."""
    best, bad, scale = state["best"], state["bad"], state["scale"]
    if val_loss < best * (1.0 - threshold):
        best, bad = val_loss, 0
    else:
        bad += 1
    if bad > patience:
        scale, bad = scale * factor, 0
    return {"best": best, "bad": bad, "scale": scale}


def constant_loss(train_labels: np.ndarray, eval_labels: np.ndarray, task: str) -> float:
    """The task loss on `eval_labels` of the best constant fitted on the training labels (mean for MSE, median for
    L1, class frequencies for CE): the level a run must beat to have learned anything."""
    if task == "ce":
        freq = np.bincount(train_labels, minlength=int(max(train_labels.max(), eval_labels.max())) + 1) + 1.0
        logp = np.log(freq / freq.sum())
        return float(-np.mean(logp[eval_labels]))
    c = np.mean(train_labels) if task == "mse" else np.median(train_labels)
    err = eval_labels - c
    return float(np.mean(err**2) if task == "mse" else np.mean(np.abs(err)))


def flag_failures(val_loss: np.ndarray, constant: float, factor: float, patience: int) -> list[dict]:
    """Per run (columns of val_loss (epochs, runs)): {"failed", "failure"}. A run failed when its validation loss
    was ever non-finite, its best never beat the constant predictor (`constant_loss`), or, before it early-stopped,
    the loss climbed above `factor` x its best after reaching it (diverged)."""
    val_loss = np.asarray(val_loss, float)
    out = []
    for i in range(val_loss.shape[1]):
        v = val_loss[:, i]
        if not np.isfinite(v).all():
            out.append({"failed": True,
                        "failure": f"non-finite validation loss at epoch {int(np.argmin(np.isfinite(v))) + 1}"})
            continue
        best_epoch = int(np.argmin(v))
        best = float(v[best_epoch])
        active = v[best_epoch + 1: best_epoch + 1 + patience]  # the epochs it ran before early stopping
        if best >= constant:
            out.append({"failed": True, "failure": f"best validation loss {best:.4g} never below the constant "
                        f"predictor's {constant:.4g}"})
        elif active.size and active.max() > factor * best:
            out.append({"failed": True, "failure": f"validation loss diverged to {active.max():.4g} after its best "
                        f"{best:.4g} (epoch {best_epoch + 1}; threshold {factor:g}x)"})
        else:
            out.append({"failed": False, "failure": ""})
    return out


def task_loss(out: jax.Array, labels: jax.Array, task: str) -> jax.Array:
    """Per-example task loss: out (B, C), labels (B,)."""
    if task == "ce":
        return optax.softmax_cross_entropy_with_integer_labels(out, labels)
    err = out[:, 0] - labels
    return err**2 if task == "mse" else jnp.abs(err)


def batch_lengths(batch: dict) -> jax.Array | None:
    """(3, B) valid lengths from a batch's text/audio/vision_lengths, or None when the batch has none (aligned)."""
    if not all(k in batch for k in LENGTH_KEYS):
        return None
    return jnp.stack([batch[k] for k in LENGTH_KEYS])


def is_unaligned(data: dict) -> bool:
    """Whether any clip of any split is shorter than its padded length (then the model gets masks; aligned data
    runs exactly the unmasked program)."""
    return any(k in data[s] and np.any(data[s][k] < data[s][m].shape[1])
               for s in ("train", "valid", "test") for m, k in zip(MODALITIES, LENGTH_KEYS))


def make_loss_fn(config: Config, graphdef):
    """loss_fn(params, batch, key, switches) -> (loss, metrics); switches (4,) turns dec/hetero/homo/ct on or off."""
    lc = config.loss

    def loss_fn(params, batch, key, switches):
        model = nnx.merge(graphdef, params)
        o = model(batch["text"], batch["audio"], batch["vision"], key, lengths=batch_lengths(batch))
        task = jnp.mean(task_loss(o["out"], batch["labels"], lc.task))
        dec = L.decoupling_loss(o["s"], o["c"])  # padded positions of s and c are zero: they add nothing
        het, het_info = L.heterogeneity_loss(o["s_pooled"], num_prototypes=lc.num_prototypes,
                                             em_iters=lc.em_iters, var_floor=lc.var_floor,
                                             epsilon=lc.ot_epsilon, ot_iters=lc.ot_iters)
        hom, hom_info = L.homogeneity_loss(o["z"], lc.mmd_bandwidth, lc.moment_pairs)
        classes = batch["labels"] if lc.task == "ce" else L.sentiment_classes(batch["labels"])
        ct = L.supcon_loss(o["rep"], classes, lc.temperature)
        weights = jnp.array([lc.dec, lc.hetero, lc.homo, lc.ct]) * switches
        total = task + jnp.dot(weights, jnp.stack([dec, het, hom, ct]))
        metrics = {"loss": total, "task": task, "dec": dec, "hetero": het, "homo": hom, "ct": ct,
                   **{f"hetero_{k}": v for k, v in het_info.items()}, **{f"homo_{k}": v for k, v in hom_info.items()}}
        return total, metrics

    return loss_fn


def make_train_step(config: Config, graphdef, tx):
    """step(state, batch, switches) -> (state, metrics); pure, for jit/vmap/scan and sharded batches."""
    grad_fn = jax.value_and_grad(make_loss_fn(config, graphdef), has_aux=True)

    def step(state: TrainState, batch: dict, switches: jax.Array):
        key = jax.random.fold_in(state.key, state.step)
        (_, metrics), grads = grad_fn(state.params, batch, key, switches)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return TrainState(params, opt_state, state.step + 1, state.key), metrics

    return step


def compiler_options(config: Config) -> dict:
    return {"xla_backend_optimization_level": 0} if config.train.fast_compile else {}


def make_epoch_fn(step, options: dict | None = None):
    """epoch(states, data, perms, switches): vmap over runs of a scan over one epoch's batches."""

    def one_run(state, data, perm, switches):
        def body(state, idx):
            return step(state, {k: v[idx] for k, v in data.items()}, switches)
        state, metrics = jax.lax.scan(body, state, perm)
        return state, jax.tree.map(jnp.mean, metrics)

    return jax.jit(jax.vmap(one_run, in_axes=(0, None, 0, 0)), donate_argnums=0, compiler_options=options)


def make_predict_fn(graphdef, chunk: int = 256, options: dict | None = None):
    """predict(params (runs stacked), data) -> (runs, N, C) model outputs in evaluation mode."""

    def one_run(params, data):
        model = nnx.merge(graphdef, params)
        n = data["text"].shape[0]
        size = min(chunk, n)
        pad = (-n) % size
        keys = [k for k in (*MODALITIES, *LENGTH_KEYS) if k in data]
        padded = {k: jnp.pad(data[k], [(0, pad)] + [(0, 0)] * (data[k].ndim - 1)) for k in keys}
        chunks = {k: v.reshape(-1, size, *v.shape[1:]) for k, v in padded.items()}
        out = jax.lax.map(lambda b: model(b["text"], b["audio"], b["vision"], None, lengths=batch_lengths(b))["out"],
                          chunks)
        return out.reshape(-1, out.shape[-1])[:n]

    return jax.jit(jax.vmap(one_run, in_axes=(0, None)), compiler_options=options)


def evaluate(out: np.ndarray, labels: np.ndarray, task: str) -> dict[str, float]:
    """Task loss (the model-selection criterion) and the MMSA metrics for one run's outputs (N, C)."""
    loss = float(np.mean(task_loss(jnp.asarray(out), jnp.asarray(labels), task)))
    if task == "ce":
        return {"loss": loss, **classification_metrics(out, labels)}
    return {"loss": loss, **regression_metrics(out[:, 0], labels)}


def run_names(config: Config) -> list[tuple[str, int]]:
    return [(v, s) for v in config.variants for s in range(config.train.seeds)]


def _shape_key(config: Config) -> Config:
    """The config without its data source: runs that differ only in data share compiled programs."""
    return dataclasses.replace(config, data=DataConfig(text_input=config.data.text_input))


@functools.lru_cache(maxsize=4)
def _programs(config: Config, dims: tuple[int, int, int]):
    graphdef, init_params = make_model(config, dims)
    tx = make_optimizer(config)
    epoch_fn = make_epoch_fn(make_train_step(config, graphdef, tx), compiler_options(config))
    predict = make_predict_fn(graphdef, options=compiler_options(config))
    return graphdef, init_params, tx, epoch_fn, predict


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, *, data: dict | None = None,
                       progress: bool = True) -> dict:
    """Train all (variant, seed) runs of `config` together; returns per-run and per-variant results.

    After every epoch the stacked states, the best-epoch bookkeeping and the history are checkpointed under
    `workdir/checkpoints`, so a killed run resumes at its last finished epoch and ends where an uninterrupted
    one ends (each epoch's batch order is a function of (seed, epoch) alone)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data = prepare(config, workdir) if data is None else data
    dims = input_dims(data)
    graphdef, init_params, tx, epoch_fn, predict = _programs(_shape_key(config), dims)
    runs = run_names(config)
    r = len(runs)
    seeds = np.array([config.train.seed + s for _, s in runs])
    switches = jnp.array([[VARIANTS[v][t] for t in TERMS] for v, _ in runs], jnp.float32)
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    # initialisation runs once: always compile it fast
    init_fn = jax.jit(jax.vmap(init_params), compiler_options={"xla_backend_optimization_level": 0})
    params = init_fn(jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys))
    if config.model.text_encoder:  # the pretrained BERT weights, the same in every run (then fine-tuned)
        params = load_text_encoder(params, config.model.text_encoder, runs=r)
    states = TrainState(params, jax.vmap(tx.init)(params), jnp.zeros((r,), jnp.int32),
                        jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
    inputs = [*MODALITIES, *LENGTH_KEYS] if is_unaligned(data) else list(MODALITIES)
    train = {k: jnp.asarray(data["train"][k]) for k in (*inputs, "labels")}
    evals = {s: {k: jnp.asarray(data[s][k]) for k in inputs} for s in ("valid", "test")}
    tc = config.train
    plateau = [{"best": np.inf, "bad": 0, "scale": 1.0} for _ in runs]
    n, bs = train["text"].shape[0], config.train.batch_size
    steps_per_epoch = n // bs
    if steps_per_epoch < 1:
        raise BadInputError(f"train split has {n} examples: expected at least train.batch_size={bs}")
    best = [{"val_loss": np.inf, "epoch": -1, "test": None, "valid": None, "stopped": False} for _ in runs]
    history = {"train_loss": [], "val_loss": [], "test_mae": [], "terms": []}
    checkpointer = Checkpointer(workdir / "checkpoints", keep=1, config=config)
    first_epoch = checkpointer.latest_step() or 0
    if first_epoch:
        states, saved = checkpointer.restore(states)
        best, history = saved["best"], saved["history"]
        plateau = saved.get("plateau", plateau)
    from core.train import MetricsLog
    log = MetricsLog(workdir / "metrics.jsonl", first_epoch, config=config)  # one record per epoch
    step_times = []
    for epoch in range(first_epoch, config.train.epochs):
        perms = np.stack([np.random.default_rng([int(s), epoch]).permutation(n)[: steps_per_epoch * bs]
                          .reshape(steps_per_epoch, bs) for s in seeds])
        t = time.time()
        states, m = epoch_fn(states, train, jnp.asarray(perms), switches)
        m = jax.device_get(m)
        step_times.append((time.time() - t, steps_per_epoch))
        # every loss term of the epoch and the parameter norm, before anything is recorded or checkpointed
        check_finite({k: np.where(np.isfinite(v).all(), 0.0, np.nan) for k, v in m.items()}, states.params,
                     first=epoch + 1, last=epoch + 1, checkpointer=checkpointer, unit="epoch")
        outs = {s: np.asarray(predict(states.params, evals[s])) for s in ("valid", "test")}
        vals = [evaluate(outs["valid"][i], data["valid"]["labels"], config.loss.task) for i in range(r)]
        tests = [evaluate(outs["test"][i], data["test"]["labels"], config.loss.task) for i in range(r)]
        for i in range(r):
            b = best[i]
            if b["stopped"]:
                continue
            if vals[i]["loss"] < b["val_loss"]:
                b.update(val_loss=vals[i]["loss"], epoch=epoch, test=tests[i], valid=vals[i])
            elif epoch - b["epoch"] >= config.train.patience:
                b["stopped"] = True
        history["train_loss"].append(m["loss"].tolist())
        history["val_loss"].append([v["loss"] for v in vals])
        history["test_mae"].append([t_.get("mae", t_.get("wacc")) for t_ in tests])
        history["terms"].append({k: np.asarray(v).tolist() for k, v in m.items()})
        if tc.scheduler == "plateau":
            plateau = [plateau_update(ps, vals[i]["loss"], patience=tc.plateau_patience, factor=tc.plateau_factor)
                       for i, ps in enumerate(plateau)]
            states = states._replace(opt_state=set_lr_scale(states.opt_state, [ps["scale"] for ps in plateau]))
            history.setdefault("lr_scale", []).append([ps["scale"] for ps in plateau])
        record = {"step": epoch + 1, "train_loss": float(np.mean(m["loss"])),
                  "val_loss": float(np.mean(history["val_loss"][-1])),
                  "test_score": float(np.mean(history["test_mae"][-1]))}
        for variant in config.variants:  # each variant's mean over its seeds
            cols = [i for i, (v, _) in enumerate(runs) if v == variant]
            record[f"val_loss/{variant}"] = float(np.mean([vals[i]["loss"] for i in cols]))
        log.write(record)
        checkpointer.save(epoch + 1, states, data_state={"best": best, "history": history, "plateau": plateau})
        if progress:
            print(f"[decalign] epoch {epoch + 1}/{config.train.epochs}  {time.time() - t:.1f}s  "
                  f"val loss {np.mean(history['val_loss'][-1]):.4f}  train loss {np.mean(m['loss']):.4f}", flush=True)
    checkpointer.close()
    log.close()
    # steady-state speed: epochs after the first (which includes compilation); nan if all were restored
    later = step_times[1:] or step_times
    run_steps_per_s = r * sum(s for _, s in later) / sum(t for t, _ in later) if later else float("nan")
    const = constant_loss(data["train"]["labels"], data["valid"]["labels"], config.loss.task)
    flags = flag_failures(np.array(history["val_loss"]), const, tc.diverge_factor, tc.patience)
    per_run = [{"variant": v, "seed": s, "best_epoch": b["epoch"], "val_loss": b["val_loss"], **f, **b["test"]}
               for (v, s), b, f in zip(runs, best, flags)]
    result = {"runs": per_run, "variants": summarize(per_run), "history": history,
              "speed": {"runs_in_parallel": r, "run_steps_per_s": run_steps_per_s, "batch_size": bs,
                        "steps_per_epoch": steps_per_epoch, "epochs_run": len(step_times)},
              "wall_seconds": time.time() - t0, "constant_val_loss": const,
              "input_dims": list(dims)}
    return result


def summarize(per_run: list[dict]) -> dict:
    """Per-variant mean and standard deviation (over seeds) of every test metric."""
    out = {}
    for v in dict.fromkeys(r["variant"] for r in per_run):
        rows = [r for r in per_run if r["variant"] == v]
        keys = [k for k in rows[0] if k not in ("variant", "seed", "failed", "failure")]
        out[v] = {k: {"mean": float(np.mean([r[k] for r in rows])), "std": float(np.std([r[k] for r in rows])),
                      "n": len(rows)} for k in keys}
        out[v]["failed_runs"] = {"mean": float(sum(bool(r.get("failed")) for r in rows)), "std": 0.0, "n": len(rows)}
    return out


def write_plots(result: dict, config: Config, workdir: pathlib.Path) -> list[str]:
    """Validation loss per epoch (mean over seeds) and the selected test metric per variant."""
    runs = run_names(config)
    val = np.array(result["history"]["val_loss"])  # (epochs, runs)
    epochs = np.arange(1, len(val) + 1)
    curves = {v: (epochs, val[:, [i for i, (vv, _) in enumerate(runs) if vv == v]].mean(1)) for v in config.variants}
    paths = [line_plot(workdir / "val_loss.png", curves, title="DecAlign ablation: validation loss (mean over seeds)",
                       xlabel="epoch", ylabel=f"validation {config.loss.task} loss")]
    metric = "mae" if config.loss.task != "ce" else "wacc"
    stats = result["variants"]
    paths.append(bar_plot(workdir / f"test_{metric}.png", {v: stats[v][metric]["mean"] for v in config.variants},
                          {v: stats[v][metric]["std"] for v in config.variants},
                          title=f"test {metric} (epoch selected on validation loss)", ylabel=metric))
    return [str(p) for p in paths]


def run(config: Config, workdir: str | pathlib.Path) -> dict:
    """The registry entry: train, write metrics.json + PNG plots into workdir, return final metrics."""
    from core.config import to_dict

    workdir = pathlib.Path(workdir)
    result = train_and_evaluate(config, workdir)
    plots = write_plots(result, config, workdir)
    metrics = {f"{v}/{k}": s["mean"] for v, vs in result["variants"].items() for k, s in vs.items()}
    metrics["run_steps_per_s"] = result["speed"]["run_steps_per_s"]
    metrics["wall_seconds"] = result["wall_seconds"]
    write_metrics(workdir, metrics)
    (workdir / "results.json").write_text(json.dumps({"config": to_dict(config), **result, "plots": plots},
                                                     indent=1, default=float))
    return metrics
