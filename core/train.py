"""A small, purely functional training scaffold: state pytree, jitted step, and a resumable fit loop.

`make_train_step` turns `loss_fn(params, batch, key) -> (loss, metrics)` (or `loss_fn(params, batch, key,
frozen)` when the state carries frozen arrays) and an optax transformation into a jitted, donating
`step(state, batch) -> (state, metrics)`, optionally with gradient accumulation over microbatches, bf16 compute
on fp32 master weights and the learning rate in the metrics. `fit` drives it: progress bar, metrics fetched
from the device every `log_every` steps (never every step) with steps/s and tokens/s, a finiteness check of
the loss and the parameter norm before every checkpoint write (so no checkpoint is ever non-finite),
checkpoints and automatic resume from the run folder, including the data iterator's position.

Logged records always go to `workdir/metrics.jsonl`; `set_loggers(["tensorboard", "wandb"])` (the CLI's
`--logger`, or the `ICLR26_LOGGERS` environment variable, comma-separated) adds TensorBoard event files in
`workdir/tensorboard` (tensorboardX) and a Weights & Biases run resumed under an id kept in the run folder.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from core import sharding as sharding_lib
from core.checkpoint import Checkpointer
from core.config import BadInputError

Metrics = dict[str, jax.Array]
LossFn = Callable[..., tuple[jax.Array, Mapping[str, jax.Array]]]


class TrainState(NamedTuple):
    """params and opt_state are trained; step counts updates; key is the run's typed PRNG key.

    frozen: arrays the loss reads but that are never differentiated, updated or donated (base weights under
    LoRA, a reference policy); None when unused. `fit` does not checkpoint them (they are reloaded from their
    source: pass a state whose `frozen` is already set, and a resumed run reuses it).
    """

    params: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array
    frozen: Any = None


def init_train_state(params: Any, tx: optax.GradientTransformation, key: jax.Array, frozen: Any = None
                     ) -> TrainState:
    """A fresh state at step 0; `key` is a typed PRNG key (`jax.random.key`).

    A `frozen` leaf that is the very array of a `params` leaf (a reference policy started from the policy) is
    copied, so donating the params never invalidates it.
    """
    if not jax.dtypes.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
        raise ValueError(f"key of dtype {jnp.asarray(key).dtype}: expected a typed key from jax.random.key(seed)")
    if frozen is not None:
        shared = {id(x) for x in jax.tree.leaves(params)}
        frozen = jax.tree.map(lambda x: jnp.copy(x) if id(x) in shared else x, frozen)
    return TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), key, frozen)


def _cast_floating(tree: Any, dtype: Any) -> Any:
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def _microbatches(batch: Any, k: int) -> Any:
    """(B, ...) -> (k, B / k, ...); microbatch i holds rows i, i + k, i + 2k, ... so that a batch split over
    the "data" axis stays split the same way within every microbatch (no resharding)."""
    def split(x):
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[0] % k:
            raise ValueError(f"batch leaf of shape {x.shape}: accumulate={k} needs a leading axis divisible "
                             f"by {k}")
        return jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)
    return jax.tree.map(split, batch)


def _batch_tokens(batch: Any) -> jax.Array | None:
    if isinstance(batch, Mapping) and "loss_mask" in batch:
        return jnp.sum(jnp.asarray(batch["loss_mask"]) != 0).astype(jnp.float32)
    return None


def make_train_step(loss_fn: LossFn, tx: optax.GradientTransformation, *, donate: bool = True,
                    state_sharding: Any = None, batch_sharding: Any = None, accumulate: int = 1,
                    compute_dtype: Any = None, schedule: optax.Schedule | None = None
                    ) -> Callable[[TrainState, Any], tuple[TrainState, Metrics]]:
    """The jitted update. The step's key is `fold_in(state.key, state.step)`: never reused, resumable.

    loss_fn: `(params, batch, key) -> (loss, metrics)`, or `(params, batch, key, frozen)` when `state.frozen`
      is not None (the frozen arrays as given, never differentiated, never donated).
    accumulate: k > 1 splits every batch leaf's leading axis B into k microbatches of B / k (rows i, i+k, ...)
      and runs them under `lax.scan` inside the jitted step: gradients and metrics are averaged (a `tokens`
      metric is summed), then one optimizer update. Peak activation memory is that of one microbatch; the
      extra cost is one float32 gradient accumulator the size of the params. Microbatch i gets the key
      `fold_in(step_key, i)` (k = 1 uses the step key itself). For a loss that is a mean over examples the
      update equals the full-batch one (with uneven per-microbatch token counts a token mean is reweighted).
    compute_dtype: e.g. "bfloat16": the loss sees the floating params cast to it; the state keeps its (fp32)
      master weights; gradients flow back through the cast (bf16-rounded) to the params' dtype. Batch and frozen arrays
      are passed as given (load frozen base weights in the compute dtype).
    schedule: the optimizer's learning-rate schedule; adds `lr` = schedule(state.step), the rate this update
      applies (optax counts updates from 0 like `state.step`).

    Metrics (float32 scalars): the loss's own, `loss`, `grad_norm` (of the averaged gradient), `lr` with a
    schedule, and `tokens` (the loss's `tokens` metric if it returns one, else the number of nonzero entries
    of `batch["loss_mask"]` when the batch is a mapping with that key) for `fit`'s tokens/s.
    """
    if accumulate < 1:
        raise ValueError(f"accumulate={accumulate}: expected a positive number of microbatches")
    compute = None if compute_dtype is None else jnp.dtype(compute_dtype)
    if compute is not None and not jnp.issubdtype(compute, jnp.floating):
        raise ValueError(f"compute_dtype={compute_dtype!r}: expected a floating dtype such as 'bfloat16'")

    def loss_and_metrics(params, frozen, batch, key):
        if compute is not None:
            params = _cast_floating(params, compute)
        loss, metrics = loss_fn(params, batch, key) if frozen is None else loss_fn(params, batch, key, frozen)
        metrics = {k: jnp.asarray(v, jnp.float32) for k, v in dict(metrics).items()}
        tokens = _batch_tokens(batch)
        if "tokens" not in metrics and tokens is not None:
            metrics["tokens"] = tokens
        loss = jnp.asarray(loss, jnp.float32)
        return loss, {**metrics, "loss": loss}

    grad_fn = jax.value_and_grad(loss_and_metrics, has_aux=True)

    def grads_and_metrics(params, frozen, batch, key):
        if accumulate == 1:
            (_, metrics), grads = grad_fn(params, frozen, batch, key)
            return grads, metrics
        micro = _microbatches(batch, accumulate)
        first = jax.tree.map(lambda x: x[0], micro)
        (_, shape), _ = jax.eval_shape(grad_fn, params, frozen, first, key)
        zeros = (jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.promote_types(p.dtype, jnp.float32)), params),
                 jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), shape))

        def body(acc, inp):
            i, mb = inp
            (_, metrics), grads = grad_fn(params, frozen, mb, jax.random.fold_in(key, i))
            return jax.tree.map(lambda a, x: a + x.astype(a.dtype), acc, (grads, metrics)), None

        (grads, metrics), _ = jax.lax.scan(body, zeros, (jnp.arange(accumulate), micro))
        grads = jax.tree.map(lambda g, p: (g / accumulate).astype(p.dtype), grads, params)
        metrics = {k: v if k == "tokens" else v / accumulate for k, v in metrics.items()}
        return grads, metrics

    def step(state: TrainState, frozen: Any, batch: Any) -> tuple[TrainState, Metrics]:
        key = jax.random.fold_in(state.key, state.step)
        grads, metrics = grads_and_metrics(state.params, frozen, batch, key)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {**metrics, "grad_norm": optax.tree.norm(grads)}
        if schedule is not None:
            metrics["lr"] = jnp.asarray(schedule(state.step), jnp.float32)
        return TrainState(params, opt_state, state.step + 1, state.key), metrics

    kwargs: dict[str, Any] = {"donate_argnums": (0,)} if donate else {}  # the frozen arrays (arg 1) are not donated
    if state_sharding is not None or batch_sharding is not None:
        if isinstance(state_sharding, TrainState):
            trained, frozen_sharding = state_sharding._replace(frozen=None), state_sharding.frozen
        else:  # one sharding (or None) for the whole state
            trained = frozen_sharding = state_sharding
        kwargs["in_shardings"] = (trained, frozen_sharding, batch_sharding)
        kwargs["out_shardings"] = (trained, None)
    jitted = jax.jit(step, **kwargs)

    def train_step(state: TrainState, batch: Any) -> tuple[TrainState, Metrics]:
        new, metrics = jitted(state._replace(frozen=None), state.frozen, batch)
        return new._replace(frozen=state.frozen), metrics

    return train_step


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "", *,
             disable: bool = False, **kwargs) -> tqdm:
    """A tqdm progress bar for long loops (on stderr; shown on process 0 only)."""
    return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, mininterval=0.5,
                disable=disable or jax.process_index() != 0, **kwargs)


def _to_float(value: Any) -> Any:
    value = np.asarray(value)
    return float(value) if value.ndim == 0 else value.tolist()


def write_metrics(workdir: str | pathlib.Path, metrics: Mapping[str, Any]) -> pathlib.Path:
    """Write the final metrics as `workdir/metrics.json` (device scalars become floats)."""
    path = pathlib.Path(workdir) / "metrics.json"
    if jax.process_index() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        clean = {k: (_to_float(v) if isinstance(v, (jax.Array, np.ndarray, np.generic)) else v)
                 for k, v in metrics.items()}
        path.write_text(json.dumps(clean, indent=2, sort_keys=True, default=str) + "\n")
    return path


# ---- metric writers: JSONL always, TensorBoard and Weights & Biases on request ----

LOGGERS = ("jsonl", "tensorboard", "wandb")
_selected_loggers: tuple[str, ...] | None = None


def set_loggers(names: Sequence[str]) -> None:
    """Choose the metric writers for every run of this process (`jsonl` is always on)."""
    global _selected_loggers
    names = tuple(dict.fromkeys(n.strip() for n in names if n.strip()))
    bad = [n for n in names if n not in LOGGERS]
    if bad:
        raise BadInputError(f"logger {bad[0]!r}: expected one of {', '.join(LOGGERS)}")
    _selected_loggers = names


def selected_loggers() -> tuple[str, ...]:
    if _selected_loggers is not None:
        return _selected_loggers
    env = os.environ.get("ICLR26_LOGGERS", "")
    if env:
        set_loggers(env.split(","))
        return _selected_loggers  # type: ignore[return-value]
    return ("jsonl",)


def _scalars(record: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}


class TensorBoardWriter:
    """Scalars as TensorBoard event files in `workdir/tensorboard`; a resumed run purges events after its step."""

    def __init__(self, workdir: pathlib.Path, resume_step: int):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise BadInputError("logger 'tensorboard': expected the tensorboardX package "
                             "(pip install -e '.[logging]')") from None
        # the file name carries the second only: a suffix keeps a restart within that second from overwriting
        self.writer = SummaryWriter(logdir=str(workdir / "tensorboard"), purge_step=resume_step + 1,
                                    filename_suffix=f".{os.getpid()}.{time.time_ns()}")

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        for key, value in _scalars(record).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbWriter:
    """A Weights & Biases run in `workdir`, resumed under the id stored in `workdir/wandb_id` (so a killed and
    restarted run continues the same W&B run); project from `WANDB_PROJECT`, default `iclr26`."""

    def __init__(self, workdir: pathlib.Path, config: Any = None):
        try:
            import wandb
        except ImportError:
            raise BadInputError("logger 'wandb': expected the wandb package (pip install wandb)") from None
        id_file = workdir / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.exists() else wandb.util.generate_id()
        id_file.write_text(run_id + "\n")
        as_dict = config if isinstance(config, Mapping) else (_config_dict(config) if config is not None else None)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "iclr26"), name=workdir.name, id=run_id,
                              resume="allow", dir=str(workdir), config=as_dict)

    def write(self, step: int, record: Mapping[str, Any]) -> None:
        self.run.log(_scalars(record), step=step)

    def close(self) -> None:
        self.run.finish()


def _config_dict(config: Any) -> dict[str, Any] | None:
    import dataclasses

    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else None


class MetricsLog:
    """Append-only JSONL of logged metrics (on resume, drops records logged after the restored step), mirrored to
    the writers chosen by `set_loggers` on the primary process."""

    def __init__(self, path: pathlib.Path, resume_step: int, *, config: Any = None,
                 loggers: Sequence[str] | None = None):
        self.path = path
        self.primary = jax.process_index() == 0
        self.writers: list[Any] = []
        if self.primary:
            path.parent.mkdir(parents=True, exist_ok=True)
            kept = [r for r in self.read() if r.get("step", 0) <= resume_step] if path.exists() else []
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            chosen = selected_loggers() if loggers is None else tuple(loggers)
            if "tensorboard" in chosen:
                self.writers.append(TensorBoardWriter(path.parent, resume_step))
            if "wandb" in chosen:
                self.writers.append(WandbWriter(path.parent, config))

    def write(self, record: Mapping[str, Any]) -> None:
        if self.primary:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            for writer in self.writers:
                writer.write(int(record.get("step", 0)), record)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers = []

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


# ---- finiteness: no checkpoint ever holds a non-finite value (issue #49) ----

# below this many elements the probe reads one flat float32 copy of the parameters: one fusion instead of two per
# leaf, which XLA:CPU compiles ~10x faster (PhaseFormer tiny, 64 leaves: 3.1 s -> 0.3 s); above it, per-leaf
# reductions, so a large model is never copied
_FLAT_NORM_LIMIT = 1 << 26


def _global_norm(params: Any) -> jax.Array:
    """L2 norm over every floating leaf, scaled by the largest magnitude so that huge but finite parameters
    (1e30) give a finite norm; NaN or inf anywhere gives a non-finite one."""
    leaves = [x for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.inexact)]
    if not leaves:
        return jnp.zeros((), jnp.float32)
    if sum(x.size for x in leaves) <= _FLAT_NORM_LIMIT:
        # abs before the cast: a complex leaf contributes its magnitude, as on the per-leaf path
        leaves = [jnp.concatenate([jnp.abs(x).reshape(-1).astype(jnp.float32) for x in leaves])]
    peak = jnp.max(jnp.stack([jnp.max(jnp.abs(x)).astype(jnp.float32) for x in leaves]))
    scale = jnp.where(peak > 0, peak, 1.0)
    total = sum(jnp.sum(jnp.square(jnp.abs(x).astype(jnp.float32) / scale)) for x in leaves)
    return scale * jnp.sqrt(total)


@jax.jit
def _finite_probe(values: dict[str, Any], params: Any) -> tuple[dict[str, jax.Array], jax.Array]:
    stacked = {k: jnp.stack(v) if isinstance(v, (list, tuple)) else jnp.atleast_1d(v) for k, v in values.items()}
    return {k: jnp.isfinite(v) for k, v in stacked.items()}, _global_norm(params)


def _span(unit: str, first: int, last: int) -> str:
    return f"{unit} {first}" if first == last else f"{unit}s {first}-{last}"


def last_finite_checkpoint(checkpointer: Checkpointer | None, unit: str = "step") -> str:
    """The end of every divergence message: where a rerun resumes from."""
    if checkpointer is None:
        return "no checkpoint is written (no run folder)"
    latest = checkpointer.latest_step()
    if latest is None:
        return "no finite checkpoint was written, so a rerun starts afresh"
    return f"the last finite checkpoint is {unit} {latest} ({checkpointer.directory}), which a rerun resumes from"


def check_finite(values: Mapping[str, Any], params: Any, *, first: int, last: int,
                 checkpointer: Checkpointer | None, unit: str = "step") -> float:
    """Raise a one-line FloatingPointError unless every value and the global norm of `params` are finite.

    Call it before writing a checkpoint. values: name -> a scalar (over the whole range) or a sequence / 1-D
    array whose entry i belongs to `unit` first + i (e.g. the losses of the steps since the last check). The
    finiteness flags and the norm are computed in one jitted call and fetched together. The message names the
    first bad step, the metric and `last_finite_checkpoint(checkpointer)`. Returns the parameter norm.
    """
    finite, norm = jax.device_get(_finite_probe({k: v for k, v in values.items()}, params))
    for name, ok in finite.items():
        ok = np.asarray(ok).reshape(-1)
        if not ok.all():
            at = f"{unit} {first + int(np.argmin(ok))}" if ok.size > 1 else _span(unit, first, last)
            raise FloatingPointError(
                f"non-finite {name} at {at} (checked {_span(unit, first, last)} before writing a checkpoint); "
                f"{last_finite_checkpoint(checkpointer, unit)}; lower the learning rate or check the data")
    if not math.isfinite(float(norm)):
        raise FloatingPointError(
            f"non-finite parameters (global norm {float(norm)}) after {unit} {last} (checked "
            f"{_span(unit, first, last)} before writing a checkpoint); {last_finite_checkpoint(checkpointer, unit)}; "
            "lower the learning rate or check the data")
    return float(norm)


def _summarise(pending: list[Metrics], first_step: int, last_step: int, checkpointer: Checkpointer | None
               ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Fetch the interval's metrics at once: the record (means; `lr` at the last step) and the per-step values."""
    stacked = jax.device_get(jax.tree.map(lambda *xs: jnp.stack(xs), *pending))
    stacked = {k: np.asarray(v, np.float64) for k, v in stacked.items()}
    record = {k: float(v[-1] if k == "lr" else v.mean()) for k, v in stacked.items()}
    bad = [k for k, v in stacked.items() if not np.isfinite(v).all()]
    if bad:
        at = first_step + min(int(np.argmin(np.isfinite(stacked[k]))) for k in bad)
        raise FloatingPointError(f"non-finite {', '.join(bad)} from step {at} (logged steps {first_step}-"
                                 f"{last_step}: {', '.join(f'mean {k}={record[k]}' for k in bad)}); "
                                 f"{last_finite_checkpoint(checkpointer)}; lower the learning rate or check the data")
    return record, stacked


