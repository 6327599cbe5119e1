"""PredNext training and evaluation: a pure jitted step; variants x seeds vmapped into one program.

`train_and_evaluate(config, workdir)` pretrains every requested variant (base, + PredNext, + forced
consistency, ablations) of `config.loss.base` for `train.seeds` seeds at once (the variants' loss switches
are traced arrays, so one compiled program serves them all; runs with the same seed share the initial
weights, the batches and the augmentations: a paired comparison), then evaluates frozen features: linear
probes for the motion and the digit label, temporal consistency and the collapse monitor.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.config import BadInputError
from core.plots import bar_plot, line_plot
from core.train import fit, write_metrics

from . import losses as L
from .configs import VARIANTS, Config, LossConfig
from .data import TASK_LABELS, ClipSampler, make_datasets, make_views, to_float
from .model import PredNextModel

SWITCHES = ("w_pred", "w_forced", "step", "clip", "cross")


class SSLState(NamedTuple):
    """Parameters, BN running statistics, optimiser state, step, key; `target` = (params, stats) EMA for BYOL
    and MoCo (the momentum encoder); `queue` = (keys (K, D), write position) for MoCo."""

    params: Any
    stats: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array
    target: Any = None
    queue: Any = None


def make_model(config: Config):
    """(graphdef, init(key) -> (params, stats)); the graph is split once, the state is plain pytrees."""
    abstract = nnx.eval_shape(lambda: PredNextModel(config.model, rngs=nnx.Rngs(0)))
    graphdef, _, _ = nnx.split(abstract, nnx.Param, nnx.BatchStat)

    def init(key: jax.Array):
        _, params, stats = nnx.split(PredNextModel(config.model, rngs=nnx.Rngs(params=key)), nnx.Param, nnx.BatchStat)
        return params, stats

    return graphdef, init


def make_optimizer(config: Config) -> optax.GradientTransformation:
    t = config.train
    schedule = optax.warmup_cosine_decay_schedule(0.0, t.lr, min(t.warmup, t.steps - 1) if t.steps > 1 else 0,
                                                  max(t.steps, 2))
    return optax.adamw(schedule, weight_decay=t.weight_decay)


def init_state(config: Config, init, tx, key: jax.Array) -> SSLState:
    params, stats = init(jax.random.fold_in(key, 0))
    target = (params, stats) if config.loss.base in ("byol", "moco") else None
    queue = None
    if config.loss.base == "moco":  # MoCo starts from random unit keys
        keys = jax.random.normal(jax.random.fold_in(key, 2), (config.loss.moco_queue, config.model.proj_dim))
        queue = (L.normalize(keys), jnp.zeros((), jnp.int32))
    return SSLState(params, stats, tx.init(params), jnp.zeros((), jnp.int32), jax.random.fold_in(key, 1), target,
                    queue)


def make_loss_fn(config: Config, graphdef):
    """loss_fn(params, stats, target, queue, batch, key, switches) -> (loss, (metrics, new_stats, keys)).

    batch: "clip" (B, T + 2 jitter, H, W[, C]) and "future" (B, T, H, W[, C]) raw frames; views are made here.
    switches (5,): w_pred, w_forced, step, clip, cross (see configs.VARIANTS). keys: MoCo's new keys (2B, D)
    for the queue (None for the other bases).
    """
    lc, dc, ac = config.loss, config.data, config.augment

    def loss_fn(params, stats, target, queue, batch, key, switches):
        w_pred, w_forced, w_step, w_clip, cross = (switches[i] for i in range(5))
        views = make_views(key, batch["clip"], dc.clip_len, dc.jitter, ac)  # (2, B, T, h, w, c)
        # the future clip gets its view's crop and brightness (same keys: "same view" is well defined) but its
        # own noise, so a same-view target shares no noise pixels with the prediction's input
        fviews = make_views(key, batch["future"], dc.clip_len, 0, ac, noise_salt=1)
        b = views.shape[1]
        model = nnx.merge(graphdef, params, stats, copy=True)
        f, z = model.encode_views(views, train=True)  # (T, 2B, C), (T, 2B, D)
        zc = z.mean(0)
        z1, z2 = zc[:b], zc[b:]
        keys = None
        # base objective on the clip features
        if lc.base == "simclr":
            ssl = L.simclr_loss(z1, z2, lc.temperature)
        elif lc.base == "barlowtwins":
            ssl = L.barlow_twins_loss(z1, z2, lc.barlow_lambda)
        elif lc.base == "moco":  # symmetrised: each view queries the other view's key
            tmodel = nnx.merge(graphdef, *jax.lax.stop_gradient(target), copy=True)
            tzc = jax.lax.stop_gradient(tmodel.encode_views(views, train=True)[1].mean(0))
            ssl = 0.5 * (L.moco_loss(z1, tzc[b:], queue[0], lc.temperature)
                         + L.moco_loss(z2, tzc[:b], queue[0], lc.temperature))
            keys = tzc
        else:
            p = model.predictor(zc, train=True)
            if lc.base == "byol":
                tmodel = nnx.merge(graphdef, *jax.lax.stop_gradient(target), copy=True)
                tzc = jax.lax.stop_gradient(tmodel.encode_views(views, train=True)[1].mean(0))
                ssl = L.simsiam_loss(p[:b], p[b:], tzc[:b], tzc[b:])
            else:
                ssl = L.simsiam_loss(p[:b], p[b:], z1, z2)
        # PredNext: step prediction (other view's step t+m) and clip prediction (other view's future clip)
        zs = jnp.concatenate([z[:, b:], z[:, :b]], axis=1)  # the other view, per step
        step_target = cross * zs + (1.0 - cross) * z
        pt = model.step_head(z, train=True)
        step = L.step_prediction_loss(pt, step_target, lc.step_offset)  # mean of both directions
        def future_features(_):
            fmodel = nnx.merge(graphdef, jax.lax.stop_gradient(params), jax.lax.stop_gradient(stats), copy=True)
            _, fz = fmodel.encode_views(fviews, train=True)
            return jax.lax.stop_gradient(fz.mean(0))

        # the future clips are encoded only when the clip prediction is on (a runtime branch, one program)
        fzc = jax.lax.cond(w_pred * w_clip > 0, future_features, lambda _: jnp.zeros_like(zc), None)
        fzs = jnp.concatenate([fzc[b:], fzc[:b]])
        clip_target = cross * fzs + (1.0 - cross) * fzc
        clip = L.clip_prediction_loss(model.clip_head(zc, train=True), clip_target)
        pred = w_step * step + w_clip * clip
        forced = L.forced_consistency_loss(z)
        a = lc.alpha * w_pred
        total = (1.0 - a) * ssl + a * pred + lc.beta * w_forced * forced
        _, _, new_stats = nnx.split(model, nnx.Param, nnx.BatchStat)
        metrics = {"loss": total, "ssl": ssl, "pred": pred, "step_pred": step, "clip_pred": clip,
                   "forced": forced, "z_std": L.feature_std(z1), "spike_rate": jnp.mean(f)}
        return total, (metrics, new_stats, keys)

    return loss_fn


def make_train_step(config: Config, graphdef, tx):
    """step(state, batch, switches) -> (state, metrics); pure: for jit, vmap and sharded batches."""
    grad_fn = jax.value_and_grad(make_loss_fn(config, graphdef), has_aux=True)
    momentum = config.loss.moco_momentum if config.loss.base == "moco" else config.loss.byol_momentum

    def step(state: SSLState, batch: dict, switches: jax.Array):
        key = jax.random.fold_in(state.key, state.step)
        (_, (metrics, stats, keys)), grads = grad_fn(state.params, state.stats, state.target, state.queue, batch,
                                                     key, switches)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        target, queue = state.target, state.queue
        if target is not None:  # EMA of the parameters; the BN running statistics are the online network's
            target = (optax.incremental_update(params, target[0], 1.0 - momentum), stats)
        if queue is not None:
            queue = L.enqueue(*queue, keys)
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads)}
        return SSLState(params, stats, opt_state, state.step + 1, state.key, target, queue), metrics

    return step


def compiler_options(config: Config) -> dict:
    return {"xla_backend_optimization_level": 0} if config.train.fast_compile else {}


def _shape_key(config: Config) -> Config:
    """Fields that change the compiled programs (not the seed, the number of runs or the variants)."""
    data = dataclasses.replace(config.data, task="motion", hold=2)
    train = dataclasses.replace(config.train, seeds=1, seed=0, steps=max(config.train.steps, 2), log_every=1)
    return dataclasses.replace(config, variants=("base",), data=data, train=train)


def eval_key(config: Config) -> Config:
    """`_shape_key` without the loss: evaluation programs (feature extraction, fine-tuning) are the same for
    every base objective."""
    return dataclasses.replace(_shape_key(config), loss=LossConfig())


@functools.lru_cache(maxsize=8)
def programs(config: Config):
    """(graphdef, init_fn, tx, step, extract, calibrate), compiled once per model/loss shape and reused by
    every run: step(state, batch, switches) -> (state, metrics); extract(params, stats, clips) -> (f, z)
    (N, T, .) in eval mode; calibrate(params, stats, clips) -> stats after one train-mode forward pass. Runs are
    executed one after another (vmapping runs turns every conv into a grouped conv, which XLA:CPU runs slower),
    and the variant switches are traced, so all variants share the program."""
    graphdef, init = make_model(config)
    tx = make_optimizer(config)
    options = compiler_options(config)
    step = jax.jit(make_train_step(config, graphdef, tx), donate_argnums=0, compiler_options=options)

    def extract_one(params, stats, clips):
        model = nnx.merge(graphdef, params, stats, copy=True)
        f, z = model.encode(clips, train=False)
        return jnp.swapaxes(f, 0, 1), jnp.swapaxes(z, 0, 1)  # (N, T, .)

    extract = jax.jit(extract_one, compiler_options=options)

    def calibrate_one(params, stats, clips):
        model = nnx.merge(graphdef, params, stats, copy=True)
        model.encode(clips, train=True)
        return nnx.split(model, nnx.Param, nnx.BatchStat)[2]

    calibrate = jax.jit(calibrate_one, compiler_options=options)
    init_fn = jax.jit(lambda key: init_state(config, init, tx, key),  # runs once per run: compile it fast
                      compiler_options={"xla_backend_optimization_level": 0})
    return graphdef, init_fn, tx, step, extract, calibrate


# ---------------------------------------------------------------- evaluation


def linear_probe(train_x: jax.Array, train_y: jax.Array, test_x: jax.Array, test_y: jax.Array, num_classes: int,
                 *, steps: int = 300, lr: float = 0.05, weight_decay: float = 1e-4) -> jax.Array:
    """Test accuracy of a softmax-regression probe on frozen features (standardised with the train split),
    trained full-batch with Adam. train_x (N, D), train_y (N,) int."""
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    xtr, xte = (train_x - mu) / sd, (test_x - mu) / sd
    d = xtr.shape[1]
    w0 = (jnp.zeros((d, num_classes)), jnp.zeros(num_classes))
    opt = optax.adam(lr)

    def loss(w):
        logits = xtr @ w[0] + w[1]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, train_y).mean()
        return ce + weight_decay * jnp.sum(w[0] ** 2)

    def body(carry, _):
        w, s = carry
        g = jax.grad(loss)(w)
        u, s = opt.update(g, s, w)
        return (optax.apply_updates(w, u), s), None

    (w, _), _ = jax.lax.scan(body, (w0, opt.init(w0)), None, length=steps)
    return jnp.mean(jnp.argmax(xte @ w[0] + w[1], -1) == test_y)


def eval_clip_starts(config: Config) -> np.ndarray:
    """Evenly spaced clip starts (at least 2, so the first and last clips are the most disjoint)."""
    n = max(config.train.eval_clips, 2)
    return np.linspace(0, config.data.length - config.data.clip_len, n).round().astype(int)


def extract_features(config: Config, extract, params, stats, videos: np.ndarray, chunk: int = 256):
    """Per-clip features of every video for the eval clip starts: f (N, K, T, C), z (N, K, T, D)."""
    starts = eval_clip_starts(config)
    t = config.data.clip_len
    fs, zs = [], []
    for i in range(0, len(videos), chunk):
        v = videos[i: i + chunk]
        clips = np.stack([v[:, s: s + t] for s in starts], axis=1)  # (n, K, T, H, W)
        n, k = clips.shape[:2]
        x = to_float(jnp.asarray(clips.reshape(n * k, *clips.shape[2:])))
        f, z = extract(params, stats, x)
        fs.append(np.asarray(f).reshape(n, k, *f.shape[1:]))
        zs.append(np.asarray(z).reshape(n, k, *z.shape[1:]))
    return np.concatenate(fs), np.concatenate(zs)


def retrieval_recall(train_x: jax.Array, train_y: jax.Array, test_x: jax.Array, test_y: jax.Array,
                     ks: tuple[int, ...]) -> dict[int, float]:
    """Nearest-neighbour retrieval R@k: the fraction of test clips (queries) whose k most cosine-similar train
    clips (features centred with the train mean) include one of the query's class. train_x (N, D), test_x (M, D)."""
    mu = train_x.mean(0)
    sim = L.normalize(test_x - mu) @ L.normalize(train_x - mu).T  # (M, N)
    order = jnp.argsort(-sim, axis=1)
    hit = train_y[order[:, : max(ks)]] == test_y[:, None]  # (M, k_max)
    return {k: float(jnp.mean(jnp.any(hit[:, :k], axis=1))) for k in ks}


