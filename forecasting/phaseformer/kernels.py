"""The cross-phase routing attention (both stages) as one fused Pallas kernel, beside its pure-JAX reference.

For the small-D configurations (D = 4..8, R = 4..8 routers, P = 24 phases) the routing layer is thousands of tiny
matmuls per batch; XLA runs each as its own small op. Here the dense projections (the send keys and values and the
receive queries of Z, the receive output) stay in XLA as matmuls over all N P tokens, and the kernel does the rest.
Its inputs are planes ``(D, P_pad, N)`` (P padded to a power of two; padded phases get zero attention) with the
series axis N on the lanes. A grid step takes ``block_n`` series and loops over the routers (``fori_loop``, which
Triton keeps as one ``scf.for``):

    b_r = softmax_P(q_r . K1) V1               (stage 1: router r aggregates the phases of each series)
    k_r, v_r = b_r W_k + c_k, b_r W_v + c_v    (receive keys / values; the send output projection folded in)
    O += exp(Q2 . k_r - m) v_r                 (stage 2: an online softmax over the routers, as in flash attention)

so the program grows neither with R nor with D^2: the channel axis is an array axis and the projections are
broadcast-multiply-reduce (with head width D / h <= 8 there is nothing for a matrix unit to do). The backward pass
is a second kernel, derived by hand: per router it recomputes stage 1 and stage 2's softmax (from the log-sum-exp the
forward saved), uses dO . O and db . b as the two softmaxes' "delta" terms, accumulates dK1, dV1, dQ2 in
registers, and writes per-series router rows from which XLA sums the weight gradients. Every operation is one the
Pallas Triton lowering supports, so the same kernel runs in interpret mode on the CPU and compiled through Triton on
an NVIDIA GPU; ``tests`` check the lowering and the program size on the CPU, and
``benchmarks/kernels_triton_aot.py`` compiles it for sm_90a there. The first version unrolled every (head, router,
channel) product into its own op; Triton had not finished compiling its D = 8 forward after ~150 s on an H200.
Attention dropout (PyTorch's MHA dropout on the attention weights) enters both paths as precomputed
multiplicative masks, so the kernel needs no in-kernel RNG and both paths see the same randomness.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

from core import pallas as core_pallas
from core.sharding import DATA

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


def _head_indicators(d: int, num_heads: int):
    """Per head, a (D, 1) 0/1 column marking its channels; None for one head (every channel)."""
    if num_heads == 1:
        return None
    dh = d // num_heads
    chan = jax.lax.broadcasted_iota(jnp.int32, (d, 1), 0)
    return [((chan >= i * dh) & (chan < (i + 1) * dh)).astype(jnp.float32) for i in range(num_heads)]


def _head_sums(x, heads):
    """x (D, ...) -> per head, the sum over its channels (axis 0 dropped)."""
    if heads is None:
        return [jnp.sum(x, axis=0)]
    return [jnp.sum(x * ind.reshape(ind.shape + (1,) * (x.ndim - 2)), axis=0) for ind in heads]


def _spread(per_head, heads):
    """The inverse layout of :func:`_head_sums`: per-head arrays (...) -> (D, ...), each channel its head's."""
    if heads is None:
        return per_head[0][None]
    return sum(ind.reshape(ind.shape + (1,) * (per_head[0].ndim - 1)) * x[None] for ind, x in zip(heads, per_head))


def _project(rows, w, b):
    """rows (D, n) -> w^T rows + b: (D_in, D_out, 1) * (D_in, 1, n) summed over D_in (no dot: D < 16)."""
    return jnp.sum(w[:, :, None] * rows[:, None, :], axis=0) + b


def _project_back(rows, w):
    """The transpose of :func:`_project`: rows (D_out, n) -> w rows (D_in, n)."""
    return jnp.sum(w[:, :, None] * rows[None, :, :], axis=1)


def _aggregate(k1, v1, q, m1_ref, r, heads, valid):
    """Stage 1 for router r (a traced index) with scaled query q (D, 1, 1): per head, a softmax over the valid
    phases of q . k1, times the dropout mask. Returns the router's row b0 (D, n) (before the send output
    projection) and the per-head softmaxes and masked weights (P_pad, n) for the backward pass."""
    scores = [jnp.where(valid, s, -jnp.inf) for s in _head_sums(k1 * q, heads)]
    probs = [e / jnp.sum(e, axis=0, keepdims=True)
             for e in (jnp.exp(s - jnp.max(s, axis=0, keepdims=True)) for s in scores)]
    weights = probs if m1_ref is None else [p * m1_ref[hi, r] for hi, p in enumerate(probs)]
    return jnp.sum(_spread(weights, heads) * v1, axis=1), probs, weights