def _without_frozen(state: Any) -> Any:
    return state._replace(frozen=None) if isinstance(state, TrainState) else state


def _save_finite(checkpointer: Checkpointer, step: int, state: Any, loader: Any, last_eval: dict[str, float]
                 ) -> None:
    """Save (without the frozen arrays) unless an eval metric, which a "best" checkpoint would hold, is not finite."""
    bad = [k for k, v in last_eval.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite {', '.join(bad)} at step {step} (evaluated before writing a checkpoint); "
                                 f"{last_finite_checkpoint(checkpointer)}; lower the learning rate or check the data")
    checkpointer.save(step, _without_frozen(state), data_state=loader.state(),
                      metrics={k.removeprefix("eval/"): v for k, v in last_eval.items()})


def fit(state: TrainState, train_step: Callable, loader: Any, *, num_steps: int, workdir: str | pathlib.Path,
        config: Any = None, log_every: int = 50, ckpt_every: int = 500,
        eval_fn: Callable[[Any], Mapping[str, Any]] | None = None, eval_every: int | None = None,
        best_metric: str | None = None, best_mode: str = "min", keep: int = 3, progress_bar: bool = True,
        mesh: jax.sharding.Mesh | None = None) -> tuple[TrainState, list[dict]]:
    """Run `train_step` until `num_steps`, resuming from `workdir/checkpoints` when a checkpoint is there.

    `loader` yields host batches and has `state()`/`restore()` (e.g. `core.data.ArrayLoader`); with `mesh`
    each batch is placed on it, split over "data". `eval_fn(state) -> metrics` runs every `eval_every`
    steps and at the end. Returns the final state and every logged record (from the JSONL, resumes included).

    Each record holds the interval's mean metrics, `lr` at the logged step (with a step made with `schedule=`),
    `steps_per_s` and, when the step reports `tokens`, `tokens_per_s`: wall clock over the interval, without
    the process's first (compiling) step and without time spent in eval and checkpoint writes. Before every
    checkpoint the losses of the steps since the last check and the parameter norm are checked (`check_finite`):
    a non-finite run raises FloatingPointError naming the step, and the last checkpoint stays the last finite
    one. `state.frozen` is not checkpointed: the state passed in supplies it, on resume too.
    """
    for name, value in (("num_steps", num_steps), ("log_every", log_every), ("ckpt_every", ckpt_every)):
        if value < 1:
            raise BadInputError(f"{name}={value}: expected a positive number of steps")
    workdir = pathlib.Path(workdir)
    checkpointer = Checkpointer(workdir / "checkpoints", keep=keep, config=config,
                                best_metric=best_metric, best_mode=best_mode)
    frozen = getattr(state, "frozen", None)
    start = 0
    if checkpointer.latest_step() is not None:
        restored, data_state = checkpointer.restore(_without_frozen(state))
        state = restored._replace(frozen=frozen) if isinstance(restored, TrainState) else restored
        loader.restore(data_state)
        start = int(jax.device_get(state.step))
    log = MetricsLog(workdir / "metrics.jsonl", start, config=config)
    eval_every = eval_every or (num_steps if eval_fn else None)
    pending: list[Metrics] = []
    unchecked: list[jax.Array] = []  # losses of the steps since the last check (log or checkpoint): a few
    last_eval: dict[str, float] = {}
    bar = progress(total=num_steps, initial=start, desc=f"train {workdir.name}", disable=not progress_bar)
    clock, untimed, paused = None, 0, 0.0  # throughput: interval start, untimed steps in it, time not training
    try:  # the bar ends its line and the checkpointer closes even when the run diverges
        for step in range(start + 1, num_steps + 1):
            batch = next(loader)
            if mesh is not None:
                batch = sharding_lib.shard_batch(batch, mesh)
            state, metrics = train_step(state, batch)
            pending.append(metrics)
            if "loss" in metrics:
                unchecked.append(metrics["loss"])
            if clock is None:  # the first step of this process compiles: time from its end
                jax.block_until_ready(metrics)
                clock, untimed = time.perf_counter(), 1
            if step % log_every == 0 or step == num_steps:
                record, per_step = _summarise(pending, step - len(pending) + 1, step, checkpointer)
                seconds = time.perf_counter() - clock - paused
                timed = len(pending) - untimed
                if timed > 0 and seconds > 0:
                    record["steps_per_s"] = timed / seconds
                    record["step_time_s"] = seconds / timed
                    if "tokens" in per_step:
                        record["tokens_per_s"] = float(per_step["tokens"][untimed:].sum()) / seconds
                pending, untimed, paused, clock = [], 0, 0.0, time.perf_counter()
                unchecked = []  # their losses were just checked: finite
                log.write({"step": step, **record})
                bar.set_postfix(loss=f"{record['loss']:.4g}", refresh=False)
            do_eval = eval_fn is not None and (step % eval_every == 0 or step == num_steps)
            do_ckpt = step % ckpt_every == 0 or step == num_steps
            if do_eval or do_ckpt:
                jax.block_until_ready(state)  # the steps so far are done; what follows is not training time
                t0 = time.perf_counter()
                if do_ckpt:  # before eval: a diverged state is neither evaluated nor saved
                    check_finite({"loss": unchecked} if unchecked else {}, state.params,
                                 first=step - len(unchecked) + 1, last=step, checkpointer=checkpointer)
                    unchecked = []
                if do_eval:
                    last_eval = {f"eval/{k}": float(v) for k, v in jax.device_get(dict(eval_fn(state))).items()}
                    log.write({"step": step, **last_eval})
                if do_ckpt:
                    _save_finite(checkpointer, step, state, loader, last_eval)
                paused += time.perf_counter() - t0
            bar.update(1)
    finally:
        bar.close()
        checkpointer.close()
        log.close()
    return state, log.read()