@functools.lru_cache(maxsize=8)
def finetune_programs(config: Config, num_classes: int):
    """(init(params) -> state, step(state, clip, y, key, mu, sd) -> (state, loss)) of supervised fine-tuning:
    the pretrained backbone and a linear head on its time-averaged spike rates, standardised with the fixed
    train-split mean mu and std sd of the pretrained features (spike rates are ~0.04: unscaled, a zero-initialised
    head at lr 1e-3 barely moves in 40 steps and predicts one class), trained end to end with cross-entropy on
    one augmented view per clip (AdamW, cosine decay from `train.finetune_lr`)."""
    graphdef, _ = make_model(config)
    t, dc, ac = config.train, config.data, config.augment
    tx = optax.adamw(optax.cosine_decay_schedule(t.finetune_lr, max(t.finetune_steps, 1)),
                     weight_decay=t.weight_decay)
    width = config.model.channels[-1]

    def init(params, stats):
        head = (jnp.zeros((width, num_classes)), jnp.zeros(num_classes))
        return (params, head), stats, tx.init((params, head))

    def loss_fn(trainable, stats, clip, y, key, mu, sd):
        params, head = trainable
        view = make_views(key, clip, dc.clip_len, dc.jitter, ac)[0]  # (B, T, h, w, c)
        model = nnx.merge(graphdef, params, stats, copy=True)
        feat = model.backbone(jnp.swapaxes(view, 0, 1), train=True).mean(axis=(0, 2, 3))  # (B, C)
        logits = ((feat - mu) / sd) @ head[0] + head[1]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return loss, nnx.split(model, nnx.Param, nnx.BatchStat)[2]

    def step(state, clip, y, key, mu, sd):
        trainable, stats, opt_state = state
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable, stats, clip, y, key, mu, sd)
        updates, opt_state = tx.update(grads, opt_state, trainable)
        return (optax.apply_updates(trainable, updates), stats, opt_state), loss

    options = compiler_options(config)
    return jax.jit(init), jax.jit(step, donate_argnums=0, compiler_options=options)


