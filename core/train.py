"""A small, purely functional training scaffold: state pytree, jitted step, and a resumable fit loop.

`make_train_step` turns `loss_fn(params, batch, key) -> (loss, metrics)` and an optax transformation into a
jitted, donating `step(state, batch) -> (state, metrics)`. `fit` drives it: progress bar, metrics fetched
from the device every `log_every` steps (never every step), a NaN/inf check at log time, checkpoints and
automatic resume from the run folder, including the data iterator's position.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from core import sharding as sharding_lib
from core.checkpoint import Checkpointer

Metrics = dict[str, jax.Array]
LossFn = Callable[[Any, Any, jax.Array], tuple[jax.Array, Mapping[str, jax.Array]]]


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array


def init_train_state(params: Any, tx: optax.GradientTransformation, key: jax.Array) -> TrainState:
    """A fresh state at step 0; `key` is a typed PRNG key (`jax.random.key`)."""
    if not jax.dtypes.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key):
        raise ValueError(f"key of dtype {jnp.asarray(key).dtype}: expected a typed key from jax.random.key(seed)")
    return TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), key)


def make_train_step(loss_fn: LossFn, tx: optax.GradientTransformation, *, donate: bool = True,
                    state_sharding: Any = None, batch_sharding: Any = None
                    ) -> Callable[[TrainState, Any], tuple[TrainState, Metrics]]:
    """The jitted update. The step's key is `fold_in(state.key, state.step)`: never reused, resumable."""

    def step(state: TrainState, batch: Any) -> tuple[TrainState, Metrics]:
        key = jax.random.fold_in(state.key, state.step)
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch, key)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {**metrics, "loss": loss, "grad_norm": optax.tree.norm(grads)}
        return TrainState(params, opt_state, state.step + 1, state.key), metrics

    kwargs: dict[str, Any] = {"donate_argnums": (0,)} if donate else {}
    if state_sharding is not None or batch_sharding is not None:
        kwargs["in_shardings"] = (state_sharding, batch_sharding)
        kwargs["out_shardings"] = (state_sharding, None)
    return jax.jit(step, **kwargs)


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


class MetricsLog:
    """Append-only JSONL of logged metrics; on resume, drops records logged after the restored step."""

    def __init__(self, path: pathlib.Path, resume_step: int):
        self.path = path
        self.primary = jax.process_index() == 0
        if self.primary:
            path.parent.mkdir(parents=True, exist_ok=True)
            kept = [r for r in self.read() if r.get("step", 0) <= resume_step] if path.exists() else []
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: Mapping[str, Any]) -> None:
        if self.primary:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _summarise(pending: list[Metrics], first_step: int, last_step: int) -> dict[str, float]:
    stacked = jax.device_get(jax.tree.map(lambda *xs: jnp.stack(xs).mean(0), *pending))
    record = {k: float(v) for k, v in stacked.items()}
    bad = [k for k, v in record.items() if not math.isfinite(v)]
    if bad:
        raise FloatingPointError(f"non-finite {', '.join(bad)} between steps {first_step} and {last_step} "
                                 f"({', '.join(f'{k}={record[k]}' for k in bad)}); lower the learning rate or "
                                 "check the data; the last good checkpoint is kept")
    return record


def fit(state: TrainState, train_step: Callable, loader: Any, *, num_steps: int, workdir: str | pathlib.Path,
        config: Any = None, log_every: int = 50, ckpt_every: int = 500,
        eval_fn: Callable[[Any], Mapping[str, Any]] | None = None, eval_every: int | None = None,
        best_metric: str | None = None, best_mode: str = "min", keep: int = 3, progress_bar: bool = True,
        mesh: jax.sharding.Mesh | None = None) -> tuple[TrainState, list[dict]]:
    """Run `train_step` until `num_steps`, resuming from `workdir/checkpoints` when a checkpoint is there.

    `loader` yields host batches and has `state()`/`restore()` (e.g. `core.data.ArrayLoader`); with `mesh`
    each batch is placed on it, split over "data". `eval_fn(state) -> metrics` runs every `eval_every`
    steps and at the end. Returns the final state and every logged record (from the JSONL, resumes included).
    """
    for name, value in (("num_steps", num_steps), ("log_every", log_every), ("ckpt_every", ckpt_every)):
        if value < 1:
            raise ValueError(f"{name}={value}: expected a positive number of steps")
    workdir = pathlib.Path(workdir)
    checkpointer = Checkpointer(workdir / "checkpoints", keep=keep, config=config,
                                best_metric=best_metric, best_mode=best_mode)
    start = 0
    if checkpointer.latest_step() is not None:
        state, data_state = checkpointer.restore(state)
        loader.restore(data_state)
        start = int(jax.device_get(state.step))
    log = MetricsLog(workdir / "metrics.jsonl", start)
    eval_every = eval_every or (num_steps if eval_fn else None)
    pending: list[Metrics] = []
    last_eval: dict[str, float] = {}
    bar = progress(total=num_steps, initial=start, desc=f"train {workdir.name}", disable=not progress_bar)
    for step in range(start + 1, num_steps + 1):
        batch = next(loader)
        if mesh is not None:
            batch = sharding_lib.shard_batch(batch, mesh)
        state, metrics = train_step(state, batch)
        pending.append(metrics)
        if step % log_every == 0 or step == num_steps:
            record = _summarise(pending, step - len(pending) + 1, step)
            pending = []
            log.write({"step": step, **record})
            bar.set_postfix(loss=f"{record['loss']:.4g}", refresh=False)
        if eval_fn is not None and (step % eval_every == 0 or step == num_steps):
            last_eval = {f"eval/{k}": float(v) for k, v in jax.device_get(dict(eval_fn(state))).items()}
            log.write({"step": step, **last_eval})
        if step % ckpt_every == 0 or step == num_steps:
            checkpointer.save(step, state, data_state=loader.state(),
                              metrics={k.removeprefix("eval/"): v for k, v in last_eval.items()})
        bar.update(1)
    bar.close()
    checkpointer.close()
    return state, log.read()
