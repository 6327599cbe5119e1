"""LoRA adapters for core.lm: zero-init identity, merge == unmerged forward, dropout on the LoRA branch only
(hand-computed), gradients and SGD on adapters alone, PEFT file layout round trips, and parity with HF PEFT.

The PEFT reference (tests/core/lm/fixtures/lora_peft*, made by benchmarks/lm_lora_fixture.py) holds PEFT's saved
adapter folders and the LoRA model's logits; the base weights are rebuilt from a numpy seed. A live test (skipped
without peft) loads our `save_peft` output in PEFT.
"""

import dataclasses
import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from core.lm import model as model_lib
from core.lm import weights as weights_lib
from core.lm.configs import LMConfig
from core.lm.hooks import Capture, Hooks
from core.lm.lora import TARGETS, LoraConfig, LoraInputs, LoraWeights, init_lora, load_peft, merge, save_peft, unmerge

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
META = json.loads((FIXTURES / "lora_peft.json").read_text())
ARRAYS = np.load(FIXTURES / "lora_peft.npz")
CASES = sorted(META["cases"])
TOKENS = np.array([[1, 5, 9, 3, 7, 2, 8, 4, 11, 30], [6, 2, 2, 9, 1, 3, 0, 5, 17, 21]], np.int32)
ALL = LoraConfig(rank=4, alpha=8.0, targets=TARGETS)


def _random_b(adapters, seed=0, std=0.3):
    """Adapters with every B drawn from N(0, std^2) (a trained-looking adapter; B = 0 would test nothing)."""
    rng = np.random.default_rng(seed)
    return {i: {t: LoraWeights(a=w.a, b=jnp.asarray(std * rng.standard_normal(w.b.shape), w.b.dtype))
                for t, w in ws.items()} for i, ws in adapters.items()}


@functools.partial(jax.jit, static_argnums=0)
def _fwd(graphdef, params, tokens, lora=None, mask=None, positions=None):
    """One jitted forward shared by the tests (same shapes and LoRA config = one compile)."""
    return model_lib.apply(graphdef, params, tokens, attention_mask=mask, positions=positions, lora=lora).logits


def _logits(graphdef, params, tokens, lora=None):
    return np.asarray(_fwd(graphdef, params, tokens, lora))


# --- config and init -------------------------------------------------------------------------------


def test_config_scale_order_and_errors():
    assert LoraConfig(rank=4, alpha=8.0).scale == 2.0
    assert LoraConfig(rank=4, alpha=8.0, use_rslora=True).scale == 4.0  # alpha / sqrt(r)
    assert LoraConfig(targets=("v_proj", "q_proj", "v_proj")).targets == ("q_proj", "v_proj")
    with pytest.raises(ValueError, match=r"'qproj' matches no layer: expected names from \('q_proj'") as e:
        LoraConfig(targets=("q_proj", "qproj"))
    assert "\n" not in str(e.value) and "down_proj" in str(e.value)
    with pytest.raises(ValueError, match="rank=0"):
        LoraConfig(rank=0)
    with pytest.raises(ValueError, match="dropout=1.0"):
        LoraConfig(dropout=1.0)
    with pytest.raises(ValueError, match="LoRA layer 5 matches no layer: expected indices below num_layers=2"):
        init_lora(LMConfig(num_layers=2), LoraConfig(layers=(0, 5)), jax.random.key(0))


def test_init_shapes_and_peft_distribution(tiny_lm):
    config = tiny_lm[0]
    D, F, H, KVH, Dh, r = 32, 48, 4, 2, 8, 8
    adapters = init_lora(config, LoraConfig(rank=r, targets=TARGETS, layers=(1,)), jax.random.key(0))
    assert list(adapters) == [1] and tuple(adapters[1]) == TARGETS
    want = {"q_proj": ((D, r), (r, H, Dh)), "k_proj": ((D, r), (r, KVH, Dh)), "v_proj": ((D, r), (r, KVH, Dh)),
            "o_proj": ((H, Dh, r), (r, D)), "gate_proj": ((D, r), (r, F)), "up_proj": ((D, r), (r, F)),
            "down_proj": ((F, r), (r, D))}
    for t, (a_shape, b_shape) in want.items():
        w = adapters[1][t]
        assert w.a.shape == a_shape and w.b.shape == b_shape, t
        assert not np.asarray(w.b).any()
        # PEFT: kaiming_uniform_(a=sqrt(5)) on the (r, fan_in) weight = U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound = 1.0 / np.sqrt(np.prod(a_shape[:-1]))
        a = np.asarray(w.a)
        assert np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound, t
        assert abs(a.std() - bound / np.sqrt(3)) < 0.15 * bound, t
    assert not np.array_equal(adapters[1]["q_proj"].a, adapters[1]["up_proj"].a)


