"""The cross-phase routing attention (both stages) as one fused Pallas kernel, beside its pure-JAX reference.

For the small-D configurations (D = 4..8, R = 8 routers, P = 24 phases) the routing layer is thousands of tiny
matmuls per batch; XLA runs each as its own small op. The kernel keeps every weight resident and puts the series
axis N on the lane (last) axis: one grid step processes ``block_n`` series for both stages

    B  = MHA(Q = U, K = Z, V = Z)       (routers aggregate, softmax over the P phases)
    Z' = MHA(Q = Z, K = B, V = B)       (routers distribute, softmax over the R routers)

and writes Z' (before the residual / LayerNorm, which stay in XLA). Gradients come through ``jax.custom_vjp``:
the backward pass is a second Pallas kernel whose body is the VJP of the same lane-major block function; each
grid step writes its series' dZ and its partial weight gradients, which are summed outside.

Attention dropout (PyTorch's MHA dropout on the attention weights) enters both paths as precomputed
multiplicative masks, so the kernel needs no in-kernel RNG and both paths see the same randomness.

Tested in interpret mode on CPU (forward and gradients against :func:`routing_attention_reference`). GPU / TPU
compilation and timing were not measured in this session.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

# (wq, bq, wk, bk, wv, bv, wo, bo): w* (D, D) applied as x @ w, b* (D,)
MHAWeights = tuple


def attention_dropout_masks(key: jax.Array, n: int, num_heads: int, num_routers: int, period: int, rate: float):
    """Multiplicative dropout masks for the two attention maps: (N, h, R, P) and (N, h, P, R), kept / (1 - rate)."""
    k1, k2 = jax.random.split(key)
    scale = 1.0 / (1.0 - rate)
    m1 = jax.random.bernoulli(k1, 1.0 - rate, (n, num_heads, num_routers, period)).astype(jnp.float32) * scale
    m2 = jax.random.bernoulli(k2, 1.0 - rate, (n, num_heads, period, num_routers)).astype(jnp.float32) * scale
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


def _proj_lanes(x, w, b):
    """x (S, D, n) -> x @ w + b on the D axis, lanes untouched."""
    return jnp.einsum("sdn,de->sen", x, w) + b[None, :, None]


def route_lanes(z, u, send, receive, m1, m2, num_heads: int):
    """The kernel's block function in lane-major layout: z (P, D, n), u (R, D), masks (h, R, P, n) and
    (h, P, R, n) or None -> Z' (P, D, n). Written independently of the reference (other layout, other order)."""
    p, d, n = z.shape
    r = u.shape[0]
    dh = d // num_heads
    scale = 1.0 / math.sqrt(dh)
    wq, bq, wk, bk, wv, bv, wo, bo = send
    q1 = ((u @ wq + bq) * scale).reshape(r, num_heads, dh)  # shared by every series
    k1 = _proj_lanes(z, wk, bk).reshape(p, num_heads, dh, n)
    v1 = _proj_lanes(z, wv, bv).reshape(p, num_heads, dh, n)
    s1 = jnp.einsum("rhe,phen->hrpn", q1, k1)
    a1 = jnp.exp(s1 - s1.max(axis=2, keepdims=True))
    a1 = a1 / a1.sum(axis=2, keepdims=True)  # softmax over phases
    if m1 is not None:
        a1 = a1 * m1
    buf = jnp.einsum("hrpn,phen->rhen", a1, v1).reshape(r, d, n)
    buf = _proj_lanes(buf, wo, bo)  # (R, D, n)
    wq, bq, wk, bk, wv, bv, wo, bo = receive
    q2 = (_proj_lanes(z, wq, bq) * scale).reshape(p, num_heads, dh, n)
    k2 = _proj_lanes(buf, wk, bk).reshape(r, num_heads, dh, n)
    v2 = _proj_lanes(buf, wv, bv).reshape(r, num_heads, dh, n)
    s2 = jnp.einsum("phen,rhen->hprn", q2, k2)
    a2 = jnp.exp(s2 - s2.max(axis=2, keepdims=True))
    a2 = a2 / a2.sum(axis=2, keepdims=True)  # softmax over routers
    if m2 is not None:
        a2 = a2 * m2
    out = jnp.einsum("hprn,rhen->phen", a2, v2).reshape(p, d, n)
    return _proj_lanes(out, wo, bo)


def _full_spec(shape):
    return pl.BlockSpec(shape, lambda i, _n=len(shape): (0,) * _n)


def _lane_spec(shape, block_n):
    return pl.BlockSpec(tuple(shape[:-1]) + (block_n,), lambda i, _n=len(shape): (0,) * (_n - 1) + (i,))