def _forward_kernel(num_heads, num_phases, num_routers, has_mask):
    def kernel(k1_ref, v1_ref, q2_ref, q1_ref, wk_ref, bk_ref, wv_ref, bv_ref, *refs):
        m1_ref, m2_ref = refs[:2] if has_mask else (None, None)
        o_ref, lse_ref = refs[-2:]
        d, p_pad, n = k1_ref.shape
        heads = _head_indicators(d, num_heads)
        valid = jax.lax.broadcasted_iota(jnp.int32, (p_pad, n), 0) < num_phases

        def router(r, carry):  # stage 1 for router r, then its term of stage 2's online softmax over routers
            acc, top, total = carry
            # the planes are re-read from cache every iteration instead of held in registers across the loop
            b0, _, _ = _aggregate(k1_ref[...], v1_ref[...], q1_ref[r][:, :, None], m1_ref, r, heads, valid)
            k2, v2 = _project(b0, wk_ref[...], bk_ref[...]), _project(b0, wv_ref[...], bv_ref[...])
            scores = _head_sums(q2_ref[...] * k2[:, None, :], heads)
            new_top = [jnp.maximum(t, s) for t, s in zip(top, scores)]
            rescale = [jnp.exp(t - nt) for t, nt in zip(top, new_top)]
            e = [jnp.exp(s - nt) for s, nt in zip(scores, new_top)]
            total = [t * a + ei for t, a, ei in zip(total, rescale, e)]
            weights = e if m2_ref is None else [ei * m2_ref[hi, r] for hi, ei in enumerate(e)]
            acc = acc * _spread(rescale, heads) + _spread(weights, heads) * v2[:, None, :]
            return acc, new_top, total

        zeros = jnp.zeros((p_pad, n), jnp.float32)
        init = (jnp.zeros((d, p_pad, n), jnp.float32), [jnp.full((p_pad, n), -jnp.inf)] * num_heads,
                [zeros] * num_heads)
        acc, top, total = jax.lax.fori_loop(0, num_routers, router, init)
        o_ref[...] = acc / _spread(total, heads)
        for hi in range(num_heads):
            lse_ref[hi] = top[hi] + jnp.log(total[hi])

    return kernel


def _backward_kernel(num_heads, num_phases, num_routers, has_mask):
    def kernel(k1_ref, v1_ref, q2_ref, q1_ref, wk_ref, bk_ref, wv_ref, bv_ref, *refs):
        m1_ref, m2_ref = refs[:2] if has_mask else (None, None)
        refs = refs[2:] if has_mask else refs
        o_ref, lse_ref, do_ref, dk1_ref, dv1_ref, dq2_ref, b0_ref, dk2_ref, dv2_ref, dq1_ref = refs
        d, p_pad, n = k1_ref.shape
        heads = _head_indicators(d, num_heads)
        valid = jax.lax.broadcasted_iota(jnp.int32, (p_pad, n), 0) < num_phases
        # stage 2's sum over routers of softmax * dP is dO . O (flash attention's "delta"), per head
        delta2 = _head_sums(do_ref[...] * o_ref[...], heads)

        def router(r, carry):
            dk1, dv1, dq2 = carry
            k1, v1, q2, do = k1_ref[...], v1_ref[...], q2_ref[...], do_ref[...]
            q = q1_ref[r][:, :, None]
            wk, wv = wk_ref[...], wv_ref[...]
            b0, probs1, weights1 = _aggregate(k1, v1, q, m1_ref, r, heads, valid)
            k2, v2 = _project(b0, wk, bk_ref[...]), _project(b0, wv, bv_ref[...])
            # stage 2, softmax over the routers, recomputed from the saved log-sum-exp
            probs2 = [jnp.exp(s - lse_ref[hi]) for hi, s in enumerate(_head_sums(q2 * k2[:, None, :], heads))]
            masks2 = [None if m2_ref is None else m2_ref[hi, r] for hi in range(num_heads)]
            weights2 = [p if m is None else p * m for p, m in zip(probs2, masks2)]
            d_weights2 = _head_sums(do * v2[:, None, :], heads)
            ds2 = _spread([p * ((dw if m is None else dw * m) - dl)
                           for p, dw, m, dl in zip(probs2, d_weights2, masks2, delta2)], heads)
            dv2 = jnp.sum(_spread(weights2, heads) * do, axis=1)
            dk2 = jnp.sum(ds2 * q2, axis=1)
            dq2 = dq2 + ds2 * k2[:, None, :]
            db0 = _project_back(dk2, wk) + _project_back(dv2, wv)
            # stage 1, softmax over the phases; sum over phases of softmax * dP is db0 . b0, per head
            d_weights1 = _head_sums(v1 * db0[:, None, :], heads)
            delta1 = [x[None] for x in _head_sums(db0 * b0, heads)]
            ds1 = _spread([p * ((dw if m1_ref is None else dw * m1_ref[hi, r]) - dl)
                           for hi, (p, dw, dl) in enumerate(zip(probs1, d_weights1, delta1))], heads)
            dv1 = dv1 + _spread(weights1, heads) * db0[:, None, :]
            dk1 = dk1 + ds1 * q
            # per-series rows; the weight gradients are their products, summed over series outside
            b0_ref[r], dk2_ref[r], dv2_ref[r], dq1_ref[r] = b0, dk2, dv2, jnp.sum(ds1 * k1, axis=1)
            return dk1, dv1, dq2

        zeros = jnp.zeros((d, p_pad, n), jnp.float32)
        dk1_ref[...], dv1_ref[...], dq2_ref[...] = jax.lax.fori_loop(0, num_routers, router, (zeros,) * 3)

    return kernel