# --- forward ---------------------------------------------------------------------------------------


def test_zero_init_adapter_leaves_logits_unchanged(tiny_lm):
    config, graphdef, params, _ = tiny_lm
    cfg = dataclasses.replace(ALL, dropout=0.5)
    adapters = init_lora(config, cfg, jax.random.key(1))
    base = _logits(graphdef, params, TOKENS)
    # with a dropout key: dropout acts on the LoRA branch only (the no-key path is in the merge test)
    ours = _logits(graphdef, params, TOKENS, LoraInputs(adapters, cfg, key=jax.random.key(2)))
    np.testing.assert_allclose(ours, base, atol=1e-6, rtol=0)


def test_merged_params_equal_unmerged_adapter_and_unmerge_restores(tiny_lm):
    config, graphdef, params, _ = tiny_lm
    adapters = _random_b(init_lora(config, ALL, jax.random.key(1)))
    base = _logits(graphdef, params, TOKENS)
    ours = _logits(graphdef, params, TOKENS, LoraInputs(adapters, ALL))
    assert np.abs(ours - base).max() > 0.1  # the adapter really moves the logits
    merged = merge(params, adapters, ALL)
    np.testing.assert_allclose(_logits(graphdef, merged, TOKENS), ours, atol=1e-5, rtol=1e-5)
    # the merged weight is W + scale * A @ B in our 3-D layout (o_proj: (H, Dh, D))
    w = adapters[0]["o_proj"]
    np.testing.assert_allclose(merged["layers"][0]["self_attn"]["o_proj"][...],
                               params["layers"][0]["self_attn"]["o_proj"][...]
                               + ALL.scale * np.einsum("hkr,rd->hkd", w.a, w.b), atol=1e-6)
    restored = unmerge(merged, adapters, ALL)
    for p0, p1 in zip(jax.tree.leaves(params), jax.tree.leaves(restored)):
        np.testing.assert_allclose(p1, p0, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(merged["embed_tokens"][...], params["embed_tokens"][...])
    assert type(merged) is type(params)


def test_lora_with_hidden_states_and_cache(tiny_lm):
    """Under one jit: return_hidden gives the states whose LM head is the adapted logits, and a KV cache
    (prefill 6 tokens, then 3 one-token decode steps) gives the adapted no-cache logits. (Hooks with LoRA:
    see the dropout test.)"""
    config, graphdef, params, _ = tiny_lm
    adapters = _random_b(init_lora(config, ALL, jax.random.key(3)), seed=1)

    @jax.jit
    def run(p, lo):
        hidden = model_lib.apply(graphdef, p, TOKENS, return_hidden=True, lora=lo).hidden
        out = model_lib.apply(graphdef, p, TOKENS[:, :6], cache=model_lib.init_cache(config, 2, 12), lora=lo)
        steps, cache = [out.logits[:, -1]], out.cache
        for t in range(6, 9):
            out = model_lib.apply(graphdef, p, TOKENS[:, t:t + 1], cache=cache, lora=lo)
            steps.append(out.logits[:, -1])
            cache = out.cache
        return hidden, jnp.stack(steps, 1)

    hidden, steps = run(params, LoraInputs(adapters, ALL))
    full = _logits(graphdef, params, TOKENS, LoraInputs(adapters, ALL))
    assert np.abs(full - _logits(graphdef, params, TOKENS)).max() > 0.1
    np.testing.assert_allclose(np.asarray(hidden) @ np.asarray(params["lm_head"][...]), full, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(steps, full[:, 5:9], atol=1e-5, rtol=1e-5)


# --- dropout ---------------------------------------------------------------------------------------


def test_dropout_hand_computation_on_one_projection(tiny_lm):
    """`LoraInputs.layer(l)("q_proj", x, y)` = y + scale * (mask * x / (1 - p)) @ A @ B, with the documented
    mask key fold_in(fold_in(key, l), TARGETS.index(target)); no key or deterministic = no dropout."""
    config = tiny_lm[0]
    cfg = LoraConfig(rank=4, alpha=6.0, dropout=0.25, targets=("q_proj", "down_proj"))
    adapters = _random_b(init_lora(config, cfg, jax.random.key(4)))
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((2, 10, 32)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((2, 10, 4, 8)), jnp.float32)
    key = jax.random.key(7)
    w = adapters[1]["q_proj"]
    call = jax.jit(lambda lo, name: lo.layer(1)(name, x, y), static_argnums=1)
    ours = call(LoraInputs(adapters, cfg, key=key), "q_proj")
    keep = jax.random.bernoulli(jax.random.fold_in(jax.random.fold_in(key, 1), TARGETS.index("q_proj")), 0.75,
                                x.shape)
    assert 0.6 < float(keep.mean()) < 0.9
    dropped = np.where(np.asarray(keep), np.asarray(x) / 0.75, 0.0)
    hand = np.asarray(y) + 1.5 * np.einsum("btd,dr,rhk->bthk", dropped, w.a, w.b)
    np.testing.assert_allclose(ours, hand, atol=1e-5, rtol=1e-5)
    no_drop = np.asarray(y) + 1.5 * np.einsum("btd,dr,rhk->bthk", x, w.a, w.b)
    assert np.abs(hand - no_drop).max() > 0.1
    np.testing.assert_allclose(call(LoraInputs(adapters, cfg), "q_proj"), no_drop, atol=1e-5, rtol=1e-5)
    assert LoraInputs(adapters, cfg, key=key, deterministic=True).layer(1).key is None  # = the no-key path
    # a projection without an adapter is untouched
    assert LoraInputs(adapters, cfg, key=key).layer(1)("k_proj", x, y) is y


def test_dropout_in_the_model_hits_only_the_lora_branch(tiny_lm):
    """o_proj of block 1 adapted, dropout 0.5: block 1's attention output is the base one plus
    scale * dropout(heads) @ A @ B (heads = the base model's, unchanged since only o_proj is adapted)."""
    config, graphdef, params, _ = tiny_lm
    cfg = LoraConfig(rank=4, alpha=4.0, dropout=0.5, targets=("o_proj",), layers=(1,))
    adapters = _random_b(init_lora(config, cfg, jax.random.key(8)))
    key = jax.random.key(9)
    hooks = Hooks(capture=Capture(residual=False, heads=True, attn_out=True))
    run = jax.jit(lambda lo: model_lib.apply(graphdef, params, TOKENS, hooks=hooks, lora=lo).captured)
    base, ours = run(None), run(LoraInputs(adapters, cfg, key=key))
    np.testing.assert_allclose(ours["heads"], base["heads"], atol=1e-6)
    heads = np.asarray(base["heads"][1])
    keep = np.asarray(jax.random.bernoulli(jax.random.fold_in(jax.random.fold_in(key, 1), TARGETS.index("o_proj")),
                                           0.5, heads.shape))
    w = adapters[1]["o_proj"]
    hand = np.asarray(base["attn_out"][1]) + np.einsum("bthk,hkr,rd->btd", np.where(keep, heads / 0.5, 0.0), w.a, w.b)
    np.testing.assert_allclose(ours["attn_out"][1], hand, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ours["attn_out"][0], base["attn_out"][0], atol=1e-6)


# --- training --------------------------------------------------------------------------------------


def _loss(adapters, params, graphdef, cfg, tokens, remat="none"):
    logits = model_lib.apply(graphdef, params, tokens[:, :-1], lora=LoraInputs(adapters, cfg), remat=remat).logits
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).mean()


def test_grads_reach_only_the_targeted_adapters_and_sgd_lowers_the_loss(tiny_lm):
    config, graphdef, params, _ = tiny_lm
    cfg = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "down_proj"), layers=(1,))
    adapters = init_lora(config, cfg, jax.random.key(10))
    grad = jax.jit(jax.grad(_loss), static_argnums=(2, 3, 5))
    g0 = grad(adapters, params, graphdef, cfg, TOKENS)
    assert jax.tree.structure(g0) == jax.tree.structure(adapters)  # only block 1's q/v/down adapters
    for t in cfg.targets:  # B = 0 at init: dL/dA = 0 exactly, dL/dB is not
        assert not np.asarray(g0[1][t].a).any() and np.abs(np.asarray(g0[1][t].b)).max() > 1e-6, t
    g_remat = grad(adapters, params, graphdef, cfg, TOKENS, "full")
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g_remat)):
        np.testing.assert_allclose(b, a, atol=1e-6, rtol=1e-5)

    before = [np.array(p) for p in jax.tree.leaves(params)]

    @jax.jit
    def step(ad, p):
        loss, g = jax.value_and_grad(_loss)(ad, p, graphdef, cfg, TOKENS)
        return jax.tree.map(lambda w, d: w - 1.0 * d, ad, g), loss

    losses, ad = [], adapters
    for _ in range(6):
        ad, loss = step(ad, params)
        losses.append(float(loss))
    assert losses[-1] < losses[0] - 0.05, losses
    g1 = grad(ad, params, graphdef, cfg, TOKENS)
    assert all(np.abs(np.asarray(g1[1][t].a)).max() > 1e-7 for t in cfg.targets)  # A moves once B != 0
    for p0, p1 in zip(before, jax.tree.leaves(params)):
        np.testing.assert_array_equal(p1, p0)