def _forward_call(z, u, send, receive, masks, num_heads, block_n, interpret):
    p, d, n = z.shape
    has_mask = masks is not None
    weights = list(send) + list(receive)
    inputs = [z, u, *weights] + (list(masks) if has_mask else [])
    in_specs = [_lane_spec(z.shape, block_n), _full_spec(u.shape)] + [_full_spec(w.shape) for w in weights]
    if has_mask:
        in_specs += [_lane_spec(m.shape, block_n) for m in masks]

    def kernel(*refs):
        z_ref, u_ref = refs[0], refs[1]
        w = [ref[...] for ref in refs[2:18]]
        m1, m2 = (refs[18][...], refs[19][...]) if has_mask else (None, None)
        out_ref = refs[-1]
        out_ref[...] = route_lanes(z_ref[...], u_ref[...], tuple(w[:8]), tuple(w[8:]), m1, m2, num_heads)

    return pl.pallas_call(
        kernel, grid=(n // block_n,), in_specs=in_specs, out_specs=_lane_spec(z.shape, block_n),
        out_shape=jax.ShapeDtypeStruct(z.shape, z.dtype), interpret=interpret)(*inputs)


def _backward_call(z, u, send, receive, masks, g, num_heads, block_n, interpret):
    p, d, n = z.shape
    grid = n // block_n
    has_mask = masks is not None
    weights = list(send) + list(receive)
    inputs = [z, u, *weights] + (list(masks) if has_mask else []) + [g]
    in_specs = ([_lane_spec(z.shape, block_n), _full_spec(u.shape)] + [_full_spec(w.shape) for w in weights]
                + ([_lane_spec(m.shape, block_n) for m in masks] if has_mask else [])
                + [_lane_spec(g.shape, block_n)])
    partial_shapes = [u.shape] + [w.shape for w in weights]  # per-grid-step partial gradients, summed outside
    out_shape = [jax.ShapeDtypeStruct(z.shape, z.dtype)] + [
        jax.ShapeDtypeStruct((grid,) + s, jnp.float32) for s in partial_shapes]
    out_specs = [_lane_spec(z.shape, block_n)] + [
        pl.BlockSpec((1,) + s, lambda i, _n=len(s): (i,) + (0,) * _n) for s in partial_shapes]

    def kernel(*refs):
        nin = len(inputs)
        z_b, u_b = refs[0][...], refs[1][...]
        w = tuple(ref[...] for ref in refs[2:18])
        m1, m2 = (refs[18][...], refs[19][...]) if has_mask else (None, None)
        g_b = refs[nin - 1][...]
        outs = refs[nin:]

        def f(z_, u_, w_):
            return route_lanes(z_, u_, w_[:8], w_[8:], m1, m2, num_heads)

        _, vjp = jax.vjp(f, z_b, u_b, w)
        dz, du, dw = vjp(g_b)
        outs[0][...] = dz
        for ref, val in zip(outs[1:], (du,) + tuple(dw)):
            ref[...] = val[None]

    res = pl.pallas_call(kernel, grid=(grid,), in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
                         interpret=interpret)(*inputs)
    dz, partials = res[0], [x.sum(axis=0) for x in res[1:]]
    return dz, partials[0], tuple(partials[1:9]), tuple(partials[9:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _routing_lanes(z, u, send, receive, masks, num_heads, block_n, interpret):
    return _forward_call(z, u, send, receive, masks, num_heads, block_n, interpret)


def _routing_lanes_fwd(z, u, send, receive, masks, num_heads, block_n, interpret):
    out = _forward_call(z, u, send, receive, masks, num_heads, block_n, interpret)
    return out, (z, u, send, receive, masks)


def _routing_lanes_bwd(num_heads, block_n, interpret, res, g):
    z, u, send, receive, masks = res
    dz, du, dsend, dreceive = _backward_call(z, u, send, receive, masks, g, num_heads, block_n, interpret)
    dmasks = None if masks is None else tuple(jnp.zeros_like(m) for m in masks)
    return dz, du, dsend, dreceive, dmasks


_routing_lanes.defvjp(_routing_lanes_fwd, _routing_lanes_bwd)


def routing_attention(z: jax.Array, routers: jax.Array, send: MHAWeights, receive: MHAWeights, masks=None, *,
                      num_heads: int, block_n: int = 128, interpret: bool = True) -> jax.Array:
    """Fused Pallas routing: same contract as :func:`routing_attention_reference` (z (N, P, D) -> (N, P, D)).

    N is padded to a multiple of ``block_n`` (padded series are zeros and are sliced off; their cotangent is zero,
    so they add nothing to the weight gradients).
    """
    n, p, d = z.shape
    if d % num_heads:
        raise ValueError(f"latent dim {d}: expected a multiple of num_heads={num_heads}")
    if block_n < 1:
        raise ValueError(f"block_n={block_n}: expected a positive integer")
    pad = -n % block_n
    zt = jnp.pad(z.transpose(1, 2, 0), ((0, 0), (0, 0), (0, pad)))
    mt = None
    if masks is not None:
        mt = tuple(jnp.pad(m.transpose(1, 2, 3, 0), ((0, 0), (0, 0), (0, 0), (0, pad))) for m in masks)
    out = _routing_lanes(zt, routers, tuple(send), tuple(receive), mt, num_heads, block_n, interpret)
    return out[:, :, :n].transpose(2, 0, 1)
