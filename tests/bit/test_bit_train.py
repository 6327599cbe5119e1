"""Encoder pieces against references, the losses, a sharded step, config errors, and the tiny run end to end."""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close
from scipy.special import gammaln
from scipy.stats import poisson

from bit import configs, losses, train
from bit.model import rope
from core import train as core_train
from core.config import ConfigError, apply_overrides
from core.sharding import batch_sharding, make_mesh, replicate, replicated, shard_batch


def test_rope_scores_depend_only_on_offset():
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 8)), jnp.float32)
    dot = lambda i, j: float((rope(q, jnp.array([i]), 1e4) * rope(k, jnp.array([j]), 1e4)).sum())  # noqa: E731
    np.testing.assert_allclose(dot(3, 1), dot(7, 5), rtol=1e-5)
    np.testing.assert_allclose(dot(0, 0), float((q * k).sum()), rtol=1e-5)


def test_poisson_nll_matches_scipy():
    rate = np.array([0.3, 1.5, 4.0])
    y = np.array([0.0, 2.0, 7.0])
    ours = np.asarray(losses.poisson_nll(jnp.log(jnp.asarray(rate)), jnp.asarray(y)))
    np.testing.assert_allclose(ours + gammaln(y + 1), -poisson.logpmf(y, rate), rtol=1e-5)


def test_span_mask_ratio_and_span_lengths():
    m = np.asarray(losses.span_mask(jax.random.key(0), 400, 60, 0.5, 15))
    assert 0.42 < m.mean() < 0.58
    none = np.asarray(losses.span_mask(jax.random.key(0), 4, 60, 0.0, 15))
    assert not none.any()
    one = np.asarray(losses.span_mask(jax.random.key(1), 400, 60, 0.3, 1))  # spans of one patch: i.i.d.
    assert 0.25 < one.mean() < 0.35


def test_config_errors_name_field_and_expectation():
    with pytest.raises(ConfigError, match="model.num_heads=3"):
        apply_overrides(configs.tiny(), ["model.num_heads=3"])
    with pytest.raises(ConfigError, match="data.alpha=2.0: expected a number in"):
        apply_overrides(configs.tiny(), ["data.alpha=2.0"])
    with pytest.raises(ConfigError, match="train.recon_loss='l1'"):
        apply_overrides(configs.tiny(), ["train.recon_loss=l1"])
    assert set(configs.PRESETS) == {"tiny", "demo", "cpu", "paper"}
    assert configs.paper().model.d_model == 384 and configs.paper().model.num_layers == 7


def _batch(cfg, n=8, seed=0):
    rng = np.random.default_rng(seed)
    t = 40
    return {"x": rng.normal(size=(n, t, train.NUM_FEATURES)).astype(np.float32),
            "counts": rng.poisson(0.5, (n, t, train.NUM_COUNTS)).astype(np.float32),
            "length": np.full(n, t, np.int32) - rng.integers(0, 10, n).astype(np.int32),
            "session": (np.arange(n) % 2).astype(np.int32), "dataset": np.zeros(n, np.int32),
            "labels": rng.integers(1, 41, (n, 64)).astype(np.int32), "label_length": np.full(n, 5, np.int32)}


def test_encoder_rejects_bad_shapes():
    cfg = configs.tiny()
    graphdef, params = train.init_model(cfg, 2, jax.random.key(0))
    from flax import nnx
    model = nnx.merge(graphdef, params)
    with pytest.raises(ValueError, match="expected \\(B, T, 256\\) with T a multiple of 5"):
        model.encode(jnp.zeros((1, 42, 256)), jnp.zeros(1, jnp.int32), jnp.array([42]))


def test_sharded_step_equals_single_device():
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.0))
    graphdef, params = train.init_model(cfg, 2, jax.random.key(0))
    tx = train.make_optimizer(1e-3, 10, 2, 1e-5)
    loss_fn = losses.make_ctc_loss(cfg, graphdef)
    batch = _batch(cfg)
    state = core_train.init_train_state(params, tx, jax.random.key(1))
    single, m1 = core_train.make_train_step(loss_fn, tx, donate=False)(state, batch)
    mesh = make_mesh(data=8)
    step = core_train.make_train_step(loss_fn, tx, donate=False, state_sharding=replicated(mesh),
                                      batch_sharding=batch_sharding(mesh))
    sharded, m8 = step(replicate(state, mesh), shard_batch(batch, mesh))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    assert_trees_close(jax.device_get(sharded.params), jax.device_get(single.params), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)


