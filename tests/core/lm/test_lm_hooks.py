"""Hooks: steering, head patching (static and traced, a sweep over every head), capture (residuals, heads,
attention patterns, block outputs, per-head contributions), KV read/write: checked against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CompileCounter

from core.lm import model as model_lib
from core.lm import weights as weights_lib
from core.lm.configs import LMConfig
from core.lm.hooks import Capture, Hooks, PatchHead, PatchHeadAt, Steer
from core.lm.interp import head_patching_sweep

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


# --- interpretability at scale: traced head patching, attention patterns, block outputs ---------------------

# 4 layers x 8 heads (GQA 8/4), q/k/v/o biases (Llama attention_bias), head_dim * heads != hidden
WIDE = LMConfig(architecture="llama", vocab_size=40, hidden_size=32, intermediate_size=48, num_layers=4,
                num_heads=8, num_kv_heads=4, head_dim=4, attention_bias=True, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def wide_lm():
    graphdef, params = weights_lib.params_from_hf_tensors(WIDE, weights_lib.random_hf_tensors(WIDE, 3, scale=0.3))
    apply = jax.jit(lambda p, tokens, **kw: model_lib.apply(graphdef, p, tokens, **kw))
    return WIDE, graphdef, params, apply


def _answer_logprob(logits, targets):
    """log p(target) at the single logits position: logits (B, 1, V), targets (B,) -> (B,)."""
    return jax.nn.log_softmax(logits[:, 0])[jnp.arange(logits.shape[0]), targets]


def test_patch_head_at_equals_static_patch_head(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    value = np.random.default_rng(2).standard_normal((2, 6, config.head_dim)).astype(np.float32)
    where = np.zeros(TOKENS.shape, bool)
    where[:, 4] = True
    static = apply(params, TOKENS, hooks=Hooks(patch=(PatchHead(value=value, where=where, layer=1, head=3),)))
    traced = apply(params, TOKENS, hooks=Hooks(patch=(PatchHeadAt(value=value, where=where, layer=jnp.int32(1),
                                                                  head=jnp.int32(3)),)))
    np.testing.assert_allclose(np.asarray(traced.logits), np.asarray(static.logits), atol=1e-6, rtol=0)
    assert np.abs(np.asarray(traced.logits) - np.asarray(apply(params, TOKENS).logits)).max() > 1e-3
    # a layer outside the model patches nothing
    none = apply(params, TOKENS, hooks=Hooks(patch=(PatchHeadAt(value=value, layer=jnp.int32(7), head=jnp.int32(0)),)))
    np.testing.assert_allclose(np.asarray(none.logits), np.asarray(apply(params, TOKENS).logits), atol=1e-6, rtol=0)


def test_head_patching_sweep_compiles_once_and_equals_static_patches(wide_lm):
    config, graphdef, params, apply = wide_lm
    L, H = config.num_layers, config.num_heads
    B, T = 3, 7
    last = np.full((B, 1), T - 1, np.int32)
    where = np.zeros((B, T), bool)
    where[:, T - 1] = True

    def inputs(seed):
        r = np.random.default_rng(seed)
        clean = jnp.asarray(r.integers(0, config.vocab_size, (B, T)), jnp.int32)
        corrupted = jnp.asarray(r.integers(0, config.vocab_size, (B, T)), jnp.int32)
        targets = jnp.asarray(r.integers(0, config.vocab_size, (B,)), jnp.int32)
        heads = apply(params, clean, hooks=Hooks(capture=Capture(residual=False))).captured["heads"]
        return corrupted, heads, targets

    def static(corrupted, heads, targets, l, h):
        patch = PatchHead(value=heads[l, :, :, h], where=where, layer=l, head=h)
        out = apply(params, corrupted, hooks=Hooks(patch=(patch,)), logits_positions=last)
        return np.asarray(_answer_logprob(out.logits, targets))

    first, second = inputs(1), inputs(2)
    jax.block_until_ready(first + second)
    with CompileCounter() as cc1:
        res1 = np.asarray(head_patching_sweep(graphdef, params, first[0], first[1], _answer_logprob, first[2],
                                              where=where, logits_positions=last, batch_size=8))
    with CompileCounter() as cc2:
        res2 = np.asarray(head_patching_sweep(graphdef, params, second[0], second[1], _answer_logprob, second[2],
                                              where=where, logits_positions=last, batch_size=8))
    assert cc1.count <= 2, f"the sweep over {L * H} heads compiled {cc1.count} programs"
    assert cc2.count == 0, f"a second sweep with other inputs compiled {cc2.count} programs"
    assert res1.shape == (L, H, B)
    for (l, h) in [(0, 0), (2, 3), (3, 7)]:  # each static PatchHead is its own compile: a few heads only
        np.testing.assert_allclose(res1[l, h], static(*first, l, h), atol=1e-5, rtol=0)
    np.testing.assert_allclose(res2[2, 3], static(*second, 2, 3), atol=1e-5, rtol=0)
    # heads differ in effect (the sweep is not returning one head's result everywhere)
    assert np.ptp(res1.reshape(L * H, B), axis=0).min() > 1e-3
    # mean-activation patching ((L, 1, 1, H, Dh) broadcast over prompts and positions), one head at a time
    mean = jnp.mean(first[1][:, :, T - 1:], axis=1, keepdims=True)  # (L, 1, 1, H, Dh)
    res3 = np.asarray(head_patching_sweep(graphdef, params, first[0], mean, _answer_logprob, first[2], where=where,
                                          logits_positions=last))
    patch = PatchHead(value=jnp.broadcast_to(mean[3, :, :, 7], (B, T, config.head_dim)), where=where, layer=3, head=7)
    out = apply(params, first[0], hooks=Hooks(patch=(patch,)), logits_positions=last)
    np.testing.assert_allclose(res3[3, 7], np.asarray(_answer_logprob(out.logits, first[2])), atol=1e-5, rtol=0)
    assert np.abs(res3[3, 7] - res1[3, 7]).max() > 1e-4  # the mean is not the per-prompt activation


def _rope_np(x, positions, theta):
    dh = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, dh, 2) / dh)
    f = positions[..., None] * inv
    emb = np.concatenate([f, f], -1)[:, :, None, :]
    rot = np.concatenate([-x[..., dh // 2:], x[..., :dh // 2]], -1)
    return x * np.cos(emb) + rot * np.sin(emb)


def test_attention_patterns_equal_hand_computation(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    mask = np.ones(TOKENS.shape, bool)
    mask[1, :2] = False  # row 1 left-padded
    out = apply(params, TOKENS, attention_mask=mask, hooks=Hooks(capture=Capture(patterns=True)))
    B, T = TOKENS.shape
    H, KVH, Dh = config.num_heads, config.num_kv_heads, config.head_dim
    assert out.captured["patterns"].shape == (config.num_layers, B, H, T, T)
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(np.float64)
    visible = np.tril(np.ones((T, T), bool))[None] & mask[:, None, :]  # (B, T, S)
    pure = params.to_pure_dict()
    for l in range(config.num_layers):
        p = pure["layers"][l]
        x = np.asarray(out.captured["residual"][l], np.float64)
        n = _rms(x, np.asarray(p["input_layernorm"]["weight"]), config.rms_norm_eps)
        q = _rope_np(np.einsum("btd,dhk->bthk", n, np.asarray(p["self_attn"]["q_proj"])), positions, config.rope_theta)
        k = _rope_np(np.einsum("btd,dhk->bthk", n, np.asarray(p["self_attn"]["k_proj"])), positions, config.rope_theta)
        v = np.einsum("btd,dhk->bthk", n, np.asarray(p["self_attn"]["v_proj"]))
        k, v = np.repeat(k, H // KVH, axis=2), np.repeat(v, H // KVH, axis=2)  # query head h reads KV head h // G
        s = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(Dh)
        s = np.where(visible[:, None], s, -1e30)  # a padding query with no visible key gets a uniform row
        probs = np.exp(s - s.max(-1, keepdims=True))
        probs = probs / probs.sum(-1, keepdims=True)
        got = np.asarray(out.captured["patterns"][l])
        real = mask[:, None, :, None] & np.ones((1, H, 1, T), bool)  # query rows of real tokens
        np.testing.assert_allclose(np.where(real, got, 0), np.where(real, probs, 0), atol=1e-5, rtol=0)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
        assert (got[np.broadcast_to(~visible[:, None], got.shape) & real] == 0).all()
        # and the captured head outputs are these probabilities times the values
        heads = np.einsum("bhts,bshd->bthd", probs, v)
        np.testing.assert_allclose(np.asarray(out.captured["heads"][l])[mask], heads[mask], atol=1e-5, rtol=0)
    # capture at positions gathers query rows
    pos = jnp.asarray([[5, 1], [3, 4]])
    some = apply(params, TOKENS, attention_mask=mask, hooks=Hooks(capture=Capture(positions=pos, patterns=True)))
    for b in range(B):
        np.testing.assert_allclose(some.captured["patterns"][:, b], out.captured["patterns"][:, b][:, :, pos[b]],
                                   atol=1e-6)


def test_patterns_over_the_cache_and_kernel_error(tiny_lm):
    config, graphdef, params, apply = tiny_lm
    out = apply(params, TOKENS, cache=model_lib.init_cache(config, 2, 8))
    nxt = jnp.asarray([[5], [6]])
    step = apply(params, nxt, cache=out.cache, hooks=Hooks(capture=Capture(patterns=True)))
    pat = np.asarray(step.captured["patterns"])
    assert pat.shape == (config.num_layers, 2, config.num_heads, 1, 8)
    np.testing.assert_allclose(pat.sum(-1), 1.0, atol=1e-5)
    assert (pat[..., 7] == 0).all() and (pat[..., :7] > 0).all()  # slot 7 not yet written
    with pytest.raises(ValueError, match="use_kernel"):  # use_kernel is static: not through the jitted fixture
        model_lib.apply(graphdef, params, nxt, cache=out.cache, use_kernel=True,
                        hooks=Hooks(capture=Capture(patterns=True)))


def test_block_outputs_and_per_head_contributions(wide_lm):
    config, graphdef, params, apply = wide_lm
    tokens = jnp.asarray([[3, 7, 11, 2, 9, 5], [1, 4, 4, 8, 30, 12]], jnp.int32)
    default = apply(params, tokens, hooks=Hooks(capture=Capture()))
    assert set(default.captured) == {"residual", "heads"}  # the new reads are opt-in
    pos = jnp.asarray([[5, 0, 2], [1, 3, 4]])
    cap = Capture(positions=pos, attn_out=True, mlp_out=True, head_contrib=True)
    out = apply(params, tokens, hooks=Hooks(capture=cap))
    L, H, D = config.num_layers, config.num_heads, config.hidden_size
    c = {k: np.asarray(v) for k, v in out.captured.items()}
    assert c["head_contrib"].shape == (L, 2, 3, H, D)
    assert c["attn_out"].shape == c["mlp_out"].shape == (L, 2, 3, D)
    pure = params.to_pure_dict()
    for l in range(L):
        a = pure["layers"][l]["self_attn"]
        o_proj, o_bias = np.asarray(a["o_proj"]), np.asarray(a["o_bias"])
        assert np.abs(o_bias).max() > 0.05
        np.testing.assert_allclose(c["head_contrib"][l].sum(axis=2) + o_bias, c["attn_out"][l], atol=1e-5, rtol=0)
        for h in (0, 5):
            np.testing.assert_allclose(c["head_contrib"][l][:, :, h], c["heads"][l][:, :, h] @ o_proj[h], atol=1e-5,
                                       rtol=0)
        # the block is residual + attention output + MLP output
        np.testing.assert_allclose(c["residual"][l] + c["attn_out"][l] + c["mlp_out"][l], c["residual"][l + 1],
                                   atol=1e-5, rtol=0)
        m = pure["layers"][l]["mlp"]
        norm_w = np.asarray(pure["layers"][l]["post_attention_layernorm"]["weight"])
        n = _rms(c["residual"][l] + c["attn_out"][l], norm_w, config.rms_norm_eps)
        g, u = n @ np.asarray(m["gate_proj"]), n @ np.asarray(m["up_proj"])
        np.testing.assert_allclose(c["mlp_out"][l], (g / (1 + np.exp(-g)) * u) @ np.asarray(m["down_proj"]),
                                   atol=1e-5, rtol=1e-5)


def test_bad_traced_patch_and_sweep_inputs(wide_lm):
    config, graphdef, params, apply = wide_lm
    tokens = jnp.zeros((2, 6), jnp.int32)
    with pytest.raises(ValueError, match="integer scalars"):
        apply(params, tokens, hooks=Hooks(patch=(PatchHeadAt(value=jnp.zeros(4), layer=jnp.zeros(2, jnp.int32),
                                                             head=jnp.int32(0)),)))
    with pytest.raises(ValueError, match="PatchHeadAt.value shape"):
        apply(params, tokens, hooks=Hooks(patch=(PatchHeadAt(value=jnp.zeros((2, 5, 4)), layer=jnp.int32(0),
                                                             head=jnp.int32(0)),)))
    with pytest.raises(ValueError, match="clean_heads shape"):
        head_patching_sweep(graphdef, params, tokens, jnp.zeros((4, 2, 6, 7, 4)), _answer_logprob, jnp.zeros(2, int))
    with pytest.raises(ValueError, match="batch_size=33"):
        head_patching_sweep(graphdef, params, tokens, jnp.zeros((4, 2, 6, 8, 4)), _answer_logprob, jnp.zeros(2, int),
                            batch_size=33)


def test_per_head_contributions_include_an_o_proj_lora_adapter(wide_lm):
    from core.lm.lora import LoraConfig, LoraInputs, LoraWeights, init_lora

    config, graphdef, params, apply = wide_lm
    tokens = jnp.asarray([[3, 7, 11, 2, 9, 5], [1, 4, 4, 8, 30, 12]], jnp.int32)
    lcfg = LoraConfig(rank=2, alpha=4.0, targets=("o_proj",))
    adapters = init_lora(config, lcfg, jax.random.key(0))
    rng = np.random.default_rng(5)
    adapters = {i: {t: LoraWeights(a=w.a, b=jnp.asarray(rng.standard_normal(w.b.shape), jnp.float32))
                    for t, w in ts.items()} for i, ts in adapters.items()}
    cap = Hooks(capture=Capture(attn_out=True, head_contrib=True))
    out = apply(params, tokens, hooks=cap, lora=LoraInputs(adapters=adapters, config=lcfg))
    base = apply(params, tokens, hooks=cap)
    pure = params.to_pure_dict()
    for l in range(config.num_layers):
        o_bias = np.asarray(pure["layers"][l]["self_attn"]["o_bias"])
        got = np.asarray(out.captured["head_contrib"][l])
        assert np.abs(np.asarray(out.captured["attn_out"][l]) - np.asarray(base.captured["attn_out"][l])).max() > 1e-2
        np.testing.assert_allclose(got.sum(axis=2) + o_bias, out.captured["attn_out"][l], atol=1e-5, rtol=0)
        # head 3 by hand: z_3 @ (Wo[3] + scale * A[3] @ B)
        a, b = np.asarray(adapters[l]["o_proj"].a), np.asarray(adapters[l]["o_proj"].b)
        w3 = np.asarray(pure["layers"][l]["self_attn"]["o_proj"])[3] + lcfg.scale * a[3] @ b
        np.testing.assert_allclose(got[:, :, 3], np.asarray(out.captured["heads"][l])[:, :, 3] @ w3, atol=1e-5,
                                   rtol=0)
