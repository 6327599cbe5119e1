"""Pallas decode attention (interpret mode on CPU) against the pure-JAX reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm.kernels import decode_attention, decode_attention_reference


@pytest.mark.parametrize("B,H,KVH,S,Dh,block", [
    (2, 4, 2, 37, 8, 16),    # GQA, cache not a multiple of the block
    (1, 14, 2, 64, 16, 32),  # Qwen2.5-0.5B head layout (G = 7, padded to 8)
    (2, 8, 1, 50, 4, 128),   # MQA, one block (cache shorter than the block)
])
def test_matches_reference(B, H, KVH, S, Dh, block):
    ks = jax.random.split(jax.random.key(S), 4)
    q = jax.random.normal(ks[0], (B, H, Dh))
    k = jax.random.normal(ks[1], (B, S, KVH, Dh))
    v = jax.random.normal(ks[2], (B, S, KVH, Dh))
    mask = jax.random.bernoulli(ks[3], 0.7, (B, S)).at[:, 0].set(True)
    mask = mask.at[0, S // 2:].set(False)  # a row whose later blocks are fully masked
    out = decode_attention(q, k, v, mask, block_size=block, interpret=True)
    ref = decode_attention_reference(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)


def test_reference_is_softmax_attention():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(1, 2, 4)), rng.normal(size=(1, 3, 1, 4)), rng.normal(size=(1, 3, 1, 4))
    mask = np.array([[True, False, True]])
    ref = np.asarray(decode_attention_reference(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), jnp.asarray(mask)))
    for h in range(2):
        s = np.array([q[0, h] @ k[0, j, 0] / 2.0 for j in (0, 2)])
        p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        np.testing.assert_allclose(ref[0, h], p[0] * v[0, 0, 0] + p[1] * v[0, 2, 0], atol=1e-5)


def test_bad_shapes():
    q = jnp.zeros((1, 3, 8))
    k = jnp.zeros((1, 10, 2, 8))
    with pytest.raises(ValueError, match="multiple"):
        decode_attention(q, k, k, jnp.ones((1, 10), bool))


def test_compiled_kernel_lowers_to_triton_for_cuda():
    """Compiled (not interpret) on a GPU the kernel goes through Triton; its lowering runs on any host."""
    from core import pallas as core_pallas

    q = jnp.ones((2, 8, 64), jnp.bfloat16)
    k = jnp.ones((2, 300, 2, 64), jnp.bfloat16)
    mask = jnp.ones((2, 300), bool)
    text = core_pallas.lowers_for_cuda(lambda q, k, v, m: decode_attention(q, k, v, m, interpret=False), q, k, k, mask)
    assert text.count(core_pallas.TRITON_CALL) == 1