def test_pretraining_lowers_masked_poisson_nll():
    cfg = configs.tiny()
    graphdef, params = train.init_model(cfg, 2, jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in _batch(cfg).items()}
    loss_fn = losses.make_pretrain_loss(cfg, graphdef, jnp.ones((2, train.NUM_COUNTS)))
    tx = train.make_optimizer(1e-2, 30, 1, 0.0)
    run = jax.jit(train.make_scan_train(loss_fn, tx, steps=30, batch_size=8))
    _, curve = run(params, jax.random.key(2), batch, 8)
    assert float(curve[-5:].mean()) < float(curve[:5].mean())


def test_tiny_run_end_to_end(tmp_path, capsys):
    metrics = train.run(configs.tiny(), tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert (tmp_path / "losses.png").stat().st_size > 0
    assert list((tmp_path / "data").glob("*_attempted.mat")) and list((tmp_path / "data").glob("*_imagined.mat"))
    for key in ("per_greedy", "per_beam", "wer_cascade", "wer_greedy_lexicon", "imagined_per_greedy"):
        assert 0.0 <= saved[key] and np.isfinite(saved[key]), key
    assert saved["labelled"] == 16 and metrics["pretrained"]
    assert "truth:" in capsys.readouterr().out


def test_ctc_zero_infinity_drops_infeasible_trials():
    """As torch's zero_infinity: a trial whose labels cannot fit its frames adds 0 loss and 0 gradient; the
    feasible trial's loss is unchanged."""
    from flax import nnx
    cfg = configs.tiny()
    graphdef, params = train.init_model(cfg, 2, jax.random.key(0))
    b = {k: jnp.asarray(v[:2]) for k, v in _batch(cfg, n=2).items()}
    b["length"] = jnp.array([40, 10], jnp.int32)  # 40 bins -> 8 patches x 2 = 16 frames; 10 bins -> 4 frames
    b["label_length"] = jnp.array([5, 9], jnp.int32)  # trial 1: 9 labels in 4 frames, infeasible

    @functools.partial(jax.jit, static_argnums=2)
    def loss(p, batch, c=cfg):
        return losses.ctc_loss(nnx.merge(graphdef, p), batch, None, c, train=False)[0]

    first = {k: v[:1] for k, v in b.items()}
    second = {k: v[1:] for k, v in b.items()}
    np.testing.assert_allclose(float(loss(params, b)), float(loss(params, first)) / 2, rtol=1e-6)
    assert float(loss(params, second)) == 0.0
    grads = jax.jit(jax.grad(loss))(params, second)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))
    off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, ctc_zero_infinity=False))
    assert float(loss(params, second, off)) > 1e3  # optax's stand-in for an infinite loss


def test_pretraining_sees_threshold_crossings_only_by_default():
    cfg = dataclasses.replace(configs.tiny(), model=dataclasses.replace(configs.tiny().model, dropout=0.0))
    graphdef, params = train.init_model(cfg, 2, jax.random.key(0))
    batch = {k: jnp.asarray(v) for k, v in _batch(cfg).items()}
    other_sbp = {**batch, "x": batch["x"].at[:, :, 128:].set(5.0)}  # columns 128.. are spike-band power
    mask = jnp.ones((2, train.NUM_COUNTS))
    for features, same in (("tx", True), ("tx+sbp", False)):
        c = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, pretrain_features=features))
        loss_fn = losses.make_pretrain_loss(c, graphdef, mask)
        a = float(loss_fn(params, batch, jax.random.key(3))[0])
        b = float(loss_fn(params, other_sbp, jax.random.key(3))[0])
        assert (a == b) is same, (features, a, b)
    np.testing.assert_array_equal(train.pretrain_feature_mask(configs.tiny()), np.arange(256) < 128)


def test_tiny_run_on_the_b2t25_layout(tmp_path):
    """The '25 layout end to end: simulated sessions written as hdf5 (512 features, no counts), MSE pretraining
    on the 256 threshold-crossing columns, CTC, decoding."""
    cfg = apply_overrides(configs.tiny(), ["data.layout=b2t25", "data.num_features=512", "train.recon_loss=mse"])
    out = train.run(cfg, tmp_path)
    assert list((tmp_path / "data").glob("*_attempted.hdf5")) and not list((tmp_path / "data").glob("*.mat"))
    for key in ("per_greedy", "per_beam", "wer_cascade", "imagined_per_greedy"):
        assert np.isfinite(out[key]) and out[key] >= 0.0, key
    assert train.feature_sizes(cfg) == (512, 512)
    np.testing.assert_array_equal(train.pretrain_feature_mask(cfg), np.arange(512) < 256)
