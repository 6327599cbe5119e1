"""Spiking neurons as `lax.scan` recurrences with surrogate gradients, and the spiking conv / SEW blocks.

Everything here is time-major: a sequence is an array (T, B, ...). The membrane state starts at zero for
every call (the scan's carry), so no state leaks between samples or batches (SpikingJelly's `reset_net`
is unnecessary by construction).

Neuron semantics (SpikingJelly `LIFNode`, the default, `order="spikingjelly"`):

    charge  H[t] = V[t-1] + (X[t] - (V[t-1] - V_reset)) / tau          (decay_input=True)
            H[t] = V[t-1] - (V[t-1] - V_reset) / tau + X[t]            (decay_input=False)
            (soft reset, V_reset=None: the same with V_reset = 0)
    fire    S[t] = Θ(H[t] - V_th)                                       (Θ(0) = 1)
    reset   V[t] = H[t] (1 - S[t]) + V_reset S[t]                       (hard)
            V[t] = H[t] - V_th S[t]                                     (soft)

snnTorch's `Leaky` ordering (`order="snntorch"`, beta = 1 - 1/tau): the reset of step t uses the spike of
step t-1, and the input is not decayed:

    U[t] = beta U[t-1] + X[t] - V_th S[t-1]         (soft, "subtract")
    U[t] = (beta U[t-1] + X[t]) (1 - S[t-1])        (hard, "zero")
    S[t] = Θ(U[t] - V_th)

The Heaviside's backward pass is a surrogate (`jax.custom_vjp`): sigmoid α σ(αx)(1 - σ(αx)) or
atan (α/2) / (1 + (π α x / 2)²).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from core.config import check

SURROGATES = ("sigmoid", "atan")
ORDERS = ("spikingjelly", "snntorch")


# ---------------------------------------------------------------- surrogate spike functions


def surrogate_grad(x: jax.Array, surrogate: str, alpha: float) -> jax.Array:
    """dS/dx of the surrogate, in closed form (used by the backward pass)."""
    if surrogate == "sigmoid":
        # σ(αx)(1 - σ(αx)) written as σ(αx)σ(-αx): no cancellation in 1 - σ for large αx (float32)
        return alpha * jax.nn.sigmoid(alpha * x) * jax.nn.sigmoid(-alpha * x)
    if surrogate == "atan":
        return (alpha / 2.0) / (1.0 + (math.pi / 2.0 * alpha * x) ** 2)
    raise ValueError(f"surrogate={surrogate!r}: expected one of {SURROGATES}")


def _heaviside_with_surrogate(surrogate: str):
    """Θ(x) whose backward pass is `surrogate_grad(x, surrogate, alpha)`; `alpha` gets no gradient."""

    @jax.custom_vjp
    def heaviside(x, alpha):
        return (x >= 0).astype(x.dtype)

    def forward(x, alpha):
        return heaviside(x, alpha), (x, alpha)

    def backward(res, g):
        x, alpha = res
        return g * surrogate_grad(x, surrogate, alpha), jnp.zeros_like(alpha)

    heaviside.defvjp(forward, backward)
    return heaviside


_SPIKE_FNS = {name: _heaviside_with_surrogate(name) for name in SURROGATES}


def spike(x: jax.Array, surrogate: str = "sigmoid", alpha: float = 4.0) -> jax.Array:
    """Θ(x) forward (1 where x >= 0), surrogate gradient backward. `alpha` is a constant (no gradient)."""
    if surrogate not in _SPIKE_FNS:
        raise ValueError(f"surrogate={surrogate!r}: expected one of {SURROGATES}")
    return _SPIKE_FNS[surrogate](x, jnp.asarray(alpha, x.dtype))


# ---------------------------------------------------------------- the neuron recurrence


@dataclasses.dataclass(frozen=True, kw_only=True)
class LIFConfig:
    """LIF neuron settings; defaults are SpikingJelly's `LIFNode` with the Sigmoid surrogate."""

    tau: float = 2.0  # membrane time constant (decay 1/tau per step)
    v_threshold: float = 1.0  # firing threshold
    v_reset: float | None = 0.0  # None: soft reset (subtract the threshold)
    decay_input: bool = True  # the input is scaled by 1/tau too (SpikingJelly's decay_input)
    surrogate: Literal["sigmoid", "atan"] = "sigmoid"  # surrogate gradient of the spike step
    alpha: float = 4.0  # surrogate sharpness
    detach_reset: bool = False  # no gradient through the reset
    # update order of charge, fire and reset (SpikingJelly's or snnTorch's)
    order: Literal["spikingjelly", "snntorch"] = "spikingjelly"
    parametric: bool = False  # PLIF: 1/tau = sigmoid(w) learned per layer, w initialised from tau

    def __post_init__(self):
        check(self.tau > 1.0, "lif.tau", self.tau, "a number > 1 (the decay 1/tau must lie in (0, 1))")
        check(self.v_threshold > 0, "lif.v_threshold", self.v_threshold, "a number > 0")
        check(self.v_reset is None or self.v_reset < self.v_threshold, "lif.v_reset", self.v_reset,
              f"None (soft reset) or a number below lif.v_threshold={self.v_threshold}")
        check(self.surrogate in SURROGATES, "lif.surrogate", self.surrogate, f"one of {SURROGATES}")
        check(self.alpha > 0, "lif.alpha", self.alpha, "a number > 0")
        check(self.order in ORDERS, "lif.order", self.order, f"one of {ORDERS}")


