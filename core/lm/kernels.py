"""Decode attention: one query token per sequence against a long KV cache (split-K / flash-decoding).

The cache length S is cut into blocks; one Pallas program per (batch, kv head, block) computes, for the
G = H / KVH query heads that share that kv head, the block's running max m, softmax mass l and unnormalised
output o. A small JAX epilogue combines the blocks with log-sum-exp weights:

    M = max_j m_j,   out = sum_j exp(m_j - M) o_j / sum_j exp(m_j - M) l_j.

`decode_attention_reference` is the plain softmax it must equal. On CPU the kernel runs with
`interpret=True` (the default when no GPU/TPU is present).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from core import pallas as core_pallas

_NEG = -1e30


def decode_attention_reference(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                               scale: float | None = None) -> jax.Array:
    """q: (B, H, Dh); k, v: (B, S, KVH, Dh); mask: (B, S) bool (True = attend). Returns (B, H, Dh)."""
    B, H, Dh = q.shape
    KVH = k.shape[2]
    G = H // KVH
    scale = Dh ** -0.5 if scale is None else scale
    qg = q.reshape(B, KVH, G, Dh).astype(jnp.float32)
    s = jnp.einsum("bkgd,bskd->bkgs", qg, k.astype(jnp.float32)) * scale
    s = jnp.where(mask[:, None, None, :], s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bkgs,bskd->bkgd", p, v.astype(jnp.float32))
    return o.reshape(B, H, Dh).astype(q.dtype)


def _kernel(q_ref, k_ref, v_ref, mask_ref, o_ref, m_ref, l_ref, *, scale):
    q = q_ref[...].astype(jnp.float32) * scale  # (G, Dh)
    k = k_ref[...].astype(jnp.float32)  # (blk, Dh)
    v = v_ref[...].astype(jnp.float32)  # (blk, Dh)
    valid = mask_ref[...] > 0  # (1, blk)
    s = jnp.dot(q, k.T, preferred_element_type=jnp.float32)  # (G, blk)
    s = jnp.where(valid, s, _NEG)
    m = jnp.max(s, axis=1, keepdims=True)  # (G, 1)
    p = jnp.where(valid, jnp.exp(s - m), 0.0)
    o_ref[...] = jnp.dot(p, v, preferred_element_type=jnp.float32)
    m_ref[...] = m
    l_ref[...] = jnp.sum(p, axis=1, keepdims=True)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.partial(jax.jit, static_argnames=("block_size", "interpret", "scale"))
def decode_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, *, block_size: int = 128,
                     interpret: bool | None = None, scale: float | None = None) -> jax.Array:
    """Pallas split-K decode attention; same contract as `decode_attention_reference`.

    block_size: cache positions per program (the cache is padded up to a multiple). interpret: None picks
    interpret mode on CPU.
    """
    B, H, Dh = q.shape
    _, S, KVH, _ = k.shape
    if H % KVH:
        raise ValueError(f"q heads {H}: expected a multiple of the cache's {KVH} kv heads")
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != Dh or mask.shape != (B, S):
        raise ValueError(f"shapes q={q.shape}, k={k.shape}, v={v.shape}, mask={mask.shape}: expected "
                         "q (B, H, Dh), k = v (B, S, KVH, Dh), mask (B, S)")
    if interpret is None:
        interpret = core_pallas.default_interpret()
    scale = Dh ** -0.5 if scale is None else scale
    G = H // KVH
    Gp = max(_pow2(G), 16)  # GPU dot tiles need >= 16 rows; the padded query rows are dropped below
    blk = min(block_size, _pow2(S))
    n_blocks = -(-S // blk)
    Sp = n_blocks * blk
    qg = q.reshape(B, KVH, G, Dh)
    if Gp != G:
        qg = jnp.pad(qg, ((0, 0), (0, 0), (0, Gp - G), (0, 0)))
    maskp = mask.astype(jnp.int32)
    if Sp != S:
        pad = ((0, 0), (0, Sp - S), (0, 0), (0, 0))
        k, v = jnp.pad(k, pad), jnp.pad(v, pad)
        maskp = jnp.pad(maskp, ((0, 0), (0, Sp - S)))
    kt = k.transpose(0, 2, 1, 3)  # (B, KVH, Sp, Dh)
    vt = v.transpose(0, 2, 1, 3)
    mask3 = maskp[:, None, :]  # (B, 1, Sp)

    out_shape = (
        jax.ShapeDtypeStruct((B, KVH, n_blocks, Gp, Dh), jnp.float32),
        jax.ShapeDtypeStruct((B, KVH, n_blocks, Gp, 1), jnp.float32),
        jax.ShapeDtypeStruct((B, KVH, n_blocks, Gp, 1), jnp.float32),
    )
    o, m, l = pl.pallas_call(
        functools.partial(_kernel, scale=scale),
        grid=(B, KVH, n_blocks),
        in_specs=[
            pl.BlockSpec((None, None, Gp, Dh), lambda b, h, j: (b, h, 0, 0)),
            pl.BlockSpec((None, None, blk, Dh), lambda b, h, j: (b, h, j, 0)),
            pl.BlockSpec((None, None, blk, Dh), lambda b, h, j: (b, h, j, 0)),
            pl.BlockSpec((None, 1, blk), lambda b, h, j: (b, 0, j)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, None, Gp, Dh), lambda b, h, j: (b, h, j, 0, 0)),
            pl.BlockSpec((None, None, None, Gp, 1), lambda b, h, j: (b, h, j, 0, 0)),
            pl.BlockSpec((None, None, None, Gp, 1), lambda b, h, j: (b, h, j, 0, 0)),
        ],
        out_shape=out_shape,
        interpret=interpret,
        compiler_params=None if interpret else core_pallas.gpu_compiler_params(),
    )(qg, kt, vt, mask3)
    return combine_blocks(o, m, l)[:, :, :G].reshape(B, H, Dh).astype(q.dtype)


def combine_blocks(o: jax.Array, m: jax.Array, l: jax.Array) -> jax.Array:
    """Log-sum-exp combine over the block axis (2). o: (B, KVH, NB, G, Dh); m, l: (B, KVH, NB, G, 1)."""
    m_max = jnp.max(m, axis=2, keepdims=True)
    w = jnp.exp(m - m_max)
    num = jnp.sum(w * o, axis=2)
    den = jnp.sum(w * l, axis=2)
    return num / jnp.where(den > 0, den, 1.0)