def finetune(config: Config, extract, state: SSLState, data: dict, label: str, *, seed: int = 0,
             train_features: np.ndarray | None = None) -> float:
    """Test accuracy on `label` after `train.finetune_steps` steps of supervised fine-tuning of the backbone
    (batches from the train videos, sampler seed `seed`); evaluated on the eval clips (features averaged).
    `train_features` (N, C): the pretrained network's train-split features (computed when not given), whose
    mean and std standardise the head's input."""
    n = config.train.eval_clips
    if train_features is None:
        train_features = extract_features(config, extract, state.params, state.stats,
                                          data["train"]["video"])[0][:, :n].mean(axis=(1, 2))
    mu, sd = jnp.asarray(train_features.mean(0)), jnp.asarray(train_features.std(0) + 1e-6)
    ytr, yte = data["train"][label], data["test"][label]
    classes = int(max(ytr.max(), yte.max())) + 1
    init, step = finetune_programs(eval_key(config), classes)
    ft = init(state.params, state.stats)
    sampler = ClipSampler(data["train"]["video"], {label: ytr}, config.data, config.train.batch_size,
                          seed=10_000 + seed)
    key = jax.random.key(10_000 + seed)
    for i in range(config.train.finetune_steps):
        batch = next(sampler)
        ft, _ = step(ft, batch["clip"], jnp.asarray(batch[label]), jax.random.fold_in(key, i), mu, sd)
    (params, head), stats, _ = ft
    f, _ = extract_features(config, extract, params, stats, data["test"]["video"])
    logits = ((jnp.asarray(f[:, :n].mean(axis=(1, 2))) - mu) / sd) @ head[0] + head[1]
    return float(jnp.mean(jnp.argmax(logits, -1) == jnp.asarray(yte)))


