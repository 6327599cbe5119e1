"""Training criteria and evaluation metrics (pure functions of predictions, targets and a window mask)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def huber(pred: jax.Array, target: jax.Array, delta: float = 1.0) -> jax.Array:
    """Elementwise Huber loss (PyTorch ``HuberLoss``): 0.5 e^2 if |e| <= delta, else delta (|e| - 0.5 delta)."""
    err = jnp.abs(pred - target)
    return jnp.where(err <= delta, 0.5 * err**2, delta * (err - 0.5 * delta))


def elementwise(kind: str, pred: jax.Array, target: jax.Array, delta: float = 1.0) -> jax.Array:
    if kind == "huber":
        return huber(pred, target, delta)
    if kind == "mse":
        return (pred - target) ** 2
    raise ValueError(f"loss={kind!r}: expected 'huber' or 'mse'")


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``values (B, ...)`` over the windows whose ``mask (B,)`` is 1 (padded windows excluded)."""
    per_window = values.reshape(values.shape[0], -1).mean(axis=1)
    return (per_window * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def window_sums(pred: jax.Array, target: jax.Array, mask: jax.Array, kind: str, delta: float) -> dict:
    """Sums over valid windows of the per-window mean loss, squared error and absolute error, and the count."""
    def s(v):
        return (v.reshape(v.shape[0], -1).mean(axis=1) * mask).sum()
    return {"loss": s(elementwise(kind, pred, target, delta)), "mse": s((pred - target) ** 2),
            "mae": s(jnp.abs(pred - target)), "count": mask.sum()}


def window_errors(pred: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-window mean squared and absolute error, each ``(B,)``, over the window's H x C values."""
    err = (pred - target).reshape(pred.shape[0], -1)
    return (err**2).mean(axis=1), jnp.abs(err).mean(axis=1)


def mean_of_batch_means(per_window: np.ndarray, batch_size: int) -> float:
    """The released scripts' printed test metric: the mean over test batches (in order, the last one partial) of each
    batch's mean; it differs from the window-weighted mean only through the last partial batch."""
    per_window = np.asarray(per_window, np.float64)
    means = [per_window[i:i + batch_size].mean() for i in range(0, len(per_window), batch_size)]
    return float(np.mean(means))
