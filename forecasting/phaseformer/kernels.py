"""The cross-phase routing attention (both stages) as one fused Pallas kernel, beside its pure-JAX reference.

For the small-D configurations (D = 4..8, R = 4..8 routers, P = 24 phases) the routing layer is thousands of tiny
matmuls per batch; XLA runs each as its own small op. The kernel keeps the weights as scalars and every
intermediate in registers, and puts the series axis N on the lane (last) axis. Inputs are planes: z as
``(D, P_pad, N)`` (P padded to a power of two; padded phases get zero attention), so one grid step loads ``D``
tiles of ``(P_pad, block_n)`` and computes, for its series,

    B  = MHA(Q = U, K = Z, V = Z)       (routers aggregate, softmax over the P phases)
    Z' = MHA(Q = Z, K = B, V = B)       (routers distribute, softmax over the R routers)

as scalar-times-tile products and reductions (no 3-D dots: with head width D / h <= 8 there is nothing for a
matrix unit to do). It writes Z' (before the residual / LayerNorm, which stay in XLA). The router queries
``q1 = (U Wq + bq) / sqrt(dh)`` depend on weights alone and are computed outside. Gradients come through
``jax.custom_vjp``: the backward pass is a second Pallas kernel whose body is the VJP of the same block function;
each grid step writes its series' dZ and its partial weight gradients, which are summed outside.

Every operation is one the Pallas Triton lowering supports (power-of-two blocks, elementwise ops, broadcasts,
single-axis reductions, scalar loads), so the same kernel runs in interpret mode on the CPU and compiled through
Triton on an NVIDIA GPU; ``tests`` check the lowering on the CPU with :func:`core.pallas.lowers_for_cuda`. On an
H200 (2026-11-30), Triton's compile of the D = 8 forward had not finished after ~150 s: the Python-unrolled block
(every (head, router, channel) product its own op) is too large a program there, so the kernel is untimed on GPU.
Attention dropout (PyTorch's MHA dropout on the attention weights) enters both paths as precomputed
multiplicative masks, so the kernel needs no in-kernel RNG and both paths see the same randomness.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from core import pallas as core_pallas

# (wq, bq, wk, bk, wv, bv, wo, bo): w* (D, D) applied as x @ w, b* (D,)
MHAWeights = tuple


def _mix32(x: jax.Array) -> jax.Array:
    """A bijective 32-bit integer mixer (the 'lowbias32' constants): xor-shift, multiply, xor-shift, multiply."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def keep_mask(key: jax.Array, shape: tuple[int, ...], rate: float) -> jax.Array:
    """Boolean dropout keep-mask with P(keep) = round((1 - rate) 2^16) / 2^16 (0.9 -> 0.89999390).

    Dropout's masks are most of the random numbers a PhaseFormer step draws (millions per step at batch 256), and
    XLA:CPU makes threefry bits at ~8 ns per word, a third of a CPU step. So the key gives only two words (a, b);
    the mask's words are a counter hash, mix(mix(i + a) ^ b), ~1 ns per word, each split into two 16-bit draws.
    """
    size = math.prod(shape)
    a, b = jax.random.bits(key, (2,), jnp.uint32)
    words = _mix32(_mix32(jax.lax.iota(jnp.uint32, -(-size // 2)) + a) ^ b)
    draws = jnp.concatenate([words & 0xFFFF, words >> 16])[:size].reshape(shape)
    return draws < jnp.uint32(round((1.0 - rate) * 65536))


def attention_dropout_masks(key: jax.Array, n: int, num_heads: int, num_routers: int, period: int, rate: float):
    """Multiplicative dropout masks for the two attention maps: (N, h, R, P) and (N, h, P, R), kept / (1 - rate)."""
    k1, k2 = jax.random.split(key)
    scale = 1.0 / (1.0 - rate)
    m1 = keep_mask(k1, (n, num_heads, num_routers, period), rate).astype(jnp.float32) * scale
    m2 = keep_mask(k2, (n, num_heads, period, num_routers), rate).astype(jnp.float32) * scale
    return m1, m2


def _mha_reference(q_in, kv_in, w: MHAWeights, num_heads: int, mask):
    """q_in (N, Q, D), kv_in (N, S, D), mask (N, h, Q, S) or None -> (N, Q, D)."""
    wq, bq, wk, bk, wv, bv, wo, bo = w
    n, nq, d = q_in.shape
    ns = kv_in.shape[1]
    dh = d // num_heads
    q = (q_in @ wq + bq).reshape(n, nq, num_heads, dh)
    k = (kv_in @ wk + bk).reshape(n, ns, num_heads, dh)
    v = (kv_in @ wv + bv).reshape(n, ns, num_heads, dh)
    a = jax.nn.softmax(jnp.einsum("nqhe,nshe->nhqs", q, k) / math.sqrt(dh), axis=-1)
    if mask is not None:
        a = a * mask
    o = jnp.einsum("nhqs,nshe->nqhe", a, v).reshape(n, nq, d)
    return o @ wo + bo


def routing_attention_reference(z: jax.Array, routers: jax.Array, send: MHAWeights, receive: MHAWeights,
                                masks=None, *, num_heads: int) -> jax.Array:
    """Pure-JAX routing: z (N, P, D), routers (R, D) -> Z' (N, P, D) (before residual and LayerNorm)."""
    m1, m2 = masks if masks is not None else (None, None)
    u = jnp.broadcast_to(routers, (z.shape[0],) + routers.shape)
    buffer = _mha_reference(u, z, send, num_heads, m1)
    return _mha_reference(z, buffer, receive, num_heads, m2)


def _project(tiles, w, b):
    """tiles: D inputs (each a tile or a lane vector); w (D, D) and b (D,) nested lists of scalars -> D outputs."""
    d = len(tiles)
    return [sum(tiles[i] * w[i][j] for i in range(d)) + b[j] for j in range(d)]


def route_planes(z, q1, send, receive, m1, m2, *, num_heads: int, num_phases: int):
    """The kernel's block function (written independently of the reference: other layout, other order).

    z: D tiles (P_pad, n); q1: R x D scalars (scaled router queries); send: (wk, bk, wv, bv, wo, bo) and receive:
    (wq, bq, wk, bk, wv, bv, wo, bo) as nested lists of scalars; m1, m2: None or h x R tiles (P_pad, n), the
    dropout masks of the aggregate and distribute maps. Rows >= num_phases of z are padding. Returns D tiles.
    """
    d, r, h = len(z), len(q1), num_heads
    dh = d // h
    scale = 1.0 / math.sqrt(dh)
    heads = [range(i * dh, (i + 1) * dh) for i in range(h)]
    valid = jax.lax.broadcasted_iota(jnp.int32, z[0].shape, 0) < num_phases
    wk, bk, wv, bv, wo, bo = send
    k1, v1 = _project(z, wk, bk), _project(z, wv, bv)
    # stage 1: each router attends over the phases of each series
    buf = [[None] * d for _ in range(r)]
    for hi, cols in enumerate(heads):
        for ri in range(r):
            s = sum(k1[c] * q1[ri][c] for c in cols)
            s = jnp.where(valid, s, -jnp.inf)
            e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, axis=0, keepdims=True)))
            a = e / jnp.sum(e, axis=0, keepdims=True)
            if m1 is not None:
                a = a * m1[hi][ri]
            for c in cols:
                buf[ri][c] = jnp.sum(a * v1[c], axis=0, keepdims=True)  # (1, n)
    buf = [_project(row, wo, bo) for row in buf]
    wq, bq, wk, bk, wv, bv, wo, bo = receive
    q2 = [t * scale for t in _project(z, wq, bq)]
    k2 = [_project(row, wk, bk) for row in buf]
    v2 = [_project(row, wv, bv) for row in buf]
    # stage 2: each phase attends over the routers
    out = [None] * d
    for hi, cols in enumerate(heads):
        s = [sum(q2[c] * k2[ri][c] for c in cols) for ri in range(r)]
        top = jax.lax.stop_gradient(functools.reduce(jnp.maximum, s))
        e = [jnp.exp(si - top) for si in s]
        total = sum(e)
        a = [ei / total for ei in e]
        if m2 is not None:
            a = [ai * m2[hi][ri] for ri, ai in enumerate(a)]
        for c in cols:
            out[c] = sum(a[ri] * v2[ri][c] for ri in range(r))
    return _project(out, wo, bo)


def _scalars(ref):
    """A weight ref as nested lists of scalar loads (Triton loads a scalar per static index)."""
    if len(ref.shape) == 1:
        return [ref[i] for i in range(ref.shape[0])]
    return [[ref[i, j] for j in range(ref.shape[1])] for i in range(ref.shape[0])]


def _tiles(ref, *lead):
    """A planar ref (lead..., P_pad, n) as nested lists of (P_pad, n) tiles."""
    if not lead:
        return [ref[i] for i in range(ref.shape[0])]
    return [[ref[i, j] for j in range(ref.shape[1])] for i in range(ref.shape[0])]


def _plane_spec(shape, block_n):
    return pl.BlockSpec(tuple(shape[:-1]) + (block_n,), lambda i, _n=len(shape): (0,) * (_n - 1) + (i,))


def _full_spec(shape):
    return pl.BlockSpec(shape, lambda i, _n=len(shape): (0,) * _n)


def _call(kernel, inputs, in_specs, out_shape, out_specs, grid, interpret, num_warps):
    return pl.pallas_call(kernel, grid=(grid,), in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                          interpret=interpret,
                          compiler_params=None if interpret else core_pallas.gpu_compiler_params(num_warps))(*inputs)


def _unpack(refs, n_weights, has_mask):
    """refs = z, q1, 6 send + 8 receive weights, [m1, m2], ... -> (z tiles, q1, send, receive, m1, m2, rest)."""
    z = _tiles(refs[0])
    q1 = _scalars(refs[1])
    w = [_scalars(ref) for ref in refs[2:2 + n_weights]]
    pos = 2 + n_weights
    m1 = m2 = None
    if has_mask:
        m1, m2 = _tiles(refs[pos], 0), _tiles(refs[pos + 1], 0)
        pos += 2
    return z, q1, tuple(w[:6]), tuple(w[6:]), m1, m2, refs[pos:]


def _forward_call(z, q1, send, receive, masks, num_heads, num_phases, block_n, interpret, num_warps):
    d, _, n = z.shape
    weights = list(send) + list(receive)
    has_mask = masks is not None
    inputs = [z, q1, *weights] + (list(masks) if has_mask else [])
    in_specs = ([_plane_spec(z.shape, block_n), _full_spec(q1.shape)] + [_full_spec(w.shape) for w in weights]
                + ([_plane_spec(m.shape, block_n) for m in masks] if has_mask else []))

    def kernel(*refs):
        zt, q1s, sw, rw, m1, m2, (out_ref,) = _unpack(refs, len(weights), has_mask)
        out = route_planes(zt, q1s, sw, rw, m1, m2, num_heads=num_heads, num_phases=num_phases)
        for c in range(d):
            out_ref[c] = out[c]

    return _call(kernel, inputs, in_specs, jax.ShapeDtypeStruct(z.shape, z.dtype), _plane_spec(z.shape, block_n),
                 n // block_n, interpret, num_warps)


def _backward_call(z, q1, send, receive, masks, g, num_heads, num_phases, block_n, interpret, num_warps):
    d, _, n = z.shape
    grid = n // block_n
    weights = list(send) + list(receive)
    has_mask = masks is not None
    inputs = [z, q1, *weights] + (list(masks) if has_mask else []) + [g]
    in_specs = ([_plane_spec(z.shape, block_n), _full_spec(q1.shape)] + [_full_spec(w.shape) for w in weights]
                + ([_plane_spec(m.shape, block_n) for m in masks] if has_mask else [])
                + [_plane_spec(g.shape, block_n)])
    partial_shapes = [q1.shape] + [w.shape for w in weights]  # per-grid-step partial gradients, summed outside
    out_shape = [jax.ShapeDtypeStruct(z.shape, z.dtype)] + [
        jax.ShapeDtypeStruct((grid,) + s, jnp.float32) for s in partial_shapes]
    out_specs = [_plane_spec(z.shape, block_n)] + [
        pl.BlockSpec((None,) + s, lambda i, _n=len(s): (i,) + (0,) * _n) for s in partial_shapes]

    def kernel(*refs):
        zt, q1s, sw, rw, m1, m2, rest = _unpack(refs, len(weights), has_mask)
        g_tiles = _tiles(rest[0])
        outs = rest[1:]

        def f(z_, q1_, sw_, rw_):
            return route_planes(z_, q1_, sw_, rw_, m1, m2, num_heads=num_heads, num_phases=num_phases)

        _, vjp = jax.vjp(f, zt, q1s, sw, rw)
        dz, dq1, dsw, drw = vjp(g_tiles)
        for c in range(d):
            outs[0][c] = dz[c]
        for ref, grad in zip(outs[1:], [dq1] + list(dsw) + list(drw)):
            if len(ref.shape) == 1:
                for i, val in enumerate(grad):
                    ref[i] = val
            else:
                for i, row in enumerate(grad):
                    for j, val in enumerate(row):
                        ref[i, j] = val

    res = _call(kernel, inputs, in_specs, out_shape, out_specs, grid, interpret, num_warps)
    dz, partials = res[0], [x.sum(axis=0) for x in res[1:]]
    nw = len(send)
    return dz, partials[0], tuple(partials[1:1 + nw]), tuple(partials[1 + nw:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9))
def _routing_planes(z, q1, send, receive, masks, num_heads, num_phases, block_n, interpret, num_warps):
    return _forward_call(z, q1, send, receive, masks, num_heads, num_phases, block_n, interpret, num_warps)


def _routing_planes_fwd(z, q1, send, receive, masks, num_heads, num_phases, block_n, interpret, num_warps):
    out = _forward_call(z, q1, send, receive, masks, num_heads, num_phases, block_n, interpret, num_warps)
    return out, (z, q1, send, receive, masks)


def _routing_planes_bwd(num_heads, num_phases, block_n, interpret, num_warps, res, g):
    z, q1, send, receive, masks = res
    dz, dq1, dsend, dreceive = _backward_call(z, q1, send, receive, masks, g, num_heads, num_phases, block_n,
                                              interpret, num_warps)
    dmasks = None if masks is None else tuple(jnp.zeros_like(m) for m in masks)
    return dz, dq1, dsend, dreceive, dmasks


_routing_planes.defvjp(_routing_planes_fwd, _routing_planes_bwd)


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def routing_attention(z: jax.Array, routers: jax.Array, send: MHAWeights, receive: MHAWeights, masks=None, *,
                      num_heads: int, block_n: int = 32, interpret: bool | None = None,
                      num_warps: int | None = None) -> jax.Array:
    """Fused Pallas routing: same contract as :func:`routing_attention_reference` (z (N, P, D) -> (N, P, D)).

    N is padded to a multiple of ``block_n`` and P to a power of two (padded series and phases are zeros and are
    sliced off; their cotangent is zero, so they add nothing to the weight gradients). ``interpret`` None picks
    interpret mode on the CPU; compiled (Triton) calls need D, R and ``block_n`` to be powers of two.
    """
    n, p, d = z.shape
    r = routers.shape[0]
    if d % num_heads:
        raise ValueError(f"latent dim {d}: expected a multiple of num_heads={num_heads}")
    if block_n < 1:
        raise ValueError(f"block_n={block_n}: expected a positive integer")
    if interpret is None:
        interpret = core_pallas.default_interpret()
    if not interpret:
        for name, value in (("latent dim", d), ("routers", r), ("block_n", block_n)):
            if value != _pow2(value):
                raise ValueError(f"{name}={value}: the compiled (Triton) kernel needs a power of two")
    wq, bq = send[0], send[1]
    q1 = (routers @ wq + bq) / math.sqrt(d // num_heads)
    p_pad, n_pad = _pow2(p), -n % block_n
    zt = jnp.pad(z.transpose(2, 1, 0), ((0, 0), (0, p_pad - p), (0, n_pad)))  # (D, P_pad, N_pad)
    mt = None
    if masks is not None:
        m1, m2 = masks  # (N, h, R, P), (N, h, P, R) -> (h, R, P_pad, N_pad) each
        pad = ((0, 0), (0, 0), (0, p_pad - p), (0, n_pad))
        mt = (jnp.pad(m1.transpose(1, 2, 3, 0), pad), jnp.pad(m2.transpose(1, 3, 2, 0), pad))
    send_kv = tuple(send[2:])  # the send queries are folded into q1
    out = _routing_planes(zt, q1, send_kv, tuple(receive), mt, num_heads, p, block_n, interpret, num_warps)
    return out[:, :p, :n].transpose(2, 1, 0)