def evaluate_runs(config: Config, extract, states: list[SSLState], data: dict, *,
                  seeds: list[int] | None = None) -> list[dict[str, float]]:
    """Per run: linear-probe accuracy for each label of the task (`probe_<label>`; `probe_task` is the task
    label's) on the time- and clip-averaged backbone features, retrieval R@k and (with `train.finetune_steps`)
    fine-tuning accuracy on the task label, temporal inconsistency E_consistency (per-step z and f), per-step vs
    clip-mean inconsistency, the cosine between the first and last (disjoint) clips of a video, and the collapse
    monitor. `seeds` (one per state) seed the fine-tuning batches (paired runs share them)."""
    n_eval = config.train.eval_clips
    labels = TASK_LABELS[config.data.task]
    seeds = list(range(len(states))) if seeds is None else seeds
    out, tr_feats, te_feats = [], [], []
    for state in states:
        ftr, _ = extract_features(config, extract, state.params, state.stats, data["train"]["video"])
        fte, zte = extract_features(config, extract, state.params, state.stats, data["test"]["video"])
        tr_feats.append(ftr[:, :n_eval].mean(axis=(1, 2)))  # (N, C)
        te_feats.append(fte[:, :n_eval].mean(axis=(1, 2)))
        z, f = jnp.asarray(zte), jnp.asarray(fte)  # (N, K, T, .)
        zt = jnp.moveaxis(z.reshape(-1, *z.shape[2:]), 1, 0)  # (T, N*K, D)
        ft = jnp.moveaxis(f.reshape(-1, *f.shape[2:]), 1, 0)
        zc = z.mean(2)  # (N, K, D)
        out.append({
            "inconsistency_z": float(L.temporal_inconsistency(zt)),
            "inconsistency_f": float(L.temporal_inconsistency(ft)),
            "step_vs_clip_z": float(L.step_to_clip_inconsistency(zt)),
            "disjoint_clip_cos_z": float(jnp.mean(L.cosine(zc[:, 0], zc[:, -1]))),
            "z_std": float(L.feature_std(zc[:, 0])),
            "z_std_ref": float(1.0 / np.sqrt(z.shape[-1])),
            "spike_rate_f": float(f.mean()),
        })
    probe = jax.jit(jax.vmap(functools.partial(linear_probe, steps=config.train.probe_steps,
                                               lr=config.train.probe_lr), in_axes=(0, None, 0, None, None)),
                    static_argnums=4)
    tr, te = jnp.asarray(np.stack(tr_feats)), jnp.asarray(np.stack(te_feats))
    for label in labels:
        ytr, yte = jnp.asarray(data["train"][label]), jnp.asarray(data["test"][label])
        classes = int(max(ytr.max(), yte.max())) + 1
        acc = np.asarray(probe(tr, ytr, te, yte, classes))
        for i, o in enumerate(out):
            o[f"probe_{label}"] = float(acc[i])
    ytr, yte = jnp.asarray(data["train"][labels[0]]), jnp.asarray(data["test"][labels[0]])
    for i, o in enumerate(out):
        o["probe_task"] = o[f"probe_{labels[0]}"]
        for k, r in retrieval_recall(tr[i], ytr, te[i], yte, config.train.retrieval_k).items():
            o[f"retrieval_r{k}"] = r
        if config.train.finetune_steps > 0:
            o["finetune_task"] = finetune(config, extract, states[i], data, labels[0], seed=seeds[i],
                                          train_features=np.asarray(tr[i]))
    return out


