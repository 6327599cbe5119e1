"""The end-to-end model: BIT encoder tokens -> projector -> a `core.lm` decoder read through `inputs_embeds`,
plus the two InfoNCE heads (paper 1, stage 3).

Parameters travel as plain dicts so `core.train` can train some and freeze others:
    params = {"encoder": ..., "bridge": ..., "lora": adapters}   (the encoder only when it is trained)
    frozen = {"lm": base LM weights, ["encoder": ...]}
`bridge` holds the projector (neural d -> LM width; "linear" as released, "mlp" Linear-ReLU-Linear as the
paper) and the InfoNCE heads (each a Linear from the LM width to the shared width, and the learned log logit
scale). The speech stage uses the same layout with an audio projector from the speech features.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.config import BadInputError
from core.lm import model as lm_model


class Projector(nnx.Module):
    """(B, P, d_in) -> (B, P, d_out): one Linear, or Linear -> ReLU -> Linear."""

    def __init__(self, d_in: int, d_out: int, kind: str, *, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(d_in, d_out, rngs=rngs)
        self.fc2 = nnx.Linear(d_out, d_out, rngs=rngs) if kind == "mlp" else None

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.fc1(x)
        return x if self.fc2 is None else self.fc2(jax.nn.relu(x))


class Bridge(nnx.Module):
    """The projector and the InfoNCE heads (neural and text Linear to `contrastive_dim`, log logit scale)."""

    def __init__(self, d_in: int, d_model: int, *, projector: str, contrastive_dim: int, temperature: float,
                 rngs: nnx.Rngs):
        self.projector = Projector(d_in, d_model, projector, rngs=rngs)
        self.neural_head = nnx.Linear(d_model, contrastive_dim, rngs=rngs)
        self.text_head = nnx.Linear(d_model, contrastive_dim, rngs=rngs)
        self.log_scale = nnx.Param(jnp.asarray(np.log(1.0 / temperature), jnp.float32))


class Sequences(NamedTuple):
    """A batch laid out for the LM: embeds (B, S, D), mask (B, S); the targets (B, T) start at `start`."""

    embeds: jax.Array
    mask: jax.Array
    start: int


def assemble(lm_graphdef: nnx.GraphDef, lm_params: nnx.State, prefix: jax.Array, prefix_mask: jax.Array,
             open_ids: np.ndarray, close_ids: np.ndarray, prompt: np.ndarray, targets: jax.Array | None = None,
             target_mask: jax.Array | None = None) -> Sequences:
    """`[open] prefix [close] prompt [targets]` as LM inputs. prefix (B, P, D) continuous tokens with their
    validity (B, P) (padded tokens are masked: positions follow the mask, so they are skipped); open / close /
    prompt are token-id vectors shared by the batch; targets (B, T) right-padded with `target_mask`."""
    B, P, D = prefix.shape
    if prefix_mask.shape != (B, P):
        raise BadInputError(f"prefix {prefix.shape} and prefix_mask {prefix_mask.shape}: expected (B, P, D) and (B, P)")
    head = np.asarray(open_ids, np.int32)
    tail = np.concatenate([close_ids, prompt]).astype(np.int32)
    emb = lambda ids: lm_model.embed(lm_graphdef, lm_params, jnp.broadcast_to(ids, (B, len(ids))))  # noqa: E731
    parts = [emb(head), prefix.astype(emb(head).dtype), emb(tail)]
    masks = [jnp.ones((B, len(head)), bool), prefix_mask.astype(bool), jnp.ones((B, len(tail)), bool)]
    start = len(head) + P + len(tail)
    if targets is not None:
        parts.append(lm_model.embed(lm_graphdef, lm_params, jnp.asarray(targets, jnp.int32)))
        masks.append(jnp.asarray(target_mask, bool))
    return Sequences(jnp.concatenate(parts, axis=1), jnp.concatenate(masks, axis=1), start)


def patch_mask(length: jax.Array, num_patches: int, patch: int) -> jax.Array:
    """(B, P) True for patches holding at least one real bin of a trial `length` bins long."""
    return jnp.arange(num_patches)[None] * patch < jnp.asarray(length)[:, None]


def pooled(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over the valid positions: (B, T, D), (B, T) -> (B, D)."""
    w = mask.astype(x.dtype)[..., None]
    return (x * w).sum(1) / jnp.maximum(w.sum(1), 1.0)


def info_nce(neural: jax.Array, text: jax.Array, log_scale: jax.Array, max_scale: float
             ) -> tuple[jax.Array, jax.Array]:
    """Symmetric InfoNCE of paired rows (B, c) each, L2-normalised here: the neural-to-text and text-to-neural
    cross-entropies, each a mean over the batch, summed (CLIP's loss without its 1/2). The logit scale is
    exp(log_scale) capped at `max_scale`. Returns (loss, neural-to-text retrieval accuracy in the batch)."""
    a = neural / jnp.maximum(jnp.linalg.norm(neural, axis=-1, keepdims=True), 1e-6)
    b = text / jnp.maximum(jnp.linalg.norm(text, axis=-1, keepdims=True), 1e-6)
    scale = jnp.minimum(jnp.exp(log_scale), max_scale)
    logits = scale * (a @ b.T).astype(jnp.float32)
    labels = jnp.arange(a.shape[0])
    n2t = -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=1), labels[:, None], axis=1).mean()
    t2n = -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=0), labels[None, :], axis=0).mean()
    return n2t + t2n, (logits.argmax(1) == labels).mean()