# --- PEFT files ------------------------------------------------------------------------------------


def test_save_load_round_trip_is_exact_in_peft_layout(tiny_lm, tmp_path):
    config = tiny_lm[0]
    cfg = LoraConfig(rank=4, alpha=16.0, dropout=0.1, targets=("q_proj", "o_proj", "down_proj"), layers=(0,),
                     use_rslora=True)
    adapters = _random_b(init_lora(config, cfg, jax.random.key(11)))
    save_peft(tmp_path, adapters, cfg, config, base_model_name_or_path="tiny")
    hf = json.loads((tmp_path / "adapter_config.json").read_text())
    assert hf["peft_type"] == "LORA" and hf["task_type"] == "CAUSAL_LM" and hf["r"] == 4 and hf["lora_alpha"] == 16
    assert hf["target_modules"] == ["q_proj", "o_proj", "down_proj"] and hf["layers_to_transform"] == [0]
    assert hf["use_rslora"] and hf["bias"] == "none" and not hf["fan_in_fan_out"]
    tensors = load_file(str(tmp_path / "adapter_model.safetensors"))
    p = "base_model.model.model.layers.0."
    assert {k: v.shape for k, v in tensors.items()} == {
        p + "self_attn.q_proj.lora_A.weight": (4, 32), p + "self_attn.q_proj.lora_B.weight": (32, 4),
        p + "self_attn.o_proj.lora_A.weight": (4, 32), p + "self_attn.o_proj.lora_B.weight": (32, 4),
        p + "mlp.down_proj.lora_A.weight": (4, 48), p + "mlp.down_proj.lora_B.weight": (32, 4)}
    # PEFT's q_proj.lora_B (H*Dh, r) is our B (r, H, Dh) flattened head-major, transposed
    np.testing.assert_array_equal(tensors[p + "self_attn.q_proj.lora_B.weight"],
                                  np.asarray(adapters[0]["q_proj"].b).reshape(4, 32).T)
    loaded, cfg2 = load_peft(tmp_path, config)
    assert cfg2 == cfg
    assert jax.tree.structure(loaded) == jax.tree.structure(adapters)
    for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(loaded)):
        np.testing.assert_array_equal(a, b)


