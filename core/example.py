"""The built-in regression example: a small nnx MLP fitted to a synthetic function with the core scaffold.

It is not a paper's method. It exercises every part of `core/` (config, loader, jitted sharded step,
fit with checkpoints and resume, metrics, plots) and is what `iclr26 demo` runs before any method lands;
the resume, sharding and multi-host tests drive it through the real CLI.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core import data as data_lib
from core import plots
from core import sharding as sharding_lib
from core import train as train_lib
from core.config import check
from core.registry import Experiment


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegressionConfig:
    """Fit y = sin(x . w) + noise with an MLP.

    The target's variance is about 0.5; an untrained model's MSE is about that.
    tiny: `iclr26 run regression --preset tiny` (~10 s on 2 CPU cores; final eval MSE about 0.08).
    demo: `iclr26 run regression --preset demo` (~20 s; final eval MSE about 0.02).
    """

    features: int = 8  # input dimension d of x
    hidden: int = 64  # MLP hidden width
    num_train: int = 2048  # training examples
    num_eval: int = 512  # held-out examples
    noise: float = 0.05  # standard deviation of the label noise
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0
    log_every: int = 50
    ckpt_every: int = 200  # steps between checkpoints
    mesh_model: int = 1  # devices on the model axis of the mesh (the rest shard the batch)
    def __post_init__(self):
        for name in ("features", "hidden", "num_train", "num_eval", "steps", "batch_size", "log_every",
                     "ckpt_every", "mesh_model"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "a positive integer")
        check(self.lr > 0, "lr", self.lr, "a positive learning rate")
        check(self.noise >= 0, "noise", self.noise, "a non-negative noise level")
        check(self.batch_size <= self.num_train, "batch_size", self.batch_size,
              f"at most num_train={self.num_train}")


PRESETS = {
    "tiny": RegressionConfig(steps=200, hidden=32, num_train=1024, ckpt_every=50, log_every=25),
    "demo": RegressionConfig(),
}


class MLP(nnx.Module):
    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(features, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.hidden(x)))[..., 0]


def make_data(config: RegressionConfig) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Synthetic train and eval sets, deterministic in `config.seed` (host-side numpy: data, not model code)."""
    rng = np.random.default_rng(config.seed)
    w = rng.normal(size=config.features) / np.sqrt(config.features)

    def sample(n):
        x = rng.normal(size=(n, config.features)).astype(np.float32)
        y = (np.sin(2.0 * x @ w) + config.noise * rng.normal(size=n)).astype(np.float32)
        return {"x": x, "y": y}

    return sample(config.num_train), sample(config.num_eval)


def run(config: RegressionConfig, workdir: pathlib.Path, *, devices=None) -> dict[str, float]:
    """Train, evaluate and plot; resumes from `workdir` if a checkpoint is there. `devices` defaults to all."""
    train_set, eval_set = make_data(config)
    mesh = sharding_lib.make_mesh(model=config.mesh_model, devices=devices)
    model = MLP(config.features, config.hidden, rngs=nnx.Rngs(config.seed))
    graphdef, params = nnx.split(model, nnx.Param)

    def predict(params, x):
        return nnx.merge(graphdef, params)(x)

    def loss_fn(params, batch, key):
        del key  # deterministic model
        err = predict(params, batch["x"]) - batch["y"]
        return jnp.mean(err**2), {}

    tx = optax.adam(config.lr)
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed))
    state = sharding_lib.replicate(state, mesh)
    state_sharding = jax.tree.map(lambda x: x.sharding, state)
    step = train_lib.make_train_step(loss_fn, tx, state_sharding=state_sharding,
                                     batch_sharding=sharding_lib.batch_sharding(mesh))
    eval_x = sharding_lib.replicate(eval_set, mesh)
    evaluate = jax.jit(lambda params: {"mse": jnp.mean((predict(params, eval_x["x"]) - eval_x["y"]) ** 2)})

    loader = data_lib.ArrayLoader(train_set, config.batch_size, seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.steps, workdir=workdir, config=config,
                                   log_every=config.log_every, ckpt_every=config.ckpt_every,
                                   eval_fn=lambda s: evaluate(s.params), eval_every=config.ckpt_every,
                                   best_metric="mse", mesh=mesh)
    losses = [(r["step"], r["loss"]) for r in history if "loss" in r]
    plots.line_plot(workdir / "loss.png", {"train loss": tuple(zip(*losses))}, title="regression example",
                    xlabel="step", ylabel="MSE", logy=True)
    final_mse = float(evaluate(state.params)["mse"])
    if jax.process_index() == 0:
        order = np.argsort(eval_set["y"])
        predicted = np.asarray(jax.device_get(predict(state.params, eval_x["x"])))
        plots.line_plot(workdir / "fit.png", {"target": (np.arange(len(order)), eval_set["y"][order]),
                                              "prediction": (np.arange(len(order)), predicted[order])},
                        title="eval set, sorted by target", xlabel="example", ylabel="y")
    return {"eval_mse": final_mse, "final_train_loss": losses[-1][1], "steps": config.steps,
            "devices": int(mesh.size), "processes": jax.process_count()}


EXPERIMENT = Experiment(
    name="regression", paper=None, title="built-in regression example (exercises the core scaffold; not a paper)",
    presets=PRESETS, run=run, runtimes={"tiny": "~10 s", "demo": "~20 s"})
