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
import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from core.config import check

SURROGATES = ("sigmoid", "atan")
ORDERS = ("spikingjelly", "snntorch")
UNROLL_MAX = 16  # scans over at most this many steps are unrolled


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
             return_membrane: bool = False, custom_vjp: bool = True) -> jax.Array | tuple[jax.Array, jax.Array]:
    """Run a LIF neuron over time. x: (T, ...) input currents -> spikes (T, ...) (and membrane H (T, ...)).

    `decay` overrides 1/tau (a traced scalar for the parametric LIF). The state starts at zero (V = V_reset
    for a hard reset) for every call. With `custom_vjp` (the default) the SpikingJelly order runs as one
    `jax.custom_vjp`: the forward scan keeps only H, and a reverse scan computes the surrogate gradient
    (the gradients equal differentiating the plain scan, tested); the snnTorch order always runs the plain scan.
    """
    if x.ndim < 1:
        raise ValueError(f"x of shape {x.shape}: expected a time-major sequence (T, ...)")
    k = jnp.asarray(1.0 / config.tau if decay is None else decay, x.dtype)
    if custom_vjp and config.order == "spikingjelly":
        spikes, membrane = _lif_sj(config, decay is not None, x, k)
    else:
        spikes, membrane = lif_scan_autodiff(x, config, k)
    return (spikes, membrane) if return_membrane else spikes