def test_adapter_for_another_base_shape_is_one_line_error(tiny_lm, tmp_path):
    config = tiny_lm[0]
    cfg = LoraConfig(rank=2, targets=("q_proj", "up_proj"))
    wider = dataclasses.replace(config, intermediate_size=64)
    save_peft(tmp_path / "wide", init_lora(wider, cfg, jax.random.key(0)), cfg, wider)
    with pytest.raises(ValueError, match=r"tensor base_model\.model\.model\.layers\.0\.mlp\.up_proj\.lora_B\.weight "
                                         r"has shape \(64, 2\): expected \(48, 2\)") as e:
        load_peft(tmp_path / "wide", config)
    assert "\n" not in str(e.value)
    deeper = dataclasses.replace(config, num_layers=3)
    save_peft(tmp_path / "deep", init_lora(deeper, cfg, jax.random.key(0)), cfg, deeper)
    with pytest.raises(ValueError, match=r"tensor base_model\.model\.model\.layers\.2\..* is not an adapter of this "
                                         r"base \(expected layers \(0, 1\) of 2"):
        load_peft(tmp_path / "deep", config)
    shallow = dataclasses.replace(config, num_layers=1)
    save_peft(tmp_path / "shallow", init_lora(shallow, cfg, jax.random.key(0)), cfg, shallow)
    with pytest.raises(ValueError, match=r"layers\.1\.self_attn\.q_proj\.lora_A\.weight is missing"):
        load_peft(tmp_path / "shallow", config)
    hf = json.loads((tmp_path / "wide" / "adapter_config.json").read_text())
    (tmp_path / "wide" / "adapter_config.json").write_text(json.dumps({**hf, "use_dora": True}))
    with pytest.raises(ValueError, match="use_dora=True is not supported"):
        load_peft(tmp_path / "wide", config)
    # adapters of the wrong width passed straight to the forward
    _, graphdef, params, _ = tiny_lm
    with pytest.raises(ValueError, match=r"LoRA adapter layers\.0\.up_proj A \(32, 2\), B \(2, 64\): expected A "
                                         r"\(32, 2\) and B \(2, 48\)"):
        jax.eval_shape(lambda: model_lib.apply(graphdef, params, TOKENS,
                                               lora=LoraInputs(init_lora(wider, cfg, jax.random.key(0)), cfg)))


