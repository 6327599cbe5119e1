"""nnx modules: the generator zoo, the FID digit classifier, the attribution models, the attack U-Net and the
denoising autoencoder defence (the pseudo-generators are in `traces.py`).

Images are (N, S, S, 1) in [0, 1]; S is divisible by 4 (two 2x up-/down-sampling stages).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.compilation import jit_run_once

from . import ops

act = jax.nn.leaky_relu


class DCGANGenerator(nnx.Module):
    """z (N, latent) -> image. Two 2x up-sampling stages of one kind, the source of the generator's trace:
    `transposed` (4x4 stride-2 transposed convolutions: checkerboard), `nearest` or `bilinear` resize + 3x3 conv."""

    def __init__(self, latent: int, width: int, size: int, upsample: str, *, rngs: nnx.Rngs):
        if upsample not in ("transposed", "nearest", "bilinear"):
            raise ValueError(f"upsample={upsample!r}: expected 'transposed', 'nearest' or 'bilinear'")
        self.upsample, self.s0, self.width = upsample, size // 4, width
        self.fc = nnx.Linear(latent, self.s0 * self.s0 * 2 * width, rngs=rngs)
        if upsample == "transposed":
            self.up1 = nnx.ConvTranspose(2 * width, width, (4, 4), strides=(2, 2), rngs=rngs)
            self.up2 = nnx.ConvTranspose(width, 1, (4, 4), strides=(2, 2), rngs=rngs)
        else:
            self.up1 = nnx.Conv(2 * width, width, (3, 3), rngs=rngs)
            self.up2 = nnx.Conv(width, width, (3, 3), rngs=rngs)
            self.out = nnx.Conv(width, 1, (3, 3), rngs=rngs)

    def __call__(self, z: jax.Array) -> jax.Array:
        h = act(self.fc(z)).reshape(z.shape[0], self.s0, self.s0, 2 * self.width)
        if self.upsample == "transposed":
            return jax.nn.sigmoid(self.up2(act(self.up1(h))))
        for conv in (self.up1, self.up2):
            h = act(conv(ops.resize(h, 2 * h.shape[1], self.upsample)))
        return jax.nn.sigmoid(self.out(h))


class Discriminator(nnx.Module):
    """image -> logit (N,): two stride-2 4x4 convolutions and a linear head."""

    def __init__(self, width: int, size: int, *, rngs: nnx.Rngs):
        self.c1 = nnx.Conv(1, width, (4, 4), strides=(2, 2), rngs=rngs)
        self.c2 = nnx.Conv(width, 2 * width, (4, 4), strides=(2, 2), rngs=rngs)
        self.fc = nnx.Linear((size // 4) ** 2 * 2 * width, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = act(self.c2(act(self.c1(2 * x - 1))))
        return self.fc(h.reshape(x.shape[0], -1))[:, 0]


class ConvVAE(nnx.Module):
    """Convolutional VAE with a Bernoulli decoder; the decoder up-samples with 3x3 stride-2 transposed convs."""

    def __init__(self, latent: int, width: int, size: int, *, rngs: nnx.Rngs):
        self.s0, self.width, self.latent = size // 4, width, latent
        self.e1 = nnx.Conv(1, width, (3, 3), strides=(2, 2), rngs=rngs)
        self.e2 = nnx.Conv(width, 2 * width, (3, 3), strides=(2, 2), rngs=rngs)
        self.mu = nnx.Linear(self.s0 * self.s0 * 2 * width, latent, rngs=rngs)
        self.logvar = nnx.Linear(self.s0 * self.s0 * 2 * width, latent, rngs=rngs)
        self.fc = nnx.Linear(latent, self.s0 * self.s0 * 2 * width, rngs=rngs)
        self.d1 = nnx.ConvTranspose(2 * width, width, (3, 3), strides=(2, 2), rngs=rngs)
        self.d2 = nnx.ConvTranspose(width, 1, (3, 3), strides=(2, 2), rngs=rngs)

    def encode(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = act(self.e2(act(self.e1(x)))).reshape(x.shape[0], -1)
        return self.mu(h), self.logvar(h)

    def decode(self, z: jax.Array) -> jax.Array:
        """Bernoulli logits (N, S, S, 1)."""
        h = act(self.fc(z)).reshape(z.shape[0], self.s0, self.s0, 2 * self.width)
        return self.d2(act(self.d1(h)))


class MADE(nnx.Module):
    """MADE (Germain et al. 2015): a masked MLP giving p(x_d = 1 | x_<d) for binary vectors of length `dim`.

    One hidden layer with degrees 1..dim-1 assigned cyclically; the output for pixel d sees only pixels < d.
    """

    def __init__(self, dim: int, hidden: int, *, rngs: nnx.Rngs):
        self.dim, self.hidden = dim, hidden
        init = nnx.initializers.lecun_normal()
        self.w1 = nnx.Param(init(rngs.params(), (dim, hidden)))
        self.b1 = nnx.Param(jnp.zeros(hidden))
        self.w2 = nnx.Param(init(rngs.params(), (hidden, dim)))
        self.b2 = nnx.Param(jnp.zeros(dim))
        self.direct = nnx.Param(jnp.zeros((dim, dim)))

    def masks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d_in = np.arange(1, self.dim + 1)
        d_hid = np.arange(self.hidden) % max(self.dim - 1, 1) + 1
        m1 = (d_hid[None, :] >= d_in[:, None]).astype(np.float32)  # (dim, hidden)
        m2 = (d_in[None, :] > d_hid[:, None]).astype(np.float32)  # (hidden, dim)
        m3 = (d_in[None, :] > d_in[:, None]).astype(np.float32)  # (dim, dim) direct, strictly lower
        return m1, m2, m3

    def __call__(self, x: jax.Array) -> jax.Array:
        """x (N, dim) in {0, 1} -> logits (N, dim)."""
        m1, m2, m3 = self.masks()
        h = jax.nn.relu(x @ (self.w1[...] * m1) + self.b1[...])
        return h @ (self.w2[...] * m2) + self.b2[...] + x @ (self.direct[...] * m3)


def timestep_embedding(t: jax.Array, dim: int) -> jax.Array:
    """Sinusoidal embedding of integer timesteps (N,) -> (N, dim)."""
    half = dim // 2
    freqs = jnp.exp(-jnp.log(10000.0) * jnp.arange(half) / max(half - 1, 1))
    a = t.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], axis=-1)


class SmallUNet(nnx.Module):
    """One-level U-Net (conv, stride-2 down, mid, nearest up + conv, skip concat, conv out).

    With `time_dim` > 0 it is the DDPM noise predictor eps(x_t, t); without, it is the attack network f(x).
    """

    def __init__(self, width: int, *, time_dim: int = 0, rngs: nnx.Rngs):
        self.width, self.time_dim = width, time_dim
        self.c_in = nnx.Conv(1, width, (3, 3), rngs=rngs)
        self.down = nnx.Conv(width, 2 * width, (3, 3), strides=(2, 2), rngs=rngs)
        self.mid = nnx.Conv(2 * width, 2 * width, (3, 3), rngs=rngs)
        self.up = nnx.Conv(2 * width, width, (3, 3), rngs=rngs)
        self.c_cat = nnx.Conv(2 * width, width, (3, 3), rngs=rngs)
        self.c_out = nnx.Conv(width, 1, (3, 3), rngs=rngs,
                              kernel_init=nnx.initializers.normal(1e-2))
        if time_dim:
            self.t1 = nnx.Linear(time_dim, width, rngs=rngs)
            self.t2 = nnx.Linear(width, 2 * width, rngs=rngs)

    def __call__(self, x: jax.Array, t: jax.Array | None = None) -> jax.Array:
        h0 = act(self.c_in(x))
        if self.time_dim:
            temb = act(self.t1(timestep_embedding(t, self.time_dim)))
            h0 = h0 + temb[:, None, None, :]
        h1 = act(self.down(h0))
        h1 = act(self.mid(h1))
        if self.time_dim:
            h1 = h1 + self.t2(temb)[:, None, None, :]
        u = act(self.up(ops.resize(h1, x.shape[1], "nearest")))
        h = act(self.c_cat(jnp.concatenate([u, h0], axis=-1)))
        return self.c_out(h)


class ConvClassifier(nnx.Module):
    """Three 3x3 convs (two with stride 2), a hidden linear layer and a linear head: image-like (N, S, S, 1)
    -> logits. The FID digit classifier (features = hidden layer) and the pixel / residual attributors."""

    def __init__(self, width: int, size: int, classes: int, hidden: int = 64, *, rngs: nnx.Rngs):
        self.c1 = nnx.Conv(1, width, (3, 3), rngs=rngs)
        self.c2 = nnx.Conv(width, 2 * width, (3, 3), strides=(2, 2), rngs=rngs)
        self.c3 = nnx.Conv(2 * width, 2 * width, (3, 3), strides=(2, 2), rngs=rngs)
        self.fc = nnx.Linear((size // 4) ** 2 * 2 * width, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, classes, rngs=rngs)

    def features(self, x: jax.Array) -> jax.Array:
        h = act(self.c3(act(self.c2(act(self.c1(x))))))
        return act(self.fc(h.reshape(x.shape[0], -1)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(self.features(x))


class MLPClassifier(nnx.Module):
    """Two-hidden-layer MLP on a flat feature vector (the log-spectrum and block-DCT attributors).

    Each feature is standardised by fixed training-set statistics (`input_mean`, `input_std`: set by
    `train.set_input_stats` before training, never trained: they sit behind a stop-gradient, so Adam leaves
    them as set). Per-feature scaling, not per-image, keeps the overall energy that tells generators apart."""

    def __init__(self, in_dim: int, hidden: int, classes: int, *, rngs: nnx.Rngs):
        self.input_mean = nnx.Param(jnp.zeros(in_dim))
        self.input_std = nnx.Param(jnp.ones(in_dim))
        self.l1 = nnx.Linear(in_dim, hidden, rngs=rngs)
        self.l2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = (x - jax.lax.stop_gradient(self.input_mean[...])) / jax.lax.stop_gradient(self.input_std[...])
        return self.head(act(self.l2(act(self.l1(x)))))


class DenoisingAE(nnx.Module):
    """Small convolutional denoising autoencoder (purification defence), trained on real images only."""

    def __init__(self, width: int, *, rngs: nnx.Rngs):
        self.e1 = nnx.Conv(1, width, (3, 3), rngs=rngs)
        self.e2 = nnx.Conv(width, 2 * width, (3, 3), strides=(2, 2), rngs=rngs)
        self.d1 = nnx.Conv(2 * width, width, (3, 3), rngs=rngs)
        self.d2 = nnx.Conv(2 * width, 1, (3, 3), rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h0 = act(self.e1(x))
        h = act(self.e2(h0))
        u = act(self.d1(ops.resize(h, x.shape[1], "bilinear")))
        return jax.nn.sigmoid(self.d2(jnp.concatenate([u, h0], axis=-1)))


def split(module: nnx.Module):
    """(graphdef, params) of a freshly built module."""
    return nnx.split(module, nnx.Param)


def init(ctor, key: jax.Array):
    """(graphdef, params) of `ctor(rngs)`, initialised in ONE jitted program, compiled without optimisation.

    Building an nnx module eagerly dispatches (and compiles) every initialiser op one by one, which costs
    minutes on a loaded CPU; under jit it is one compile, and it runs once (`core.compilation.jit_run_once`)."""
    graphdef = split(nnx.eval_shape(lambda: ctor(nnx.Rngs(0))))[0]
    params = jit_run_once(lambda k: split(ctor(nnx.Rngs(params=k)))[1])(key)
    return graphdef, params


def apply(graphdef, params, *args, method: str | None = None, **kwargs):
    model = nnx.merge(graphdef, params)
    return (getattr(model, method) if method else model)(*args, **kwargs)
