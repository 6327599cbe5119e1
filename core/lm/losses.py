"""Next-token cross-entropy with a loss mask, over packed or padded rows."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from core.lm import model as model_lib


def next_token_loss(graphdef: nnx.GraphDef) -> Callable:
    """loss_fn(params, batch, key) -> (loss, metrics) for core.train.make_train_step.

    batch: inputs, targets, loss_mask (B, T); segment_ids (B, T) (0 = padding) keeps packed examples apart.
    The loss is the mean cross-entropy over tokens with loss_mask > 0.
    """

    def loss_fn(params, batch, key):
        del key  # deterministic forward (no dropout)
        seg = batch["segment_ids"]
        out = model_lib.apply(graphdef, params, batch["inputs"], segment_ids=seg, attention_mask=seg > 0)
        ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, batch["targets"])
        w = batch["loss_mask"].astype(jnp.float32)
        denom = jnp.maximum(w.sum(), 1.0)
        correct = (jnp.argmax(out.logits, -1) == batch["targets"]).astype(jnp.float32)
        return (ce * w).sum() / denom, {"token_acc": (correct * w).sum() / denom}

    return loss_fn


def answer_metrics(logits: jax.Array, targets: jax.Array, loss_mask: jax.Array) -> dict[str, jax.Array]:
    """Teacher-forced answer accuracy: per-token and whole-answer exact match (rows with any answer token)."""
    w = loss_mask > 0
    correct = (jnp.argmax(logits, -1) == targets) | ~w
    has = w.any(axis=1)
    token_acc = ((jnp.argmax(logits, -1) == targets) & w).sum() / jnp.maximum(w.sum(), 1)
    exact = (correct.all(axis=1) & has).sum() / jnp.maximum(has.sum(), 1)
    return {"token_acc": token_acc, "exact_match": exact}