def _plane_spec(shape, block_n):
    return pl.BlockSpec(tuple(shape[:-1]) + (block_n,), lambda i, _n=len(shape): (0,) * (_n - 1) + (i,))


def _full_spec(shape):
    return pl.BlockSpec(shape, lambda i, _n=len(shape): (0,) * _n)


def _call(kernel, inputs, out_shape, block_n, interpret, num_warps):
    """inputs: three planes (blocked over N), the replicated q1 and four weights, then more blocked arrays
    (masks, residuals); every output is blocked over N."""
    n = inputs[0].shape[-1]
    in_specs = [_full_spec(x.shape) if 3 <= i < 8 else _plane_spec(x.shape, block_n) for i, x in enumerate(inputs)]
    return pl.pallas_call(kernel, grid=(n // block_n,), in_specs=in_specs, out_shape=out_shape,
                          out_specs=[_plane_spec(s.shape, block_n) for s in out_shape], interpret=interpret,
                          compiler_params=None if interpret else core_pallas.gpu_compiler_params(num_warps))(*inputs)


def _forward_call(planes, q1, weights, masks, num_heads, num_phases, block_n, interpret, num_warps):
    d, p_pad, n = planes[0].shape
    inputs = [*planes, q1, *weights] + (list(masks) if masks is not None else [])
    out_shape = [jax.ShapeDtypeStruct((d, p_pad, n), jnp.float32),
                 jax.ShapeDtypeStruct((num_heads, p_pad, n), jnp.float32)]
    kernel = _forward_kernel(num_heads, num_phases, q1.shape[0], masks is not None)
    return _call(kernel, inputs, out_shape, block_n, interpret, num_warps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def _routing_core(planes, q1, weights, masks, num_heads, num_phases, block_n, interpret, num_warps):
    """(k1, v1, q2) planes (D, P_pad, N), q1 (R, D, 1), weights (wk2, bk2, wv2, bv2) ((D, D), (D, 1) each) acting
    on the router rows -> the distributed values (D, P_pad, N), before the receive output projection."""
    return _forward_call(planes, q1, weights, masks, num_heads, num_phases, block_n, interpret, num_warps)[0]


def _routing_core_fwd(planes, q1, weights, masks, num_heads, num_phases, block_n, interpret, num_warps):
    out, lse = _forward_call(planes, q1, weights, masks, num_heads, num_phases, block_n, interpret, num_warps)
    return out, (planes, q1, weights, masks, out, lse)


def _routing_core_bwd(num_heads, num_phases, block_n, interpret, num_warps, res, g):
    planes, q1, weights, masks, out, lse = res
    d, p_pad, n = out.shape
    r = q1.shape[0]
    inputs = [*planes, q1, *weights] + (list(masks) if masks is not None else []) + [out, lse, g]
    out_shape = ([jax.ShapeDtypeStruct((d, p_pad, n), jnp.float32)] * 3
                 + [jax.ShapeDtypeStruct((r, d, n), jnp.float32)] * 4)
    kernel = _backward_kernel(num_heads, num_phases, r, masks is not None)
    dk1, dv1, dq2, b0, dk2, dv2, dq1 = _call(kernel, inputs, out_shape, block_n, interpret, num_warps)
    dweights = (jnp.einsum("rin,rcn->ic", b0, dk2), dk2.sum(axis=(0, 2))[:, None],
                jnp.einsum("rin,rcn->ic", b0, dv2), dv2.sum(axis=(0, 2))[:, None])
    dmasks = None if masks is None else tuple(jnp.zeros_like(m) for m in masks)
    return (dk1, dv1, dq2), dq1.sum(axis=-1, keepdims=True), dweights, dmasks


_routing_core.defvjp(_routing_core_fwd, _routing_core_bwd)


# The compiled kernel's default block: at 8 series and 8 warps the D = 8 forward and backward fit in sm_90's
# registers without spills (benchmarks/kernels_triton_aot.py); interpret mode takes 128 series (fewer grid steps).
COMPILED_BLOCK_N, COMPILED_NUM_WARPS, INTERPRET_BLOCK_N = 8, 8, 128


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def routing_attention(z: jax.Array, routers: jax.Array, send: MHAWeights, receive: MHAWeights, masks=None, *,
                      num_heads: int, block_n: int = 0, interpret: bool | None = None,
                      num_warps: int = COMPILED_NUM_WARPS) -> jax.Array:
    """Fused Pallas routing: same contract as :func:`routing_attention_reference` (z (N, P, D) -> (N, P, D)).

    The dense projections (send keys and values and receive queries of Z, the receive output) are plain matmuls
    over all N P tokens and stay in XLA; the send output projection is folded into the receive keys and values.
    N is padded to a multiple of ``block_n`` and P to a power of two (padded series and phases are zeros and are
    sliced off; their cotangent is zero, so they add nothing to the weight gradients). ``interpret`` None picks
    interpret mode on the CPU; compiled (Triton) calls need D, R and ``block_n`` to be powers of two. ``block_n``
    0 picks :data:`INTERPRET_BLOCK_N` or :data:`COMPILED_BLOCK_N`.

    Under a mesh (``jax.set_mesh``) with a ``data`` axis of several devices, each device runs the kernel on its
    slice of the series (``shard_map``): to XLA's partitioner a compiled kernel is an opaque custom call, which it
    does not split over devices.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if DATA in mesh.axis_names and mesh.shape[DATA] > 1 and DATA not in mesh.manual_axes:
        if z.shape[0] % mesh.shape[DATA]:
            raise ValueError(f"{z.shape[0]} series: expected a multiple of the mesh's {mesh.shape[DATA]} data devices")
        per_device = functools.partial(routing_attention, num_heads=num_heads, block_n=block_n, interpret=interpret,
                                       num_warps=num_warps)
        series, shared = P(DATA), P()
        # check_vma=False: pallas_call's outputs carry no varying-axes annotation; the weights' cotangents are then
        # summed over devices by shard_map's transpose (tested: data-parallel training equals one device)
        return jax.shard_map(per_device, in_specs=(series, shared, shared, shared, series), out_specs=series,
                             check_vma=False)(z, routers, send, receive, masks)
    n, p, d = z.shape
    r = routers.shape[0]
    if d % num_heads:
        raise ValueError(f"latent dim {d}: expected a multiple of num_heads={num_heads}")
    if block_n < 0:
        raise ValueError(f"block_n={block_n}: expected a positive integer (or 0: automatic)")
    if interpret is None:
        interpret = core_pallas.default_interpret()
    block_n = block_n or (INTERPRET_BLOCK_N if interpret else COMPILED_BLOCK_N)
    if not interpret:
        for name, value in (("latent dim", d), ("routers", r), ("block_n", block_n)):
            if value != _pow2(value):
                raise ValueError(f"{name}={value}: the compiled (Triton) kernel needs a power of two")
    wq1, bq1, wk1, bk1, wv1, bv1, wo1, bo1 = send
    wq2, bq2, wk2, bk2, wv2, bv2, wo2, bo2 = receive
    scale = 1.0 / math.sqrt(d // num_heads)
    p_pad, n_pad = _pow2(p), -n % block_n

    def plane(w, b, factor=1.0):  # (N, P, D) tokens -> a (D, P_pad, N_pad) plane, zero-padded
        return jnp.pad(((z @ w + b) * factor).transpose(2, 1, 0), ((0, 0), (0, p_pad - p), (0, n_pad)))

    planes = (plane(wk1, bk1), plane(wv1, bv1), plane(wq2, bq2, scale))
    q1 = ((routers @ wq1 + bq1) * scale)[:, :, None]
    # a router row b0 enters stage 2 only through the receive keys and values of b0 @ wo1 + bo1
    weights = (wo1 @ wk2, (bo1 @ wk2 + bk2)[:, None], wo1 @ wv2, (bo1 @ wv2 + bv2)[:, None])
    mt = None
    if masks is not None:
        m1, m2 = masks  # (N, h, R, P), (N, h, P, R) -> (h, R, P_pad, N_pad) each
        pad = ((0, 0), (0, 0), (0, p_pad - p), (0, n_pad))
        mt = (jnp.pad(m1.transpose(1, 2, 3, 0), pad), jnp.pad(m2.transpose(1, 3, 2, 0), pad))
    out = _routing_core(planes, q1, weights, mt, num_heads, p, block_n, interpret, num_warps)
    return out[:, :p, :n].transpose(2, 1, 0) @ wo2 + bo2