def lif_scan(x: jax.Array, config: LIFConfig = LIFConfig(), *, decay: jax.typing.ArrayLike | None = None,
             return_membrane: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Run a LIF neuron over time. x: (T, ...) input currents -> spikes (T, ...) (and membrane V (T, ...)).

    `decay` overrides 1/tau (a traced scalar for the parametric LIF). The state starts at zero (V = V_reset
    for a hard reset) for every call.
    """
    if x.ndim < 1:
        raise ValueError(f"x of shape {x.shape}: expected a time-major sequence (T, ...)")
    c = config
    k = jnp.asarray(1.0 / c.tau if decay is None else decay, x.dtype)
    hard = c.v_reset is not None
    v_reset = jnp.asarray(c.v_reset if hard else 0.0, x.dtype)
    v_th = jnp.asarray(c.v_threshold, x.dtype)

    def detach(s):
        return jax.lax.stop_gradient(s) if c.detach_reset else s

    if c.order == "spikingjelly":
        def step(v, xt):
            if c.decay_input:
                h = v + (xt - (v - v_reset)) * k
            else:
                h = v - (v - v_reset) * k + xt
            s = spike(h - v_th, c.surrogate, c.alpha)
            sd = detach(s)
            v_new = h * (1.0 - sd) + v_reset * sd if hard else h - v_th * sd
            return v_new, (s, h)

        v0 = jnp.full(x.shape[1:], v_reset, x.dtype)
        _, (spikes, membrane) = jax.lax.scan(step, v0, x)
    else:  # snntorch: reset from the previous step's spike, beta = 1 - 1/tau, input not decayed
        beta = 1.0 - k

        def step(carry, xt):
            u, s_prev = carry
            sd = detach(s_prev)
            u = (beta * u + xt) * (1.0 - sd) + v_reset * sd if hard else beta * u + xt - v_th * sd
            s = spike(u - v_th, c.surrogate, c.alpha)
            return (u, s), (s, u)

        zeros = jnp.zeros(x.shape[1:], x.dtype)
        _, (spikes, membrane) = jax.lax.scan(step, (zeros, zeros), x)
    return (spikes, membrane) if return_membrane else spikes


class LIF(nnx.Module):
    """A (parametric) LIF layer over time-major input (T, B, ...)."""

    def __init__(self, config: LIFConfig = LIFConfig()):
        self.config = config
        if config.parametric:  # SpikingJelly's PLIF: sigmoid(w) = 1/tau at initialisation
            self.w = nnx.Param(jnp.asarray(-math.log(config.tau - 1.0), jnp.float32))

    def decay(self) -> jax.Array | None:
        return jax.nn.sigmoid(self.w[...]) if self.config.parametric else None

    def __call__(self, x: jax.Array) -> jax.Array:
        return lif_scan(x, self.config, decay=self.decay())


# ---------------------------------------------------------------- layers over time


def merge_time(x: jax.Array) -> jax.Array:
    """(T, B, ...) -> (T*B, ...): run a stateless layer on every step at once."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def split_time(x: jax.Array, t: int) -> jax.Array:
    return x.reshape(t, x.shape[0] // t, *x.shape[1:])


class BatchNormThroughTime(nnx.Module):
    """Batch norm over (T, B, ..., C) with statistics shared by all steps and samples (SpikingJelly's
    multi-step BN, `SeqToANNContainer(BatchNorm2d)`)."""

    def __init__(self, num_features: int, *, momentum: float = 0.9, rngs: nnx.Rngs):
        self.bn = nnx.BatchNorm(num_features, momentum=momentum, rngs=rngs)

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        t = x.shape[0]
        return split_time(self.bn(merge_time(x), use_running_average=not train), t)


class SpikingConv(nnx.Module):
    """conv (no bias) -> BN through time -> LIF, on (T, B, H, W, C) -> spikes (T, B, H', W', C')."""

    def __init__(self, cin: int, cout: int, *, kernel: int = 3, stride: int = 1, lif: LIFConfig = LIFConfig(),
                 rngs: nnx.Rngs):
        self.conv = nnx.Conv(cin, cout, (kernel, kernel), strides=stride, padding="SAME", use_bias=False,
                             rngs=rngs)
        self.bn = BatchNormThroughTime(cout, rngs=rngs)
        self.lif = LIF(lif)

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        t = x.shape[0]
        return self.lif(self.bn(split_time(self.conv(merge_time(x)), t), train=train))


class SEWBlock(nnx.Module):
    """SEW-ResNet basic block (Fang et al. 2021): two spiking convs, output = g(S_out, S_identity).

    `connect` is "ADD" (the SEW default; spikes may reach 2), "AND" or "IAND". When the stride or width
    changes, the identity path is a 1x1 spiking conv.
    """

    def __init__(self, cin: int, cout: int, *, stride: int = 1, connect: str = "ADD",
                 lif: LIFConfig = LIFConfig(), rngs: nnx.Rngs):
        if connect not in ("ADD", "AND", "IAND"):
            raise ValueError(f"connect={connect!r}: expected 'ADD', 'AND' or 'IAND'")
        self.connect = connect
        self.conv1 = SpikingConv(cin, cout, stride=stride, lif=lif, rngs=rngs)
        self.conv2 = SpikingConv(cout, cout, lif=lif, rngs=rngs)
        self.down = (SpikingConv(cin, cout, kernel=1, stride=stride, lif=lif, rngs=rngs)
                     if stride != 1 or cin != cout else None)

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        out = self.conv2(self.conv1(x, train=train), train=train)
        identity = x if self.down is None else self.down(x, train=train)
        if self.connect == "ADD":
            return out + identity
        if self.connect == "AND":
            return out * identity
        return identity * (1.0 - out)  # IAND: (not out) and identity
