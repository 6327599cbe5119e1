"""Training and evaluation on the long-term forecasting protocol, whole epochs inside one jit.

The scaled training series lives on the device; an epoch is one jitted call: a permutation of the window starts,
then ``lax.scan`` over batches that cut their windows with dynamic slices, take a gradient step and carry the
parameters and Adam state. Evaluation is one jitted scan over every window (the last batch padded and masked,
so no test window is dropped). Early stopping on the validation loss (the training criterion) runs on the host
between epochs, keeping the best-validation parameters (``weights="best"``) or the last ones (``"last"``). Given a
run folder, every epoch ends with a checkpoint (parameters, Adam state, best parameters, early-stopping counters,
history), and a killed run resumes at its last finished epoch and ends where an uninterrupted one ends: each epoch's
key is ``fold_in(key, epoch)``, so nothing depends on how many epochs this process ran. On several devices each
batch is split over a ``data`` mesh axis (parameters replicated, gradients all-reduced by XLA); the fused Pallas
routing kernel then runs per device under ``shard_map`` (``kernels.routing_attention``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core import plots
from core import sharding as sharding_lib
from core.checkpoint import Checkpointer
from core.config import BadInputError
from core.data import MissingInputError
from core.train import check_finite, progress, write_metrics
from forecasting import data as data_lib
from forecasting.phaseformer import losses
from forecasting.phaseformer import model as model_lib
from forecasting.phaseformer.configs import Config


def build_model(config: Config, key: jax.Array) -> nnx.Module:
    if config.model == "phaseformer":
        return model_lib.PhaseFormer(
            seq_len=config.seq_len, pred_len=config.pred_len, period=config.period, latent_dim=config.latent_dim,
            num_layers=config.num_layers, num_routers=config.num_routers, num_heads=config.num_heads,
            dropout=config.dropout, revin_eps=config.revin_eps, use_kernel=config.use_kernel,
            kernel_block=config.kernel_block, kernel_interpret=config.kernel_interpret, key=key)
    if config.model == "sparsetsf":
        return model_lib.SparseTSF(seq_len=config.seq_len, pred_len=config.pred_len, period=config.sparse_period,
                                   key=key)
    if config.model == "dlinear":
        return model_lib.DLinear(seq_len=config.seq_len, pred_len=config.pred_len, moving_avg=config.moving_avg,
                                 key=key)
    raise BadInputError(f"model={config.model!r}: expected 'phaseformer', 'sparsetsf' or 'dlinear'")


def lr_for_epoch(config: Config, epoch: int) -> float:
    """Learning rate of epoch ``epoch`` (0-based), as TSL's ``adjust_learning_rate`` sets it between epochs."""
    if config.lr_schedule == "constant":
        return config.lr
    if config.lr_schedule == "type1":
        return config.lr * 0.5 ** max(epoch - 1, 0)
    if config.lr_schedule == "type3":
        return config.lr * 0.8 ** max(epoch - 3, 0)
    raise BadInputError(f"lr_schedule={config.lr_schedule!r}: expected 'constant', 'type1' or 'type3'")


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Adam (PyTorch defaults) with the learning rate as an injected hyperparameter set per epoch."""
    return optax.inject_hyperparams(optax.adam)(learning_rate=config.lr)


def make_apply(graphdef) -> Callable:
    def apply(params, x, key=None):
        return nnx.merge(graphdef, params)(x, key)
    return apply


def make_loss_fn(config: Config, graphdef) -> Callable:
    """loss_fn(params, x (B, L, C), y (B, H, C), mask (B,), key) -> (loss, pred); padded windows excluded."""
    apply = make_apply(graphdef)

    def loss_fn(params, x, y, mask, key):
        pred = apply(params, x, key if config.dropout > 0 else None)
        return losses.masked_mean(losses.elementwise(config.loss, pred, y, config.huber_delta), mask), pred

    return loss_fn


def make_train_step(config: Config, graphdef, tx) -> Callable:
    """step(params, opt_state, x, y, mask, key) -> (params, opt_state, loss): one Adam step (pure, un-jitted)."""
    loss_fn = make_loss_fn(config, graphdef)

    def step(params, opt_state, x, y, mask, key):
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y, mask, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def make_data_mesh(config: Config) -> jax.sharding.Mesh | None:
    """The ("data", "model") mesh that splits every batch over all devices; None on one device or when disabled."""
    n = jax.device_count()
    if not config.data_parallel or n == 1:
        return None
    if config.batch_size % n:  # (evaluation batches are rounded up to a multiple and masked)
        raise BadInputError(f"batch_size={config.batch_size}: data parallelism over {n} devices needs a multiple of "
                            f"{n} "
                            "(or data_parallel=false)")
    return sharding_lib.make_mesh()


def _batch_constraint(mesh: jax.sharding.Mesh | None) -> Callable:
    """Inside jit: split a batch's leading axis over the mesh's data axis (identity without a mesh)."""
    if mesh is None:
        return lambda *xs: xs
    sharding = sharding_lib.batch_sharding(mesh)
    return lambda *xs: tuple(jax.lax.with_sharding_constraint(x, sharding) for x in xs)


def make_epoch_fn(config: Config, graphdef, tx, num_windows: int, mesh: jax.sharding.Mesh | None = None
                  ) -> Callable:
    """Jitted epoch(params, opt_state, series (T, C), key, lr) -> (params, opt_state, mean batch loss); with a mesh
    every batch is split over its data axis and the parameters come out replicated."""
    step = make_train_step(config, graphdef, tx)
    split = _batch_constraint(mesh)
    bsz = config.batch_size
    num_batches = num_windows // bsz if config.train_drop_last else -(-num_windows // bsz)
    if num_batches < 1:
        raise BadInputError(f"{num_windows} training windows: fewer than batch_size={bsz} with train_drop_last")

    def epoch(params, opt_state, series, key, lr):
        k_perm, k_drop = jax.random.split(key)
        perm = jax.random.permutation(k_perm, num_windows)
        starts, mask = data_lib.batch_starts(num_windows, bsz, perm)
        starts, mask = starts[:num_batches], mask[:num_batches]
        opt_state.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)

        def body(carry, inp):
            params, opt_state = carry
            s, m, i = inp
            x, y, m = split(*data_lib.windows(series, s, config.seq_len, config.pred_len), m)
            params, opt_state, loss = step(params, opt_state, x, y, m, jax.random.fold_in(k_drop, i))
            return (params, opt_state), loss

        (params, opt_state), batch_losses = jax.lax.scan(
            body, (params, opt_state), (starts, mask, jnp.arange(num_batches)))
        return params, opt_state, batch_losses.mean()

    shardings = {} if mesh is None else {"out_shardings": sharding_lib.replicated(mesh)}
    return jax.jit(epoch, donate_argnums=(0, 1), **shardings)


def make_eval_fn(config: Config, graphdef, num_windows: int, mesh: jax.sharding.Mesh | None = None, *,
                 per_window: bool = False) -> Callable:
    """Jitted evaluate(params, series) -> {loss, mse, mae} over every window (window-weighted means); with
    ``per_window`` also ``window_mse`` and ``window_mae`` ``(num_windows,)``, in window order."""
    apply = make_apply(graphdef)
    batch = min(config.eval_batch_size, num_windows)
    if mesh is not None:  # a multiple of the devices; the padded windows are masked out
        batch = -(-batch // mesh.shape[sharding_lib.DATA]) * mesh.shape[sharding_lib.DATA]
    starts_np, mask_np = data_lib.batch_starts(num_windows, batch)
    split = _batch_constraint(mesh)

    def evaluate(params, series):
        def body(acc, inp):
            s, m = inp
            x, y, m = split(*data_lib.windows(series, s, config.seq_len, config.pred_len), m)
            pred = apply(params, x)
            sums = losses.window_sums(pred, y, m, config.loss, config.huber_delta)
            return jax.tree.map(jnp.add, acc, sums), (losses.window_errors(pred, y) if per_window else None)

        zero = {k: jnp.zeros((), jnp.float32) for k in ("loss", "mse", "mae", "count")}
        acc, errors = jax.lax.scan(body, zero, (jnp.asarray(starts_np), jnp.asarray(mask_np)))
        out = {k: acc[k] / acc["count"] for k in ("loss", "mse", "mae")}
        if per_window:
            out["window_mse"], out["window_mae"] = (e.reshape(-1)[:num_windows] for e in errors)
        return out

    return jax.jit(evaluate)


def load_data(config: Config) -> data_lib.ForecastData:
    """The config's dataset; a missing file of a large-dataset preset says how to pass the user's copy."""
    try:
        return data_lib.load(config.dataset, config.seq_len, config.pred_len, split=config.split)
    except MissingInputError as err:
        if not config.num_channels:
            raise
        raise MissingInputError(f"{err}; the {config.setting} preset reads your copy of the file "
                                f"({config.num_channels} variables, Time-Series-Library layout): "
                                f"--set dataset=/path/to/{pathlib.Path(config.dataset).name}") from None


def epoch_test_row(test: dict, batch_size: int) -> dict:
    """Per-epoch test metrics for metrics.jsonl: window-weighted MSE / MAE over every test window (our protocol) and
    the released scripts' printed form, the mean of per-batch means at the training batch size."""
    window_mse, window_mae = np.asarray(test["window_mse"]), np.asarray(test["window_mae"])
    return {"test_mse": float(test["mse"]), "test_mae": float(test["mae"]),
            "test_mse_batch_mean": losses.mean_of_batch_means(window_mse, batch_size),
            "test_mae_batch_mean": losses.mean_of_batch_means(window_mae, batch_size)}


