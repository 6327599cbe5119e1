"""GAN objectives: non-saturating loss, R1, generator pose conditioning and BalanceHead's ViCiCo term.

ViCiCo ("view-image and condition-image consistency"): L = log(1 - D((I+, I, I^m), (r'_cam, c'_sem))) with
the real triple's camera and/or semantic condition shuffled within the batch, i.e. real images under
mismatched conditions are shown to D as fakes. In logit form the discriminator minimises softplus(D(.)).
Which condition is shuffled is drawn per example (camera, semantic or both, 1/3 each) — a reconstruction:
the paper says "and/or" without the probabilities.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def d_loss_ns(real_logits: jax.Array, fake_logits: jax.Array) -> jax.Array:
    """Non-saturating discriminator loss: E softplus(D(fake)) + E softplus(-D(real))."""
    return jnp.mean(jax.nn.softplus(fake_logits)) + jnp.mean(jax.nn.softplus(-real_logits))


def g_loss_ns(fake_logits: jax.Array) -> jax.Array:
    """Non-saturating generator loss: E softplus(-D(G(z)))."""
    return jnp.mean(jax.nn.softplus(-fake_logits))


def r1_penalty(d_fn, inputs) -> tuple[jax.Array, jax.Array]:
    """(logits, R1) where R1 = E_x ||grad_x D(x)||^2 over all of D's image inputs (a pytree of (B, ...) arrays).

    `d_fn(inputs) -> (B,)` logits; the per-example gradient is that of sum(D) since examples are independent.
    """
    logits, vjp = jax.vjp(d_fn, inputs)
    (grads,) = vjp(jnp.ones_like(logits))
    sq = sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, -1) for g in jax.tree.leaves(grads))
    return logits, jnp.mean(sq)


def shuffle_conditions(key: jax.Array, cam: jax.Array, sem: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Mismatched conditions for ViCiCo: per example, the camera, the semantic feature, or both are replaced by
    another example's (a cyclic shift by a random nonzero offset, so no example keeps its own).

    Returns (cam', sem', which) with which in {0: camera, 1: semantic, 2: both}.
    """
    b = cam.shape[0]
    if b < 2:
        raise ValueError(f"batch of {b}: ViCiCo needs at least 2 examples to shuffle conditions")
    k1, k2, k3 = jax.random.split(key, 3)
    s_cam = jax.random.randint(k1, (), 1, b)
    s_sem = jax.random.randint(k2, (), 1, b)
    which = jax.random.randint(k3, (b,), 0, 3)
    cam_sh = jnp.where((which != 1)[:, None], jnp.roll(cam, s_cam, 0), cam)
    sem_sh = jnp.where((which != 0)[:, None], jnp.roll(sem, s_sem, 0), sem)
    return cam_sh, sem_sh, which


def vicico_loss(mismatched_logits: jax.Array) -> jax.Array:
    """E -log(1 - sigmoid(D(real, shuffled condition))) = E softplus(D(.)): mismatched pairs count as fake."""
    return jnp.mean(jax.nn.softplus(mismatched_logits))


def gpc_swap(key: jax.Array, cam: jax.Array, other: jax.Array, prob: jax.Array | float) -> jax.Array:
    """Generator pose conditioning: each example's conditioning camera is replaced by `other` with prob `prob`."""
    swap = jax.random.bernoulli(key, prob, (cam.shape[0],))
    return jnp.where(swap[:, None], other, cam)