# ---------------------------------------------------------------- the experiment


def calibrated_init(config: Config, seed: int, data: dict, batches: int = 100) -> SSLState:
    """The untrained network of `seed` with its BN running statistics estimated on `batches` training
    batches (no parameter update): the "no pretraining" reference of the probes."""
    _, init, _, _, _, calibrate = programs(_shape_key(config))
    state = init(jax.random.key(config.train.seed + seed))
    sampler = ClipSampler(data["train"]["video"], {}, config.data, config.train.batch_size,
                          seed=config.train.seed + seed)
    stats = state.stats
    j, t = config.data.jitter, config.data.clip_len
    for _ in range(batches):
        stats = calibrate(state.params, stats, to_float(jnp.asarray(next(sampler)["clip"][:, j: j + t])))
    return state._replace(stats=stats)


def run_names(config: Config) -> list[tuple[str, int]]:
    return [(v, s) for v in config.variants for s in range(config.train.seeds)]


def train_run(config: Config, variant: str, seed: int, data: dict, *, workdir: str | pathlib.Path,
              progress_bar: bool = True) -> tuple[SSLState, list[dict], list[float]]:
    """Pretrain one (variant, seed) run through `core.train.fit`: checkpoints every `log_every` steps under
    `workdir` (with the clip sampler's position), so a killed run resumes there and ends where an uninterrupted
    one ends. Runs with the same seed share the initial weights, the batches and the augmentation keys (a paired
    comparison). Returns the final state, the logged metrics (window means) and this process's step times."""
    _, init, tx, step, _, _ = programs(_shape_key(config))
    switches = jnp.asarray([VARIANTS[variant][k] for k in SWITCHES], jnp.float32)
    labels = {k: data["train"][k] for k in TASK_LABELS[config.data.task]}
    sampler = ClipSampler(data["train"]["video"], labels, config.data, config.train.batch_size,
                          seed=config.train.seed + seed)
    step_times: list[float] = []

    def train_step(state, item):
        t = time.time()
        state, metrics = step(state, {"clip": item["clip"], "future": item["future"]}, switches)
        jax.block_until_ready(metrics["loss"])
        step_times.append(time.time() - t)
        return state, metrics

    state = init(jax.random.key(config.train.seed + seed))
    every = config.train.log_every
    state, history = fit(state, train_step, sampler, num_steps=config.train.steps, workdir=workdir, config=config,
                         log_every=every, ckpt_every=every, keep=1, progress_bar=progress_bar)
    return state, history, step_times