def count_macs(graphdef, params, seq_len: int, channels: int) -> int | None:
    """Multiply-accumulates of one forward pass on one window (all channels): XLA's flop estimate / 2."""
    x = jnp.zeros((1, seq_len, channels), jnp.float32)
    try:
        cost = jax.jit(make_apply(graphdef)).lower(params, x).cost_analysis()  # HLO estimate, no compile
    except Exception:  # noqa: BLE001 - cost analysis is backend-dependent and only informative
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    flops = (cost or {}).get("flops")
    return None if flops is None else int(round(flops / 2))


@dataclasses.dataclass
class TrainResult:
    params: Any
    graphdef: Any
    history: list[dict]
    metrics: dict[str, Any]
    data: data_lib.ForecastData


def train(config: Config, *, data: data_lib.ForecastData | None = None, show_progress: bool = True,
          log: Callable[[dict], None] | None = None, checkpoint_dir: str | pathlib.Path | None = None) -> TrainResult:
    """Train with early stopping on the validation loss, then evaluate val and test with the chosen weights.

    With ``checkpoint_dir``, each epoch is checkpointed there and a run that finds a checkpoint resumes from it
    (``log`` then first sees the restored epochs' rows again, so a log file rewritten from it is complete).
    """
    mesh = make_data_mesh(config)
    # the mesh as context: the fused routing kernel reads it to run per device (shard_map)
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        return _train(config, mesh, data=data, show_progress=show_progress, log=log, checkpoint_dir=checkpoint_dir)


