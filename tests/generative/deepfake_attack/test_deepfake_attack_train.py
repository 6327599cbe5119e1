"""Attribution models learn a 3-class toy attribution; a sharded attribution step equals the single-device
one; data pools and config errors (the attack trainers: test_deepfake_attack_attacks)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close

from core import sharding
from core.config import ConfigError, apply_overrides
from core.train import init_train_state, make_train_step
from generative.deepfake_attack import configs, ops
from generative.deepfake_attack import train as T
from generative.deepfake_attack.data import load_digits_images, load_pools

AM = configs.AMConfig(width=8, hidden=32, steps=400, batch_size=32)


def _toy_attribution(n=200, seed=0):
    """Real digits (class 0), digits + a faint checkerboard (class 1), blurred digits (class 2), 16x16."""
    x, _ = load_digits_images(16)
    rng = np.random.default_rng(seed)
    x = x[rng.permutation(len(x))[: 3 * n]]
    checker = (np.indices((16, 16)).sum(0) % 2)[None, :, :, None].astype(np.float32)
    c1 = np.round(np.clip(x[n:2 * n] + 0.06 * checker, 0, 1) * 255) / 255
    c2 = np.asarray(ops.quantize8(ops.gaussian_blur(jnp.asarray(x[2 * n:]), 0.8)))
    return np.concatenate([x[:n], c1, c2]), np.repeat(np.arange(3, dtype=np.int32), n)


@pytest.fixture(scope="module")
def trained():
    """The attribution models trained once on the toy attribution (450 training images, 150 held out)."""
    x, y = _toy_attribution()
    perm = np.random.default_rng(1).permutation(len(x))
    x, y = x[perm], y[perm]
    tr, te = slice(0, 450), slice(450, 600)
    graphdefs, params, losses = T.train_attributors(AM, x[tr], y[tr], 3, jax.random.key(0))
    return x, y, tr, te, graphdefs, params, losses


def test_attribution_models_learn_a_three_class_toy_attribution(trained):
    x, y, tr, te, graphdefs, params, losses = trained
    assert losses.shape == (AM.steps,) and float(losses[-10:].mean()) < float(losses[:10].mean())
    logits = jax.jit(lambda p, xb: T.am_logits(graphdefs, p, xb, AM.dct_block))(params, x[te])
    for name, lg in logits.items():
        acc = float(np.mean(np.argmax(np.asarray(lg), -1) == y[te]))
        assert acc > 0.9, f"{name}: toy attribution accuracy {acc:.2f}"


def test_mlp_input_standardisation_is_set_from_training_features_and_never_trained(trained):
    # the training run of the test above (its 450 training images), not a second one
    x, _, tr, _, _, params, _ = trained
    x, am = x[tr], AM
    _, fresh = T.build_attributors(am, 16, 3, jax.random.key(0))
    for name in T.MLP_ATTRIBUTORS:
        feats = np.asarray(T.am_input(name, jnp.asarray(x), am.dct_block))
        np.testing.assert_allclose(np.asarray(params[name]["input_mean"][...]), feats.mean(0), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(params[name]["input_std"][...]),
                                   np.maximum(feats.std(0), T.INPUT_STD_FLOOR), rtol=1e-4, atol=1e-4)
        assert np.all(np.asarray(fresh[name]["input_mean"][...]) == 0)  # the initial params were not mutated
        # the layers did train
        trained, initial = params[name]["l1"]["kernel"][...], fresh[name]["l1"]["kernel"][...]
        assert not np.allclose(np.asarray(trained), np.asarray(initial))


def test_sharded_attribution_step_equals_single_device():
    graphdefs, params = T.build_attributors(AM, 16, 3, jax.random.key(0))
    loss_fn = T.make_am_loss(graphdefs, AM)
    tx = T.am_optimizer(AM)
    rng = np.random.default_rng(0)
    batch = {"image": rng.uniform(size=(16, 16, 16, 1)).astype(np.float32),
             "label": rng.integers(0, 3, 16).astype(np.int32)}
    state = init_train_state(params, tx, jax.random.key(1))
    single, m1 = make_train_step(loss_fn, tx, donate=False)(state, batch)
    mesh = sharding.make_mesh(data=8)
    rep = sharding.replicated(mesh)
    step = make_train_step(loss_fn, tx, donate=False, state_sharding=rep, batch_sharding=sharding.batch_sharding(mesh))
    multi, m8 = step(sharding.replicate(state, mesh), sharding.shard_batch(batch, mesh))
    assert len(jax.tree.leaves(multi.params)[0].sharding.device_set) == 8
    assert_trees_close(jax.device_get(multi.params), jax.device_get(single.params), atol=1e-5, rtol=1e-5)
    assert float(m8["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-5)


def test_pools_are_disjoint_and_errors_name_the_value():
    cfg = configs.tiny().data
    pools = load_pools(cfg)
    idx = [set(pools[p]["index"].tolist()) for p in ("gm", "am", "attack", "eval")]
    assert sum(map(len, idx)) == len(set().union(*idx)) == cfg.n_gm + cfg.n_am + cfg.n_attack + cfg.n_eval
    assert pools["gm"]["image"].shape == (cfg.n_gm, 16, 16, 1)
    with pytest.raises(ValueError, match="expected at most 1797"):
        load_pools(dataclasses.replace(cfg, n_gm=5000))
    with pytest.raises(ConfigError, match="data.image_size=30"):
        apply_overrides(configs.tiny(), ["data.image_size=30"])
    with pytest.raises(ConfigError, match="attack.eps=1.5"):
        apply_overrides(configs.tiny(), ["attack.eps=1.5"])
    with pytest.raises(ConfigError, match="attack.readings"):
        apply_overrides(configs.tiny(), ["attack.readings=['mult']"])
    with pytest.raises(ValueError, match="data.folder"):
        load_pools(configs.DataConfig(source="folder", folder="/nonexistent", image_size=16))
    with pytest.raises(ConfigError, match="defence.defences"):
        configs.DefenceConfig(defences=("blur",))