# --- parity with HF PEFT ---------------------------------------------------------------------------


def _case(name):
    case = META["cases"][name]
    config = LMConfig.from_hf(case["hf_config"])
    tensors = weights_lib.random_hf_tensors(config, case["seed"])
    checksum = sum(np.float64(t).sum() for t in tensors.values())
    assert checksum == pytest.approx(case["weights_checksum"], rel=1e-12), "numpy RNG stream changed: regenerate"
    graphdef, params = weights_lib.params_from_hf_tensors(config, tensors)
    return case, config, graphdef, params, (ARRAYS[f"{name}/{k}"] for k in ("tokens", "mask", "positions", "logits"))


def _ours(graphdef, params, tokens, mask, positions, lora):
    return np.asarray(_fwd(graphdef, params, tokens, lora, mask, positions))


def test_fixture_is_small_and_covers_the_options():
    size = sum(f.stat().st_size for f in FIXTURES.glob("lora_peft*") if f.is_file())
    size += sum(f.stat().st_size for d in FIXTURES.glob("lora_peft_*") if d.is_dir() for f in d.iterdir())
    assert size < 100_000
    configs = [json.loads((FIXTURES / META["cases"][n]["adapter"] / "adapter_config.json").read_text()) for n in CASES]
    assert set().union(*(c["target_modules"] for c in configs)) == set(TARGETS)
    assert any(c["use_rslora"] for c in configs) and any(c["layers_to_transform"] for c in configs)


@pytest.mark.parametrize("name", CASES)
def test_peft_saved_adapter_reproduces_peft_logits(name):
    case, config, graphdef, params, (tokens, mask, positions, ref) = _case(name)
    adapters, cfg = load_peft(FIXTURES / case["adapter"], config)
    want = case["peft_lora_config"]
    assert cfg.rank == want["r"] and set(cfg.targets) == set(want["target_modules"])
    valid = mask.astype(bool)
    ours = _ours(graphdef, params, tokens, mask, positions, LoraInputs(adapters, cfg))
    np.testing.assert_allclose(ours[valid], ref[valid], atol=1e-4, rtol=1e-4)
    assert case["max_logit_change_from_adapter"] > 0.5  # PEFT's logits are not the base model's


@pytest.mark.parametrize("name", CASES)
def test_our_saved_adapter_loads_in_peft_live(name, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from benchmarks import lm_lora_fixture as fx

    case, config, graphdef, params, (tokens, mask, positions, _) = _case(name)
    _, cfg = load_peft(FIXTURES / case["adapter"], config)
    adapters = _random_b(init_lora(config, cfg, jax.random.key(12)), seed=3, std=0.2)
    save_peft(tmp_path / "adapter", adapters, cfg, config)
    fx.base_folder(tmp_path / "base", config, case["seed"])
    theirs = fx.peft_logits(tmp_path / "base", tmp_path / "adapter", tokens, mask, positions)
    ours = _ours(graphdef, params, tokens, mask, positions, LoraInputs(adapters, cfg))
    valid = mask.astype(bool)
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=1e-4)