def _train(config: Config, mesh: jax.sharding.Mesh | None, *, data, show_progress, log, checkpoint_dir
           ) -> TrainResult:
    start = time.perf_counter()
    if data is None:
        data = load_data(config)
    if config.num_channels and data.num_channels != config.num_channels:
        raise BadInputError(f"{config.dataset}: {data.num_channels} variables; the {config.setting} preset expects "
                            f"{config.num_channels} (num_channels={config.num_channels}; 0 accepts any)")
    n_train = data.num_windows("train")
    if config.max_train_windows:
        n_train = min(n_train, config.max_train_windows)
    key = jax.random.key(config.seed)
    k_init, k_train = jax.random.split(key)
    model = build_model(config, k_init)
    graphdef, params = nnx.split(model, nnx.Param)
    num_params = sum(int(p.size) for p in jax.tree.leaves(params))
    tx = make_optimizer(config)
    opt_state = tx.init(params)
    # on a mesh: parameters, optimizer state and the (small) series replicated, every batch split over "data"
    put = (lambda tree: sharding_lib.replicate(tree, mesh)) if mesh is not None else jnp.asarray
    params, opt_state = (params, opt_state) if mesh is None else put((params, opt_state))
    epoch_fn = make_epoch_fn(config, graphdef, tx, n_train, mesh)
    eval_val = make_eval_fn(config, graphdef, data.num_windows("val"), mesh)
    # with epoch_test the test evaluation also returns per-window errors (for the released scripts' batch means)
    eval_test = (eval_val if data.num_windows("test") == data.num_windows("val") and not config.epoch_test
                 else make_eval_fn(config, graphdef, data.num_windows("test"), mesh, per_window=config.epoch_test))
    train_series, val_series, test_series = put(data.train), put(data.val), put(data.test)

    # early-stopping state; with the parameters and Adam state it is all a resumed run needs
    progress_state = {"best_val": math.inf, "best_epoch": -1, "bad_epochs": 0, "stopped": False,
                      "seconds_before": 0.0, "history": []}
    best_params = params
    checkpointer = None if checkpoint_dir is None else Checkpointer(checkpoint_dir, keep=1, config=config)
    first_epoch = (checkpointer.latest_step() or 0) if checkpointer else 0
    if first_epoch:
        template = {"params": params, "opt_state": opt_state, "best_params": params}
        restored, progress_state = checkpointer.restore(template)
        params, opt_state, best_params = restored["params"], restored["opt_state"], restored["best_params"]
    history: list[dict] = progress_state["history"]  # the same list: appended rows are saved with the state
    if log is not None:
        for row in history:
            log(row)
    epochs = range(first_epoch, first_epoch if progress_state["stopped"] else config.epochs)
    bar = progress(epochs, total=config.epochs, initial=first_epoch, desc=f"{config.model} {config.setting}") \
        if show_progress else epochs
    for epoch in bar:
        t0 = time.perf_counter()
        lr = lr_for_epoch(config, epoch)
        params, opt_state, train_loss = epoch_fn(params, opt_state, train_series, jax.random.fold_in(k_train, epoch),
                                                 lr)
        val = eval_val(params, val_series)
        # before anything is recorded or checkpointed: losses and the parameter norm, fetched together (issue #49)
        check_finite({"train_loss": train_loss, "val_loss": val["loss"]}, params, first=epoch + 1, last=epoch + 1,
                     checkpointer=checkpointer, unit="epoch")
        row = {"epoch": epoch + 1, "lr": lr, "train_loss": float(train_loss), "val_loss": float(val["loss"]),
               "val_mse": float(val["mse"]), "seconds": time.perf_counter() - t0}
        if config.epoch_test:  # reported only: nothing below reads it (selection and stopping use val_loss)
            t_test = time.perf_counter()
            row.update(epoch_test_row(eval_test(params, test_series), config.batch_size))
            row["test_seconds"] = time.perf_counter() - t_test
        history.append(row)
        if log is not None:
            log(row)
        if row["val_loss"] < progress_state["best_val"]:
            progress_state.update(best_val=row["val_loss"], best_epoch=epoch + 1, bad_epochs=0)
            best_params = jax.tree.map(jnp.copy, params)
        else:
            progress_state["bad_epochs"] += 1
            progress_state["stopped"] = progress_state["bad_epochs"] >= config.patience
        if checkpointer is not None:
            checkpointer.save(epoch + 1, {"params": params, "opt_state": opt_state, "best_params": best_params},
                              data_state={**progress_state, "seconds_before": progress_state["seconds_before"]
                                          + time.perf_counter() - start})
        if progress_state["stopped"]:
            break
    if checkpointer is not None:
        checkpointer.close()
    final = best_params if config.weights == "best" else params
    train_seconds = progress_state["seconds_before"] + time.perf_counter() - start
    val = eval_val(final, val_series)
    test = eval_test(final, test_series)
    metrics = {
        "model": config.model, "dataset": config.dataset, "horizon": config.pred_len, "seed": config.seed,
        "mse": float(test["mse"]), "mae": float(test["mae"]), "val_mse": float(val["mse"]),
        "val_loss": float(val["loss"]), "params": num_params, "epochs_run": len(history),
        "best_epoch": progress_state["best_epoch"], "weights": config.weights, "train_windows": n_train,
        "test_windows": data.num_windows("test"), "train_seconds": train_seconds, "resumed_at_epoch": first_epoch,
        "total_seconds": progress_state["seconds_before"] + time.perf_counter() - start,
    }
    if config.weights == "best":
        # the other checkpoint convention (the Lightning code tests the last epoch's weights), reported beside, never
        # used to choose anything
        test_last = eval_test(params, test_series)
        metrics.update(mse_last=float(test_last["mse"]), mae_last=float(test_last["mae"]))
    return TrainResult(params=final, graphdef=graphdef, history=history, metrics=metrics, data=data)


