"""The fused Pallas routing kernel (interpret mode) against the pure-JAX reference: forward and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from forecasting.phaseformer import kernels, model

N, P, D, R, HEADS = 37, 24, 4, 4, 2  # N not a multiple of the block: exercises the padding


@pytest.fixture(scope="module")
def inputs():
    layer = model.RoutingLayer(D, R, HEADS, P, dropout=0.1, use_kernel=False, kernel_block=16, kernel_interpret=True,
                               key=jax.random.key(3))
    z = jax.random.normal(jax.random.key(4), (N, P, D))
    masks = kernels.attention_dropout_masks(jax.random.key(5), N, HEADS, R, P, 0.1)
    return z, layer.routers[...], layer.send.weights(), layer.receive.weights(), masks


def _kernel(*args, num_heads):
    return kernels.routing_attention(*args, num_heads=num_heads, block_n=16, interpret=True)


def _rel_close(actual, expected, rtol):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        a, e = np.asarray(a), np.asarray(e)
        scale = max(np.abs(e).max(), 1.0)
        np.testing.assert_allclose(a / scale, e / scale, atol=rtol, rtol=0)


@pytest.mark.parametrize("with_masks", [False, True])
def test_kernel_forward_and_gradients_match_reference(inputs, with_masks):
    z, u, send, receive, masks = inputs
    masks = masks if with_masks else None
    ref = kernels.routing_attention_reference(z, u, send, receive, masks, num_heads=HEADS)
    out = _kernel(z, u, send, receive, masks, num_heads=HEADS)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    # gradients on both backward paths: the training one (dropout masks) and dropout 0 (none)
    weight = jax.random.normal(jax.random.key(6), (P, D))  # a non-trivial cotangent

    def loss(fn):
        return lambda z, u, s, r: jnp.mean(fn(z, u, s, r, masks, num_heads=HEADS) * weight)

    g_ref = jax.grad(loss(kernels.routing_attention_reference), argnums=(0, 1, 2, 3))(z, u, send, receive)
    g_ker = jax.grad(loss(_kernel), argnums=(0, 1, 2, 3))(z, u, send, receive)
    _rel_close(g_ker, g_ref, 1e-5)


def test_kernel_selectable_from_the_model():
    # one head, as the released presets (the test above covers two heads)
    kw = dict(seq_len=48, pred_len=24, latent_dim=4, num_layers=1, num_routers=4, num_heads=1, kernel_block=32,
              key=jax.random.key(0))
    ref_model = model.PhaseFormer(use_kernel=False, **kw)
    ker_model = model.PhaseFormer(use_kernel=True, **kw)
    x = jax.random.normal(jax.random.key(1), (3, 48, 5))
    np.testing.assert_allclose(ker_model(x), ref_model(x), rtol=1e-5, atol=1e-5)
    key = jax.random.key(2)  # same dropout masks reach both paths
    np.testing.assert_allclose(ker_model(x, key), ref_model(x, key), rtol=1e-5, atol=1e-5)


def test_kernel_rejects_bad_shapes(inputs):
    z, u, send, receive, _ = inputs
    with pytest.raises(ValueError, match="expected a multiple of num_heads=3"):
        kernels.routing_attention(z, u, send, receive, num_heads=3)
    with pytest.raises(ValueError, match="block_n=-1: expected a positive integer"):
        kernels.routing_attention(z, u, send, receive, num_heads=2, block_n=-1)


def test_compiled_kernel_lowers_to_triton_for_cuda(inputs):
    """The Triton lowering runs on any host: a block that is no power of two or a primitive Triton lacks fails
    here, not first on a GPU. Forward and backward are each one Triton kernel."""
    from core import pallas as core_pallas

    z, u, send, receive, masks = inputs

    def fwd(z, u, s, r, m):
        return kernels.routing_attention(z, u, s, r, m, num_heads=HEADS, block_n=32, interpret=False)

    assert core_pallas.lowers_for_cuda(fwd, z, u, send, receive, masks).count(core_pallas.TRITON_CALL) == 1
    grad = jax.grad(lambda *a: jnp.sum(fwd(*a) ** 2), argnums=(0, 1, 2, 3))  # needs the forward output too
    assert core_pallas.lowers_for_cuda(grad, z, u, send, receive, masks).count(core_pallas.TRITON_CALL) == 2


def test_compiled_kernel_is_a_small_triton_program():
    """Triton's compile time grows with the program: the router loop stays a loop (scf.for) and the channel axis an
    array axis. At the released configuration (D 8, R 8, one head, default block) the forward lowers to ~550
    operations and the backward to ~1,000; the earlier fully unrolled kernel lowered to 15,684 and 56,960, and its
    forward took minutes to compile (benchmarks/kernels_triton_aot.py)."""
    from core import pallas as core_pallas

    d, r, h, n = 8, 8, 1, 20
    layer = model.RoutingLayer(d, r, h, P, dropout=0.1, use_kernel=False, kernel_block=0, kernel_interpret=False,
                               key=jax.random.key(7))
    z = jax.random.normal(jax.random.key(8), (n, P, d))
    masks = kernels.attention_dropout_masks(jax.random.key(9), n, h, r, P, 0.1)

    def loss(z, u, s, rw):
        return jnp.sum(kernels.routing_attention(z, u, s, rw, masks, num_heads=h, interpret=False) ** 2)

    fwd, bwd = core_pallas.triton_modules(jax.grad(loss, argnums=(0, 1, 2, 3)), z, layer.routers[...],
                                          layer.send.weights(), layer.receive.weights())
    assert fwd.count("scf.for") == 1 and bwd.count("scf.for") == 1
    assert core_pallas.op_count(fwd) < 1_000 and core_pallas.op_count(bwd) < 2_000


def test_compiled_kernel_needs_power_of_two_blocks(inputs):
    z, u, send, receive, _ = inputs
    with pytest.raises(ValueError, match="block_n=24: the compiled"):
        kernels.routing_attention(z, u, send, receive, num_heads=2, block_n=24, interpret=False)


def test_keep_mask_rate_independence_and_determinism():
    """The counter-hash dropout mask keeps round(0.9 * 2^16) / 2^16 of its entries, with no structure a dropout
    mask must not have: each position's mean over keys, adjacent-entry and lo/hi-half correlations are at noise."""
    rate, shape = 0.1, (64, 4, 8, 24)  # 49,152 draws per mask
    keys = jax.random.split(jax.random.key(0), 40)
    masks = np.stack([np.asarray(kernels.keep_mask(k, shape, rate)) for k in keys]).reshape(40, -1).astype(float)
    keep = round(0.9 * 65536) / 65536
    n = masks.size
    assert abs(masks.mean() - keep) < 4 * np.sqrt(keep * (1 - keep) / n)          # 4 sigma of ~2M draws
    # every position is kept ~90 % of the time across keys (no fixed-pattern positions)
    per_position = masks.mean(0)
    assert per_position.min() > 0.5 and per_position.std() < 1.5 * np.sqrt(keep * (1 - keep) / 40)
    flat = masks - masks.mean()
    noise = 4 / np.sqrt(n)
    assert abs((flat[:, :-1] * flat[:, 1:]).mean() / flat.var()) < noise          # neighbours
    half = masks.shape[1] // 2
    assert abs((flat[:, :half] * flat[:, half:2 * half]).mean() / flat.var()) < noise  # the two 16-bit halves
    assert abs((flat[:-1] * flat[1:]).mean() / flat.var()) < noise                # consecutive keys
    np.testing.assert_array_equal(kernels.keep_mask(keys[0], shape, rate), kernels.keep_mask(keys[0], shape, rate))
    odd = np.asarray(kernels.keep_mask(keys[1], (3, 5, 7), 0.5))                  # odd sizes, another rate
    assert odd.shape == (3, 5, 7) and 0.2 < odd.mean() < 0.8