def train_and_evaluate(config: Config, workdir: str | pathlib.Path, *, data: dict | None = None,
                       progress_bar: bool = True) -> dict:
    """Pretrain all (variant, seed) runs of `config` (one compiled step for all), then evaluate each."""
    if config.source != "moving_digits":
        raise BadInputError(f"source={config.source!r}: train_and_evaluate runs moving digits; frame folders go "
                            "through run() (see the README)")
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data = make_datasets(config.data) if data is None else data
    extract = programs(eval_key(config))[4]
    runs = run_names(config)
    states, histories, times = [], [], []
    for variant, seed in runs:
        state, history, step_times = train_run(config, variant, seed, data, progress_bar=progress_bar,
                                               workdir=workdir / "runs" / f"{variant}_seed{config.train.seed + seed}")
        states.append(state)
        histories.append(history)
        times.extend(step_times[1:] or step_times)  # without the first (compiling) step
    train_seconds = time.time() - t0
    t1 = time.time()
    evals = evaluate_runs(config, extract, states, data, seeds=[config.train.seed + s for _, s in runs])
    per_run = [{"base": config.loss.base, "variant": v, "seed": s, **e} for (v, s), e in zip(runs, evals)]
    history = [{"step": h[0]["step"], **{k: [hh[k] for hh in h] for k in h[0] if k != "step"}}
               for h in zip(*histories)]
    median = float(np.median(times)) if times else float("nan")  # nan: every run was restored finished
    return {"runs": per_run, "variants": summarize(per_run), "history": history,
            "speed": {"step_seconds_median": median, "steps_per_s": 1.0 / median,
                      "batch_size": config.train.batch_size},
            "train_seconds": train_seconds, "eval_seconds": time.time() - t1, "wall_seconds": time.time() - t0}


