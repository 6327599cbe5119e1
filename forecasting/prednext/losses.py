"""Self-supervised objectives (SimCLR, MoCo v2, SimSiam, BYOL, BarlowTwins), PredNext's step and clip prediction,
the forced-consistency baseline, and the evaluation metrics (temporal consistency, collapse monitor).

Shapes: clip features (B, D); per-step features time-major (T, B, D).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

sg = jax.lax.stop_gradient


def normalize(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def cosine(a: jax.Array, b: jax.Array) -> jax.Array:
    """Cosine similarity along the last axis."""
    return jnp.sum(normalize(a) * normalize(b), axis=-1)


def neg_cos(p: jax.Array, target: jax.Array) -> jax.Array:
    """1 - cos(p, sg(target)), averaged: the notes' Q / M (negative cosine) shifted by 1 to be >= 0."""
    return jnp.mean(1.0 - cosine(p, sg(target)))


def simclr_loss(z1: jax.Array, z2: jax.Array, temperature: float) -> jax.Array:
    """NT-Xent (InfoNCE over the 2B views, in-batch negatives): z1, z2 (B, D)."""
    b = z1.shape[0]
    z = normalize(jnp.concatenate([z1, z2]))
    logits = z @ z.T / temperature
    logits = jnp.where(jnp.eye(2 * b, dtype=bool), -jnp.inf, logits)
    positive = jnp.concatenate([jnp.arange(b, 2 * b), jnp.arange(b)])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(logp[jnp.arange(2 * b), positive])


def moco_loss(q: jax.Array, k: jax.Array, queue: jax.Array, temperature: float) -> jax.Array:
    """MoCo v2's InfoNCE: queries q (B, D) against their keys k (B, D) (positives, from the momentum encoder,
    stop-gradient) and the queue (K, D) of past keys (negatives); logits [q.k, q.queue] / temperature on
    l2-normalised vectors, cross-entropy with the positive at index 0."""
    q, k, queue = normalize(q), sg(normalize(k)), sg(normalize(queue))
    logits = jnp.concatenate([jnp.sum(q * k, -1, keepdims=True), q @ queue.T], axis=1) / temperature
    return -jnp.mean(jax.nn.log_softmax(logits, axis=-1)[:, 0])


def enqueue(queue: jax.Array, ptr: jax.Array, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Ring buffer of MoCo: write l2-normalised keys (n, D) into queue (K, D) at ptr, ptr + 1, ... (mod K),
    replacing the oldest; returns (queue, (ptr + n) mod K). Needs n <= K."""
    k, n = queue.shape[0], keys.shape[0]
    if n > k:
        raise ValueError(f"{n} keys into a queue of {k}: expected at most the queue length")
    idx = (ptr + jnp.arange(n)) % k
    return queue.at[idx].set(sg(normalize(keys))), (ptr + n) % k


def simsiam_loss(p1: jax.Array, p2: jax.Array, z1: jax.Array, z2: jax.Array) -> jax.Array:
    """1/2 D(p1, sg z2) + 1/2 D(p2, sg z1) with D = 1 - cos (SimSiam; BYOL with target-network z)."""
    return 0.5 * neg_cos(p1, z2) + 0.5 * neg_cos(p2, z1)


def barlow_twins_loss(z1: jax.Array, z2: jax.Array, lam: float) -> jax.Array:
    """sum_i (1 - C_ii)^2 + lam sum_{i != j} C_ij^2, C the cross-correlation of batch-standardised z1, z2."""
    b = z1.shape[0]
    a = (z1 - z1.mean(0)) / (z1.std(0) + 1e-5)
    c = (z2 - z2.mean(0)) / (z2.std(0) + 1e-5)
    corr = a.T @ c / b
    on = jnp.sum((1.0 - jnp.diag(corr)) ** 2)
    off = jnp.sum(corr**2) - jnp.sum(jnp.diag(corr) ** 2)
    return on + lam * off


def step_prediction_loss(p: jax.Array, target: jax.Array, m: int) -> jax.Array:
    """Q averaged over t = 0..T-1-m: p (T, B, D) predicts sg(target[t + m]) (T, B, D)."""
    t = p.shape[0]
    if not 1 <= m < t:
        raise ValueError(f"step offset m={m}: expected 1 <= m < T={t}")
    return neg_cos(p[: t - m], target[m:])


def clip_prediction_loss(c: jax.Array, future: jax.Array) -> jax.Array:
    """M: the clip prediction c (B, D) predicts sg(future) (B, D), the future clip's time-averaged feature."""
    return neg_cos(c, future)


def forced_consistency_loss(z: jax.Array) -> jax.Array:
    """E_{i, t != s} [1 - cos(z_i^t, z_i^s)] on per-step features (T, B, D), gradients through both (no
    predictor, no stop-gradient): the baseline that forces features to agree over time."""
    return temporal_inconsistency(z)


def temporal_inconsistency(z: jax.Array) -> jax.Array:
    """E_consistency = 1/N 1/(T(T-1)) sum_i sum_{t != s} (1 - cos(z_i^t, z_i^s)); z (T, B, D). Lower is
    more consistent. (A step whose features are all zero counts as cos = 0.)"""
    t = z.shape[0]
    if t < 2:
        raise ValueError(f"z with T={t} steps: expected T >= 2")
    n = normalize(z)
    gram = jnp.einsum("tbd,sbd->bts", n, n)  # (B, T, T)
    off = jnp.sum(gram, axis=(1, 2)) - jnp.trace(gram, axis1=1, axis2=2)
    return jnp.mean(1.0 - off / (t * (t - 1)))


def step_to_clip_inconsistency(z: jax.Array) -> jax.Array:
    """mean_{i,t} 1 - cos(z_i^t, mean_s z_i^s): per-step features against the clip mean; z (T, B, D)."""
    return jnp.mean(1.0 - cosine(z, z.mean(0, keepdims=True)))


def feature_std(z: jax.Array) -> jax.Array:
    """Collapse monitor: mean over dimensions of the per-dimension std of l2-normalised features (B, D).
    About 1/sqrt(D) for well-spread features, 0 for a collapsed (constant) representation."""
    return jnp.mean(jnp.std(normalize(z), axis=0))