def plot_forecast(path: pathlib.Path, result: TrainResult, config: Config, window: int | None = None) -> None:
    """Input history, truth and forecast of one test window, last variable (OT for ETT), in file units."""
    data = result.data
    n = data.num_windows("test")
    window = n // 2 if window is None else window
    x, y = data_lib.windows(jnp.asarray(data.test), jnp.asarray([window]), config.seq_len, config.pred_len)
    pred = make_apply(result.graphdef)(result.params, x)
    ch = data.num_channels - 1
    to_units = lambda v: np.asarray(v[0, :, ch]) * data.std[ch] + data.mean[ch]  # noqa: E731
    hist = min(config.seq_len, 4 * config.pred_len)
    t_in = np.arange(-hist, 0)
    t_out = np.arange(config.pred_len)
    plots.line_plot(path, {"history": (t_in, to_units(x)[-hist:]), "truth": (t_out, to_units(y)),
                           "forecast": (t_out, to_units(pred))},
                    title=f"{config.model} {config.setting}, test window {window}, {data.columns[ch]}",
                    xlabel="step from forecast start", ylabel=data.columns[ch])


def train_and_evaluate(config: Config, workdir: str | pathlib.Path) -> dict[str, Any]:
    """The experiment entry point: train, evaluate, write metrics.json, metrics.jsonl and PNG plots; the run resumes
    from ``workdir/checkpoints`` if an earlier one with the same config was killed (the CLI records config.json)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "metrics.jsonl"
    log_path.write_text("")

    def log(row):
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")

    result = train(config, log=log, checkpoint_dir=workdir / "checkpoints")
    metrics = dict(result.metrics)
    metrics["macs"] = count_macs(result.graphdef, result.params, config.seq_len, result.data.num_channels)
    if config.plot:
        plot_forecast(workdir / "forecast.png", result, config)
        epochs = [h["epoch"] for h in result.history]
        plots.line_plot(workdir / "loss.png",
                        {"train": (epochs, [h["train_loss"] for h in result.history]),
                         "val": (epochs, [h["val_loss"] for h in result.history])},
                        title=f"{config.model} {config.setting} ({config.loss} loss)", xlabel="epoch", ylabel="loss")
    write_metrics(workdir, metrics)
    return metrics
