"""Erf MLPs in standard parametrisation, written in prior-whitened coordinates.

Every weight is stored as a standard normal under the prior (theta ~ N(0, I)); the 1/sqrt(fan_in) factors of
the standard parametrisation sit in the forward pass:
  two layers:   f(x) = sum_i a_i erf(w_i.x / sqrt(d)) / sqrt(N1)
  three layers: h2 = erf(W1 x / sqrt(d)) W2^T / sqrt(N1),  f(x) = sum_j a_j erf(h2_j) / sqrt(N2)
This is the same posterior as Gaussian priors of variance 1/fan_in on the raw weights; the whitened
coordinates make the prior term of the Langevin force -theta and put every layer on one step-size scale.

The models are pure functions of a dict pytree rather than nnx modules: the sampler vmaps a scanned
Langevin chain over seeds, sample sizes and initialisations, which wants plain pytrees (STYLE, point 3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
from jax.scipy.special import erf

Params = dict[str, jax.Array]


def check_arch(arch: str, d: int, widths: Sequence[int]) -> None:
    if arch not in ("two", "three"):
        raise ValueError(f"arch={arch!r}: expected 'two' or 'three'")
    n_hidden = 1 if arch == "two" else 2
    if len(widths) != n_hidden:
        raise ValueError(f"widths={tuple(widths)!r}: expected {n_hidden} hidden width(s) for arch={arch!r}")
    if int(d) < 1:
        raise ValueError(f"d={d!r}: expected an input dimension >= 1")
    for i, n in enumerate(widths):
        if int(n) < 1:
            raise ValueError(f"widths[{i}]={n!r}: expected a width >= 1")


def init_params(key: jax.Array, arch: str, d: int, widths: Sequence[int]) -> Params:
    """A draw from the prior (all entries standard normal in the whitened coordinates)."""
    check_arch(arch, d, widths)
    ks = jax.random.split(key, 3)
    params = {"w1": jax.random.normal(ks[0], (widths[0], d))}
    if arch == "three":
        params["w2"] = jax.random.normal(ks[1], (widths[1], widths[0]))
    params["a"] = jax.random.normal(ks[2], (widths[-1],))
    return params


def hidden(params: Params, x: jax.Array) -> tuple[jax.Array, ...]:
    """Pre-activations of every hidden layer: (h1 (n, N1),) or (h1, h2 (n, N2))."""
    w1 = params["w1"]
    if x.shape[-1] != w1.shape[-1]:
        raise ValueError(f"x has {x.shape[-1]} features but the model's input dimension is d={w1.shape[-1]}")
    h1 = x @ w1.T / math.sqrt(w1.shape[-1])
    if "w2" not in params:
        return (h1,)
    w2 = params["w2"]
    h2 = erf(h1) @ w2.T / math.sqrt(w2.shape[-1])
    return h1, h2


def features(params: Params, x: jax.Array) -> jax.Array:
    """The last hidden layer's activations (n, N_L), the features the readout sees."""
    return erf(hidden(params, x)[-1])


def forward(params: Params, x: jax.Array) -> jax.Array:
    """Network output f(x) (n,)."""
    phi = features(params, x)
    return phi @ params["a"] / math.sqrt(phi.shape[-1])
