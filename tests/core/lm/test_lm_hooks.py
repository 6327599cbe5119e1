"""Hooks: steering, head patching, capture, KV read/write: checked against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lm import model as model_lib
from core.lm.hooks import Capture, Hooks, PatchHead, Steer

TOKENS = jnp.asarray([[3, 7, 11, 2, 9, 5], [1, 4, 4, 8, 30, 12]], jnp.int32)


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def test_steering_at_final_layer_equals_hand_computation(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    L = config.num_layers
    base = apply(params, TOKENS, hooks=Hooks(capture=Capture(heads=False)))
    v = np.random.default_rng(0).standard_normal(config.hidden_size).astype(np.float32)
    where = np.zeros(TOKENS.shape, np.float32)
    where[0, 2] = 1.0
    where[1, 5] = 0.5
    steered = apply(params, TOKENS, hooks=Hooks(steer=(Steer(vector=v, where=where, layer=L),)))
    # by hand: logits = RMSNorm(h + w v) @ W_out, h = residual[L] of the unsteered run
    h = np.asarray(base.captured["residual"][L])
    pure = params.to_pure_dict()
    expected = _rms(h + where[..., None] * v, np.asarray(pure["norm"]["weight"]), config.rms_norm_eps) @ np.asarray(
        pure["lm_head"])
    np.testing.assert_allclose(np.asarray(steered.logits), expected, atol=1e-4, rtol=1e-4)
    changed = np.abs(np.asarray(steered.logits) - np.asarray(base.logits)).max(-1) > 1e-3
    np.testing.assert_array_equal(changed, where > 0)
    # the next-token distribution moves by exactly the hand-computed shift
    p_hand = jax.nn.softmax(expected[0, 2])
    np.testing.assert_allclose(jax.nn.softmax(steered.logits[0, 2]), p_hand, atol=1e-5)


def test_steering_early_layer_is_causal(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    base = apply(params, TOKENS)
    where = np.zeros(TOKENS.shape, bool)
    where[:, 3] = True
    v = jnp.ones((config.hidden_size,)) * 2.0
    out = apply(params, TOKENS, hooks=Hooks(steer=(Steer(vector=v, where=where, layer=0),)))
    diff = np.abs(np.asarray(out.logits) - np.asarray(base.logits)).max(-1)
    assert (diff[:, :3] < 1e-6).all() and (diff[:, 3:] > 1e-3).all()


def test_patching_a_head_with_its_own_activation_is_identity(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    base = apply(params, TOKENS, hooks=Hooks(capture=Capture()))
    heads = base.captured["heads"]  # (L, B, T, H, Dh)
    assert heads.shape == (config.num_layers, 2, 6, config.num_heads, config.head_dim)
    patch = tuple(PatchHead(value=heads[l, :, :, h], layer=l, head=h) for l in range(config.num_layers)
                  for h in range(config.num_heads))
    out = apply(params, TOKENS, hooks=Hooks(patch=patch))
    np.testing.assert_allclose(np.asarray(out.logits), np.asarray(base.logits), atol=1e-6, rtol=0)


def test_patching_a_head_changes_the_block_output_as_computed_by_hand(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    L, h = config.num_layers - 1, 2
    base = apply(params, TOKENS, hooks=Hooks(capture=Capture()))
    old = np.asarray(base.captured["heads"][L])  # (B, T, H, Dh)
    new = np.random.default_rng(1).standard_normal(old.shape[:2] + old.shape[3:]).astype(np.float32)
    where = np.zeros(TOKENS.shape, bool)
    where[1, 4] = True
    out = apply(params, TOKENS, hooks=Hooks(patch=(PatchHead(value=new, where=where, layer=L, head=h),),
                                           capture=Capture()))
    got_heads = np.asarray(out.captured["heads"][L])
    np.testing.assert_array_equal(got_heads[1, 4, h], new[1, 4])
    np.testing.assert_array_equal(got_heads[0], old[0])
    # by hand: block L output = r + a + MLP(RMSNorm(r + a)), a = sum_h heads_h @ Wo_h
    pure = params.to_pure_dict()["layers"][L]
    heads = old.copy()
    heads[1, 4, h] = new[1, 4]
    r = np.asarray(base.captured["residual"][L])
    a = np.einsum("bthk,hkd->btd", heads, np.asarray(pure["self_attn"]["o_proj"]))
    x = r + a
    n = _rms(x, np.asarray(pure["post_attention_layernorm"]["weight"]), config.rms_norm_eps)
    g, u = n @ np.asarray(pure["mlp"]["gate_proj"]), n @ np.asarray(pure["mlp"]["up_proj"])
    expected = x + (g / (1 + np.exp(-g)) * u) @ np.asarray(pure["mlp"]["down_proj"])
    np.testing.assert_allclose(np.asarray(out.captured["residual"][L + 1]), expected, atol=1e-4, rtol=1e-4)
    assert np.abs(np.asarray(out.logits[1, 4]) - np.asarray(base.logits[1, 4])).max() > 1e-3
    np.testing.assert_allclose(np.asarray(out.logits[0]), np.asarray(base.logits[0]), atol=1e-6)


def test_capture_positions_gather(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    full = apply(params, TOKENS, hooks=Hooks(capture=Capture()))
    pos = jnp.asarray([[5, 0], [2, 3]])
    some = apply(params, TOKENS, hooks=Hooks(capture=Capture(positions=pos)))
    assert some.captured["residual"].shape == (config.num_layers + 1, 2, 2, config.hidden_size)
    for b in range(2):
        np.testing.assert_allclose(some.captured["residual"][:, b], full.captured["residual"][:, b, pos[b]], atol=1e-6)
        np.testing.assert_allclose(some.captured["heads"][:, b], full.captured["heads"][:, b, pos[b]], atol=1e-6)


def test_kv_cache_read_write_and_kv_fn(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    cache = model_lib.init_cache(config, 2, 8)
    out = apply(params, TOKENS, cache=cache)
    full = apply(params, TOKENS)
    np.testing.assert_allclose(out.logits, full.logits, atol=1e-5)
    k, v = model_lib.read_kv(out.cache, 1)
    assert k.shape == (2, 8, config.num_kv_heads, config.head_dim)
    assert np.abs(np.asarray(k[:, 6:])).max() == 0 and np.abs(np.asarray(k[:, :6])).max() > 0
    # writing a zeroed value cache for layer 1 changes the next step exactly like a kv_fn zeroing v
    zeroed = model_lib.write_kv(out.cache, 1, k, jnp.zeros_like(v))
    nxt = jnp.asarray([[5], [6]])
    a = apply(params, nxt, cache=zeroed).logits
    b = apply(params, nxt, cache=out.cache).logits
    assert np.abs(np.asarray(a) - np.asarray(b)).max() > 1e-3
    kv_fn = lambda layer, k, v: (k, v * 0.0) if layer == 1 else (k, v)  # noqa: E731
    c = apply(params, TOKENS, cache=cache, hooks=Hooks(kv_fn=kv_fn))
    d = apply(params, nxt, cache=c.cache, hooks=Hooks(kv_fn=kv_fn)).logits
    e = apply(params, nxt, cache=zeroed, hooks=Hooks(kv_fn=kv_fn)).logits
    np.testing.assert_allclose(d, e, atol=1e-5)
    with pytest.raises(ValueError, match="write_kv shapes"):
        model_lib.write_kv(out.cache, 0, k[:, :3], v)


def test_bad_hook_specs(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    with pytest.raises(ValueError, match="layer in"):
        apply(params, TOKENS, hooks=Hooks(steer=(Steer(vector=jnp.zeros(32), layer=9),)))
    with pytest.raises(ValueError, match="PatchHead.value shape"):
        apply(params, TOKENS, hooks=Hooks(patch=(PatchHead(value=jnp.zeros((2, 6, 3)), layer=0, head=0),)))
