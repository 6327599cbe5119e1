"""Objectives: GAN (non-saturating), VAE ELBO, MADE likelihood, DDPM noise prediction, attribution
cross-entropy (the attack objectives live in `attacks.py`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax


def gan_losses(d_real: jax.Array, d_fake: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Non-saturating GAN: L_D = softplus(-D(x)) + softplus(D(G(z))), L_G = softplus(-D(G(z)))."""
    d_loss = jnp.mean(jax.nn.softplus(-d_real)) + jnp.mean(jax.nn.softplus(d_fake))
    g_loss = jnp.mean(jax.nn.softplus(-d_fake))
    return d_loss, g_loss


def vae_loss(logits: jax.Array, x: jax.Array, mu: jax.Array, logvar: jax.Array) -> jax.Array:
    """Negative ELBO per image (nats): Bernoulli reconstruction of x in [0, 1] + KL(q(z|x) || N(0, I))."""
    rec = optax.sigmoid_binary_cross_entropy(logits, x).sum(axis=(1, 2, 3))
    kl = 0.5 * jnp.sum(jnp.exp(logvar) + mu**2 - 1.0 - logvar, axis=-1)
    return jnp.mean(rec + kl)


def bernoulli_nll(logits: jax.Array, x: jax.Array) -> jax.Array:
    """Mean over images of -log p(x) summed over pixels (the MADE loss)."""
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, x).sum(axis=-1))


def cosine_alpha_bar(timesteps: int, s: float = 0.008) -> np.ndarray:
    """Cumulative signal fraction alpha_bar_t, t = 1..T, of the cosine schedule (Nichol & Dhariwal 2021)."""
    t = np.arange(timesteps + 1) / timesteps
    f = np.cos((t + s) / (1 + s) * np.pi / 2) ** 2
    ab = f / f[0]
    betas = np.clip(1 - ab[1:] / ab[:-1], 0.0, 0.999)
    return np.cumprod(1 - betas).astype(np.float32)


def ddpm_loss(eps_pred: jax.Array, eps: jax.Array) -> jax.Array:
    """Simple DDPM loss: E ||eps - eps_theta(x_t, t)||^2 (per pixel mean)."""
    return jnp.mean((eps_pred - eps) ** 2)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))