def summarize(per_run: list[dict]) -> dict:
    """Per-variant mean and std (over seeds) of every evaluation metric."""
    out = {}
    for v in dict.fromkeys(r["variant"] for r in per_run):
        rows = [r for r in per_run if r["variant"] == v]
        keys = [k for k, x in rows[0].items() if k not in ("base", "variant", "seed")
                and isinstance(x, (int, float)) and not isinstance(x, bool)]
        out[v] = {k: {"mean": float(np.mean([r[k] for r in rows])), "std": float(np.std([r[k] for r in rows])),
                      "n": len(rows)} for k in keys}
    return out


def write_plots(result: dict, config: Config, workdir: pathlib.Path) -> list[str]:
    runs = run_names(config)
    steps = np.array([h["step"] for h in result["history"]])
    paths = []
    for key, title in (("loss", "training loss"), ("z_std", "collapse monitor: std of normalised z")):
        vals = np.array([h[key] for h in result["history"]])  # (logs, runs)
        curves = {v: (steps, vals[:, [i for i, (vv, _) in enumerate(runs) if vv == v]].mean(1))
                  for v in config.variants}
        paths.append(line_plot(workdir / f"train_{key}.png", curves, title=f"{config.loss.base}: {title}",
                               xlabel="step", ylabel=key))
    stats = result["variants"]
    task = TASK_LABELS[config.data.task][0]
    for metric in (f"probe_{task}", "probe_digit", "inconsistency_z", "retrieval_r1") + (
            ("finetune_task",) if "finetune_task" in result["runs"][0] else ()):
        paths.append(bar_plot(workdir / f"{metric}.png", {v: stats[v][metric]["mean"] for v in config.variants},
                              {v: stats[v][metric]["std"] for v in config.variants},
                              title=f"{config.loss.base}: {metric} (mean ± std over seeds)", ylabel=metric))
    return [str(p) for p in paths]


def run(config: Config, workdir: str | pathlib.Path) -> dict:
    """The registry entry: pretrain + evaluate, write metrics.json, results.json and PNG plots into workdir."""
    from core.config import to_dict

    workdir = pathlib.Path(workdir)
    if config.source != "moving_digits":
        from .frames import train_frames
        return train_frames(config, workdir)
    result = train_and_evaluate(config, workdir)
    plots = write_plots(result, config, workdir)
    metrics = {f"{v}/{k}": s["mean"] for v, vs in result["variants"].items() for k, s in vs.items()}
    metrics["steps_per_s"] = result["speed"]["steps_per_s"]
    metrics["wall_seconds"] = result["wall_seconds"]
    write_metrics(workdir, metrics)
    (workdir / "results.json").write_text(json.dumps({"config": to_dict(config), **result, "plots": plots},
                                                     indent=1, default=float))
    return metrics
