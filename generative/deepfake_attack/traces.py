"""Random pseudo-generators (POSE-style "augmentation generators") whose fakes carry the traces real generators
leave, for the black-box attack's surrogate: the attack never sees a real generator's fake.

A pseudo-generator re-synthesises a real image through a generator-like decoder path: 2x down-sampling (the
image's content at the latent resolution) then one 2x up-sampling block of a family, with random kernels drawn
once per pseudo-generator:

- `transposed`: zero insertion + a 4x4 kernel (the bilinear kernel with random deviations): the four output
  phases get different gains, a checkerboard (spectral peaks at Nyquist) that scales with the image's content;
- `nearest`: pixel repetition + a random near-identity 3x3 conv: blocky, peaks at the half-resolution grid;
- `bilinear`: bilinear up-sampling + a random near-identity 3x3 conv: a smooth low-pass with a random tilt;
- `diffusion`: bilinear up-sampling (a latent decoder) + a content-scaled high-frequency residue (high-passed
  Gaussian noise, as a few-step diffusion decoder leaves).

Every trace is produced by the image's own content passing through the up-sampling path (multiplicative in the
frequency domain), not an overlay added to a real image. Fakes are 8-bit quantised, as saved images are.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError

from . import ops

FAMILIES = ("transposed", "nearest", "bilinear", "diffusion")
# sums to 4 (gain 1 after 2x zero insertion)
BILINEAR4 = np.outer([1, 3, 3, 1], [1, 3, 3, 1]).astype(np.float32) / 16.0 * 4.0


def build(k: int, strength: float, seed: int) -> dict[str, np.ndarray]:
    """Kernels of k pseudo-generators cycling through FAMILIES: {"k4": (k, 4, 4), "k3": (k, 3, 3), "family": (k,)}.

    strength scales the random deviations from the clean interpolation kernels (0 gives exact interpolation)."""
    if k < 1 or strength < 0:
        raise BadInputError(f"pseudo-generators k={k}, strength={strength}: expected k >= 1 and strength >= 0")
    rng = np.random.default_rng(seed)
    k4 = BILINEAR4[None] * (1.0 + strength * rng.normal(size=(k, 4, 4)))
    k4 = k4 / k4.sum(axis=(1, 2), keepdims=True) * 4.0  # keep the mean brightness
    ident = np.zeros((3, 3), np.float32)
    ident[1, 1] = 1.0
    k3 = ident[None] + strength / 3.0 * rng.normal(size=(k, 3, 3))
    k3 = k3 / k3.sum(axis=(1, 2), keepdims=True)
    return {"k4": k4.astype(np.float32), "k3": k3.astype(np.float32),
            "family": np.arange(k) % len(FAMILIES)}


def conv1(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """Single-channel 'SAME' 2-D correlation of (N, H, W, 1) with a (kh, kw) kernel."""
    return jax.lax.conv_general_dilated(x, kernel[:, :, None, None], (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def zero_insert(h: jax.Array) -> jax.Array:
    """(N, h, w, 1) -> (N, 2h, 2w, 1) with the values at even positions and zeros elsewhere."""
    n, a, b, c = h.shape
    z = jnp.zeros((n, a, 2, b, 2, c), h.dtype).at[:, :, 0, :, 0].set(h)
    return z.reshape(n, 2 * a, 2 * b, c)


def resynthesise(x: jax.Array, family: int, k4: jax.Array, k3: jax.Array, noise: jax.Array,
                 residue: float) -> jax.Array:
    """One pseudo-generator's fake of x (N, S, S, 1), before quantisation; `family` is a Python int."""
    h = ops.avg_pool2(x)
    size = x.shape[1]
    name = FAMILIES[family]
    if name == "transposed":
        return conv1(zero_insert(h), k4)
    if name == "nearest":
        return conv1(ops.resize(h, size, "nearest"), k3)
    y = conv1(ops.resize(h, size, "bilinear"), k3)
    if name == "bilinear":
        return y
    hf = noise - ops.gaussian_blur(noise, 1.0)
    return y + residue * hf * (0.25 + y)


def fakes(kernels: dict, x: jax.Array, which: jax.Array, key: jax.Array, residue: float = 0.15) -> jax.Array:
    """x re-synthesised by pseudo-generator which[i] (1..K), 8-bit, straight-through gradient."""
    noise = jax.random.normal(key, x.shape)
    k4, k3 = jnp.asarray(kernels["k4"]), jnp.asarray(kernels["k3"])
    outs = jnp.stack([resynthesise(x, int(f), k4[i], k3[i], noise, residue)
                      for i, f in enumerate(kernels["family"])])  # (K, N, S, S, 1)
    y = jnp.take_along_axis(outs, (which - 1)[None, :, None, None, None], axis=0)[0]
    y = jnp.clip(y, 0.0, 1.0)
    return ops.straight_through(y, ops.quantize8(y))