def lif_scan_autodiff(x: jax.Array, config: LIFConfig, k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The plain `lax.scan` of the neuron, differentiated by JAX: (T, ...) -> (spikes, membrane), k = 1/tau."""
    c = config
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
    return spikes, membrane


# The SpikingJelly-order neuron as one custom VJP (SpikingJelly's multi-step LIF backward does the same: the
# forward keeps H[t], the backward runs in reverse with dL/dV[t] as its carry):
#   dL/dH[t] = dL/dS[t] σ'(H[t]) + dL/dV[t] dV[t]/dH[t] (+ dL/dH[t] from the membrane output)
#   hard reset: dV/dH = 1 - S + (V_reset - H) σ'   soft: dV/dH = 1 - V_th σ'   (the σ' term only without detach)
#   dL/dX[t] = dL/dH[t] k (decay_input) or dL/dH[t];   dL/dV[t-1] = dL/dH[t] (1 - k)
#   dL/dk = Σ dL/dH[t] (X[t] - (V[t-1] - V_reset)) (decay_input) or Σ -dL/dH[t] (V[t-1] - V_reset)


def _unroll(length) -> int:
    """Unroll short scans fully (XLA then fuses the steps); a symbolic length (shape-polymorphic export) stays 1."""
    return length if isinstance(length, int) and length <= UNROLL_MAX else 1


def _sj_consts(c: LIFConfig, dtype):
    hard = c.v_reset is not None
    return hard, jnp.asarray(c.v_reset if hard else 0.0, dtype), jnp.asarray(c.v_threshold, dtype)


def _sj_forward_scan(c: LIFConfig, x: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
    hard, v_reset, v_th = _sj_consts(c, x.dtype)

    def step(v, xt):
        h = v + (xt - (v - v_reset)) * k if c.decay_input else v - (v - v_reset) * k + xt
        s = (h >= v_th).astype(x.dtype)
        return (jnp.where(s > 0, v_reset, h) if hard else h - v_th * s), (s, h)

    _, (spikes, membrane) = jax.lax.scan(step, jnp.full(x.shape[1:], v_reset, x.dtype), x, unroll=_unroll(x.shape[0]))
    return spikes, membrane


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _lif_sj(c: LIFConfig, learn_decay: bool, x: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(spikes, membrane H) of the SpikingJelly-order neuron; `learn_decay`: k gets a gradient."""
    return _sj_forward_scan(c, x, k)


def _lif_sj_fwd(c, learn_decay, x, k):
    spikes, membrane = _sj_forward_scan(c, x, k)
    return (spikes, membrane), (membrane, x if learn_decay else None, k)


def _lif_sj_bwd(c, learn_decay, res, cotangents):
    membrane, x, k = res
    g_s, g_h_out = cotangents
    hard, v_reset, v_th = _sj_consts(c, membrane.dtype)
    one = jnp.ones((), membrane.dtype)
    # V[t-1] for every t (the carry of the forward), needed only for the gradient of a learned decay
    if learn_decay:
        s_all = (membrane >= v_th).astype(membrane.dtype)
        v_after = jnp.where(s_all > 0, v_reset, membrane) if hard else membrane - v_th * s_all
        v_prev = jnp.concatenate([jnp.full((1, *membrane.shape[1:]), v_reset, membrane.dtype), v_after[:-1]])

    def step(g_v, inputs):
        h, gs, gh = inputs
        sg = surrogate_grad(h - v_th, c.surrogate, c.alpha)
        s = (h >= v_th).astype(h.dtype)
        if hard:
            dv_dh = (one - s) if c.detach_reset else (one - s) + (v_reset - h) * sg
        else:
            dv_dh = one if c.detach_reset else one - v_th * sg
        g_h = gs * sg + g_v * dv_dh + gh
        return g_h * (one - k), g_h

    g_v0 = jnp.zeros(membrane.shape[1:], membrane.dtype)
    _, g_h = jax.lax.scan(step, g_v0, (membrane, g_s, g_h_out), reverse=True, unroll=_unroll(membrane.shape[0]))
    g_x = g_h * k if c.decay_input else g_h
    if learn_decay:
        dh_dk = (x - (v_prev - v_reset)) if c.decay_input else -(v_prev - v_reset)
        g_k = jnp.sum(g_h * dh_dk).astype(k.dtype)
    else:
        g_k = jnp.zeros_like(k)
    return g_x, g_k


_lif_sj.defvjp(_lif_sj_fwd, _lif_sj_bwd)


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


def _pool_windows(x: jax.Array, size: int) -> jax.Array:
    n, h, w, c = x.shape
    if h % size or w % size:
        raise ValueError(f"x of shape {x.shape}: expected H and W divisible by the pool size {size}")
    return x.reshape(n, h // size, size, w // size, size, c)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def max_pool(x: jax.Array, size: int = 2) -> jax.Array:
    """Non-overlapping max pool (N, H, W, C) -> (N, H/size, W/size, C), window = stride = `size`, no padding.

    The same values and gradient as `nnx.max_pool(x, (size, size), strides=(size, size))`: the gradient goes to
    the first maximum of each window in row-major order (XLA's select-and-scatter, torch's max_pool2d), which
    matters for spikes, where ties are the rule. The backward is one elementwise pass instead of XLA:CPU's
    select-and-scatter (the slowest op of the spiking CNN's step before).
    """
    return _pool_windows(x, size).max(axis=(2, 4))


def _max_pool_fwd(x, size):
    y = max_pool(x, size)
    return y, (x, y)


def _max_pool_bwd(size, res, g):
    x, y = res
    xw = _pool_windows(x, size)
    pos = (jnp.arange(size)[:, None, None] * size + jnp.arange(size)[None, None, :]).reshape(1, 1, size, 1, size, 1)
    first = jnp.min(jnp.where(xw == y[:, :, None, :, None, :], pos, size * size), axis=(2, 4), keepdims=True)
    gx = jnp.where(pos == first, g[:, :, None, :, None, :], jnp.zeros((), g.dtype))
    return (gx.reshape(x.shape),)


max_pool.defvjp(_max_pool_fwd, _max_pool_bwd)


def conv_im2col(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """A stride-1 "SAME" convolution (N, H, W, Cin) * (kh, kw, Cin, Cout) as shifted slices and one matmul.

    For few input channels (an image stem) this beats XLA:CPU's convolution several times, forward and
    backward; for wide inputs the patches cost more than they save, so `SpikingConv` uses it only there.
    """
    kh, kw, cin, cout = kernel.shape
    n, h, w, _ = x.shape
    pad = ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0))
    xp = jnp.pad(x, pad)
    patches = jnp.concatenate([xp[:, i:i + h, j:j + w, :] for i in range(kh) for j in range(kw)], axis=-1)
    return (patches.reshape(-1, kh * kw * cin) @ kernel.reshape(-1, cout)).reshape(n, h, w, cout)


IM2COL_MAX_CIN = 3  # SpikingConv runs a stride-1 conv with at most this many input channels as conv_im2col


class BatchNormThroughTime(nnx.Module):
    """Batch norm over (T, B, ..., C) with statistics shared by all steps and samples (SpikingJelly's
    multi-step BN, `SeqToANNContainer(BatchNorm2d)`)."""

    def __init__(self, num_features: int, *, momentum: float = 0.9, rngs: nnx.Rngs):
        self.bn = nnx.BatchNorm(num_features, momentum=momentum, rngs=rngs)

    def __call__(self, x: jax.Array, *, train: bool) -> jax.Array:
        if not train:
            return self.bn(x, use_running_average=True)
        bn = self.bn
        y, mean, var = batch_norm_train(x, bn.scale[...], bn.bias[...], bn.epsilon)
        # the running averages as nnx.BatchNorm keeps them (biased batch variance, no gradient)
        bn.mean[...] = jax.lax.stop_gradient(bn.momentum * bn.mean[...] + (1 - bn.momentum) * mean)
        bn.var[...] = jax.lax.stop_gradient(bn.momentum * bn.var[...] + (1 - bn.momentum) * var)
        return y


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def batch_norm_train(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Training-mode batch norm over every axis but the last, in one fused forward and backward.

    (..., C) -> (y, batch mean (C,), biased batch variance (C,)); the values of `nnx.BatchNorm` (its fast
    variance E[x²] - E[x]²). The backward is the closed form dx = scale rstd (g - mean(g) - x̂ mean(g x̂)), two
    passes over x instead of autodiff's chain through the statistics; mean and variance get no gradient (they
    only feed the running averages, under stop_gradient).
    """
    return _bn_forward(x, scale, bias, eps)[:3]


def _bn_forward(x, scale, bias, eps):
    axes = tuple(range(x.ndim - 1))
    mean = jnp.mean(x, axes)
    var = jnp.maximum(0.0, jnp.mean(x * x, axes) - mean * mean)
    rstd = jax.lax.rsqrt(var + eps)
    return (x - mean) * (rstd * scale) + bias, mean, var, rstd


def _bn_fwd(x, scale, bias, eps):
    y, mean, var, rstd = _bn_forward(x, scale, bias, eps)
    return (y, mean, var), (x, mean, rstd, scale)


def _bn_bwd(eps, res, cotangents):
    x, mean, rstd, scale = res
    g = cotangents[0]
    axes = tuple(range(x.ndim - 1))
    xhat = (x - mean) * rstd
    g_bias = jnp.sum(g, axes)
    g_scale = jnp.sum(g * xhat, axes)
    n = x.size // x.shape[-1]
    g_x = (scale * rstd) * (g - (g_bias + xhat * g_scale) / n)
    return g_x, g_scale, g_bias


batch_norm_train.defvjp(_bn_fwd, _bn_bwd)


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
        conv = self.conv
        if conv.in_features <= IM2COL_MAX_CIN and conv.strides in (1, (1, 1)):
            y = conv_im2col(merge_time(x), conv.kernel[...])
        else:
            y = conv(merge_time(x))
        return self.lif(self.bn(split_time(y, t), train=train))


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
