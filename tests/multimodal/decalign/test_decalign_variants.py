"""The official code's variants as options, each against a hand-written reference, plus failure flags and oracles."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from core.config import BadInputError, ConfigError, apply_overrides
from multimodal.decalign import EXPERIMENT, configs, oracle, train
from multimodal.decalign import data as D
from multimodal.decalign import losses as L
from multimodal.decalign.model import DecAlign, cross_layer, init_cross_layers


def _ln(x, eps=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def _attend(p, q, kv, heads):
    b, lq, d = q.shape
    e = d // heads
    qh = (q @ p["wq"] + p["bq"]).reshape(b, lq, heads, e)
    kh = (kv @ p["wk"] + p["bk"]).reshape(b, -1, heads, e)
    vh = (kv @ p["wv"] + p["bv"]).reshape(b, -1, heads, e)
    out = np.zeros((b, lq, heads, e))
    for bi in range(b):
        for h in range(heads):
            s = qh[bi, :, h] @ kh[bi, :, h].T / np.sqrt(e)
            w = np.exp(s - s.max(-1, keepdims=True))
            out[bi, :, h] = (w / w.sum(-1, keepdims=True)) @ vh[bi, :, h]
    return out.reshape(b, lq, d) @ p["wo"] + p["bo"]


def _ff(p, x):
    return np.maximum(x @ p["w1"] + p["b1"], 0) @ p["w2"] + p["b2"]


@pytest.fixture(scope="module")
def layer():
    p = {k: np.asarray(v[0, 0], np.float64) for k, v in init_cross_layers(jax.random.key(3), (1, 1), 8, 16).items()}
    p = {k: v + (0.1 * np.random.default_rng(1).normal(size=v.shape) if k.startswith("b") else 0) for k, v in p.items()}
    rng = np.random.default_rng(0)
    return p, rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))


def test_pre_and_post_norm_layers_match_their_formulas(layer):
    p, q, kv = layer
    jp = {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}
    pre = cross_layer(jp, jnp.asarray(q, jnp.float32), jnp.asarray(kv, jnp.float32), 2, 0.0, None)
    x = q + _attend(p, _ln(q), _ln(kv), 2)
    np.testing.assert_allclose(np.asarray(pre), x + _ff(p, _ln(x)), rtol=1e-4, atol=1e-4)
    post = cross_layer(jp, jnp.asarray(q, jnp.float32), jnp.asarray(kv, jnp.float32), 2, 0.0, None, post_norm=True)
    x = _ln(q + _attend(p, q, kv, 2))  # the official TransformerEncoderLayer: norm after each residual
    np.testing.assert_allclose(np.asarray(post), _ln(x + _ff(p, x)), rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(post) - np.asarray(pre)).max() > 0.1


def test_masked_keys_are_ignored(layer):
    p, q, kv = layer
    jp = {k: jnp.asarray(v, jnp.float32) for k, v in p.items()}
    mask = jnp.asarray([[True, True, False, True, False], [True, False, False, False, False]])
    got = cross_layer(jp, jnp.asarray(q, jnp.float32), jnp.asarray(kv, jnp.float32), 2, 0.0, None, kv_mask=mask)
    for b in range(2):
        keep = np.asarray(mask[b])
        ref = cross_layer(jp, jnp.asarray(q[b:b + 1], jnp.float32), jnp.asarray(kv[b:b + 1, keep], jnp.float32),
                          2, 0.0, None)
        np.testing.assert_allclose(np.asarray(got[b]), np.asarray(ref[0]), rtol=1e-5, atol=1e-5)


def _model(**kw):
    cfg = configs.ModelConfig(d_model=8, num_heads=2, num_layers=1, proto_dim=8, dropout=0.0, **kw)
    return DecAlign(cfg, (4, 3, 5), rngs=nnx.Rngs(0))


def test_per_modality_dropout_hits_only_its_modality():
    rng = np.random.default_rng(0)
    t, a = jnp.asarray(rng.normal(size=(4, 6, 4)), jnp.float32), jnp.asarray(rng.normal(size=(4, 6, 3)), jnp.float32)
    v0 = jnp.zeros((4, 6, 5))  # dropout of zeros changes nothing
    key = jax.random.key(1)
    base = _model()
    assert base.input_rates() == (0.0, 0.0, 0.0)
    ev = base(t, a, v0, None)["out"]
    np.testing.assert_allclose(np.asarray(base(t, a, v0, key)["out"]), np.asarray(ev), rtol=1e-6)  # all rates 0
    vision_only = _model(input_dropout=(0.0, 0.0, 0.7))
    np.testing.assert_allclose(np.asarray(vision_only(t, a, v0, key)["out"]),
                               np.asarray(vision_only(t, a, v0, None)["out"]), rtol=1e-6)
    text_only = _model(input_dropout=(0.7, 0.0, 0.0))
    assert np.abs(np.asarray(text_only(t, a, v0, key)["out"])
                  - np.asarray(text_only(t, a, v0, None)["out"])).max() > 1e-3
    # attention dropout for audio's transformer only changes audio's fused output h_a (rep[:, d:2d])
    attn = _model(attn_dropout=(0.0, 0.5, 0.0))
    diff = np.abs(np.asarray(attn(t, a, v0, key)["rep"]) - np.asarray(attn(t, a, v0, None)["rep"]))
    assert diff[:, 8:16].max() > 1e-3 and diff[:, :8].max() < 1e-6 and diff[:, 16:].max() < 1e-6
    with pytest.raises(ConfigError, match="model.attn_dropout"):
        configs.ModelConfig(attn_dropout=(0.1, 1.0, 0.0))
    with pytest.raises(ConfigError, match="model.input_dropout"):
        configs.ModelConfig(input_dropout=(0.1, 0.2))


def _torch_adam_l2(p, grads, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    """torch.optim.Adam(weight_decay=wd) written out: g <- g + wd p, then the bias-corrected Adam step."""
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p


def test_adam_l2_matches_torch_adam_and_differs_from_adamw():
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=0.01, weight_decay=0.5, clip=100.0))
    p0 = np.array([1.0, -2.0, 0.5, 3.0])
    grads = [np.array([0.0, 0.1, -0.3, 0.2]), np.array([0.05, -0.1, 0.2, 0.0]), np.array([0.1, 0.1, 0.1, 0.1])]
    finals = {}
    for name in ("adam_l2", "adamw"):
        tx = train.make_optimizer(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optimizer=name)))
        p, st = jnp.asarray(p0, jnp.float32), None
        st = tx.init(p)
        for g in grads:
            u, st = tx.update(jnp.asarray(g, jnp.float32), st, p)
            p = optax.apply_updates(p, u)
        finals[name] = np.asarray(p)
    np.testing.assert_allclose(finals["adam_l2"], _torch_adam_l2(p0, grads, 0.01, 0.5), rtol=1e-5, atol=1e-6)
    assert np.abs(finals["adam_l2"] - finals["adamw"]).max() > 1e-3


def test_plateau_rule_and_lr_scale_in_the_optimizer():
    state = {"best": np.inf, "bad": 0, "scale": 1.0}
    scales = []
    for v in (1.0, 0.9, 0.95, 0.9, 0.91, 0.95, 0.95, 0.95, 0.8):  # 3 epochs without a better loss > patience 2
        state = train.plateau_update(state, v, patience=2, factor=0.1)
        scales.append(state["scale"])
    np.testing.assert_allclose(scales, [1, 1, 1, 1, 0.1, 0.1, 0.1, 0.01, 0.01])
    state = {"best": np.inf, "bad": 0, "scale": 1.0}
    for v in (1.0, 0.99995, 0.99992, 0.9999):  # each below the last, but within torch's 1e-4 relative threshold
        state = train.plateau_update(state, v, patience=2, factor=0.1)
    assert state["scale"] == pytest.approx(0.1)
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, scheduler="plateau", lr=0.01))
    tx = train.make_optimizer(cfg)
    p, g = jnp.ones(3), jnp.asarray([0.1, -0.2, 0.3])
    st = tx.init(p)
    full, _ = tx.update(g, st, p)
    st = train.set_lr_scale(st, 0.25)
    assert float(train.lr_scale(st)) == 0.25
    quarter, _ = tx.update(g, st, p)
    np.testing.assert_allclose(np.asarray(quarter), 0.25 * np.asarray(full), rtol=1e-6)


def test_moment_loss_mean_is_the_sum_over_three_pairs():
    z = jax.random.normal(jax.random.key(0), (3, 16, 4)) * jnp.array([1.0, 2.0, 0.5])[:, None, None]
    s = float(L.moment_loss(z, "sum"))
    assert s > 0
    np.testing.assert_allclose(float(L.moment_loss(z, "mean")), s / 3, rtol=1e-6)
    h_sum, _ = L.homogeneity_loss(z, 1.0, "sum")
    h_mean, info = L.homogeneity_loss(z, 1.0, "mean")
    np.testing.assert_allclose(float(h_sum - h_mean), 2 * s / 3, rtol=1e-5)


def test_failure_flags_and_constant_predictor():
    y_tr, y_va = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 2.0])
    assert train.constant_loss(y_tr, y_va, "mse") == pytest.approx(((1 - 1.5) ** 2 + (2 - 1.5) ** 2) / 2)
    assert train.constant_loss(y_tr, y_va, "l1") == pytest.approx(0.5)
    ce = train.constant_loss(np.array([0, 0, 1, 2]), np.array([0, 1]), "ce")  # add-one frequencies 3/7, 2/7, 2/7
    assert ce == pytest.approx(-(np.log(3 / 7) + np.log(2 / 7)) / 2)
    val = np.array([[1.0, 1.0, 0.5, 0.5],
                    [0.4, 0.9, 0.3, np.nan],
                    [0.5, 0.9, 0.7, 0.5],
                    [0.45, 0.95, 0.35, 0.5]])  # (epochs, runs)
    flags = train.flag_failures(val, constant=0.85, factor=2.0, patience=3)
    assert [f["failed"] for f in flags] == [False, True, True, True]
    assert "never below the constant" in flags[1]["failure"]
    assert "diverged to 0.7" in flags[2]["failure"]
    assert "non-finite" in flags[3]["failure"] and "epoch 2" in flags[3]["failure"]
    # a climb after the run early-stopped (past best epoch + patience) is not its failure
    late = np.array([[0.3], [0.4], [0.4], [5.0]])
    assert not train.flag_failures(late, 1.0, 2.0, patience=2)[0]["failed"]
    with pytest.raises(ConfigError, match="train.diverge_factor"):
        configs.TrainConfig(diverge_factor=1.0)


def test_oracles_on_generated_data():
    raw = D.generate(n_train=256, n_valid=64, n_test=64, seq_len=3, dim_text=4, dim_audio=3, dim_vision=3,
                     noise=0.5, seed=2)
    data = {s: {**D.check_split(raw[s], name=s), **{k: raw[s][k] for k in raw[s] if k.startswith("latent_")
                                                   or k == "clean_labels"}} for s in D.SPLITS}
    rows = oracle.latent_oracle(data, seeds=2, epochs=15)
    const_mae = np.mean(np.abs(data["test"]["labels"] - np.median(data["train"]["labels"])))
    assert len(rows) == 2 and all(r["mae"] < 0.8 * const_mae for r in rows)
    floor = oracle.clean_label_oracle(data)
    assert floor["mae"] == pytest.approx(
        np.mean(np.abs(raw["test"]["clean_labels"] - raw["test"]["regression_labels"])), rel=1e-5)
    assert floor["mae"] < min(r["mae"] for r in rows)
    with pytest.raises(BadInputError, match="latent_shared"):
        oracle.latent_oracle({s: D.check_split(raw[s], name=s) for s in D.SPLITS}, seeds=1)


def test_official_preset_and_overrides():
    off = EXPERIMENT.presets["official"]
    assert off.model.norm == "post" and off.model.attn_dropout == (0.1, 0.0, 0.0) and off.model.embed_dropout == 0.25
    assert off.train.optimizer == "adam_l2" and off.train.scheduler == "plateau" and off.loss.moment_pairs == "mean"
    cfg = apply_overrides(configs.tiny(),
                          ["model.norm=post", "model.input_dropout=0.1,0,0.2", "train.optimizer=adam_l2"])
    assert cfg.model.input_dropout == (0.1, 0.0, 0.2) and cfg.train.optimizer == "adam_l2"
    with pytest.raises(ConfigError, match="model.norm"):
        apply_overrides(configs.tiny(), ["model.norm=middle"])
