"""Issue 43's metrics on hand cases (z-diversity at a fixed condition, consistency over the real spread), the
collapse remedy's parts (minibatch stddev, mapping lr multiplier, arm flags) and single-view inversion."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.config import BadInputError
from generative.headgan import configs, metrics, train
from generative.headgan.data import prepare
from generative.headgan.model import minibatch_std
from generative.headgan.render import NUM_PARAMS, render_batch


def test_group_pairwise_distance_hand_cases():
    same = np.repeat(np.random.default_rng(0).normal(size=(5, 1, 7)), 4, 1)  # collapsed groups
    assert metrics.group_pairwise_distance(same) == 0.0
    two = np.array([[[0.0, 0.0], [3.0, 4.0]], [[1.0, 1.0], [1.0, 1.0]]])  # distances 5 and 0
    assert metrics.group_pairwise_distance(two) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="at least 2"):
        metrics.group_pairwise_distance(np.zeros((3, 1, 2)))


def test_cross_view_spread_uses_the_real_scale():
    """All heads identical (collapse) and the attributes vary over views with std 0.5: normalised by the generator's
    own spread the collapsed G looks perfectly 'consistent-relative' (1 here, whatever the view noise); normalised by
    the real heads' std of 2 it reads 0.25, and a coherent G (no variation over views) reads 0."""
    views = np.array([-0.5, 0.5] * 4)
    attrs = np.broadcast_to(views[None, :, None], (6, 8, 3))
    assert metrics.cross_view_spread(attrs) == pytest.approx(1.0)
    assert metrics.cross_view_spread(attrs, np.full(3, 2.0)) == pytest.approx(0.25, rel=1e-6)
    coherent = np.broadcast_to(np.arange(6.0)[:, None, None], (6, 8, 3))
    assert metrics.cross_view_spread(coherent, np.full(3, 2.0)) == 0.0


def test_minibatch_std():
    x = jax.random.normal(jax.random.key(0), (8, 4, 4, 3))
    same = jnp.broadcast_to(x[:1], x.shape)
    assert float(jnp.max(minibatch_std(same, 4))) < 1e-3  # sqrt(1e-8) where every member is equal
    s = minibatch_std(x, 4)
    assert s.shape == (8, 4, 4, 1)
    np.testing.assert_allclose(np.asarray(s[0, 0, 0, 0]),
                               np.sqrt(np.asarray(x[:4]).var(0) + 1e-8).mean(), rtol=1e-5)
    assert float(s[0, 0, 0, 0]) == float(s[3, 2, 1, 0]) != float(s[4, 0, 0, 0])  # one value per group
    with pytest.raises(ValueError, match="must divide"):
        minibatch_std(x[:6], 4)


def test_arm_flags_switches_and_errors():
    a = configs.parse_arm("camera/balanced+fix+gpc=0.5")
    assert (a.mbstd, a.maplr, a.gpc, a.vicico) == (True, True, 0.5, False)
    for text in ("camera/balanced+fix+gpc=0.5", "semantic/imbalanced+vicico+mbstd", "none/balanced+maplr"):
        assert configs.parse_arm(text).name == text
    cfg = configs.bench()
    f32 = lambda *v: np.array(v, np.float32)  # noqa: E731
    np.testing.assert_array_equal(train.arm_switches(cfg, "camera/balanced+fix+gpc=0"),
                                  f32(1, 0, 1, 0, 0, 0, 1, cfg.train.map_lr_mult))
    np.testing.assert_array_equal(train.arm_switches(cfg, "semantic/balanced+gpc=0.5"),  # GPC: camera G only
                                  f32(0, 1, 1, 1, 0, 0, 0, 1))
    with pytest.raises(BadInputError, match="gpc='2'"):
        configs.parse_arm("camera/balanced+gpc=2")
    with pytest.raises(BadInputError, match="unknown flag 'fixx'"):
        configs.parse_arm("camera/balanced+fixx")
    with pytest.raises(BadInputError, match="model.mbstd_group"):
        dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, mbstd_group=3))


def test_scale_mapping_touches_only_the_mapping_network():
    cfg = configs.tiny()
    _, init = train.make_models(cfg)
    g = jax.eval_shape(init, jax.random.key(0))["g"]  # shapes only: no eager init
    ones = jax.tree.map(lambda x: jnp.ones(x.shape, x.dtype), g)
    scaled = train.scale_mapping(ones, 0.01)
    n_scaled = 0
    leaves = jax.tree_util.tree_leaves_with_path
    for (path, u), (_, v) in zip(leaves(scaled), leaves(ones)):
        top = path[0].key
        expected = 0.01 if top in train.MAPPING else 1.0
        np.testing.assert_allclose(np.asarray(u), expected * np.asarray(v))
        n_scaled += top in train.MAPPING
    assert n_scaled >= 4  # cond embedding + the mapping MLP's kernels and biases


@pytest.fixture(scope="module")
def tiny_eval():
    cfg = configs.tiny()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, eval_samples=64))
    heads, metrics.XVIEW_HEADS = metrics.XVIEW_HEADS, 16  # fewer renders for the cross-view metric
    prepared = prepare(cfg.data, cfg.encoder)
    yield cfg, metrics.Evaluator(cfg, prepared)
    metrics.XVIEW_HEADS = heads


def _render_generator(params_fn):
    """A fake `generate` rendering HeadsLite heads: params_fn(n) gives the identities (ignoring z and cond)."""
    def generate(gp, z, cond, yaw, pitch):
        rgb, mask = render_batch(params_fn(z.shape[0]), jnp.asarray(yaw), jnp.asarray(pitch), res=16)
        return rgb * 2 - 1, mask
    return generate


def test_z_diversity_collapsed_is_zero_and_data_like_is_one(tiny_eval):
    cfg, ev = tiny_eval
    one = jax.random.uniform(jax.random.key(3), (1, NUM_PARAMS))
    collapsed = ev.evaluate(_render_generator(lambda n: jnp.repeat(one, n, 0)), None, "camera/balanced")
    assert collapsed["zdiv"] == 0.0 and collapsed["zdiv_pix"] == 0.0
    counter = itertools.count()
    fresh = _render_generator(lambda n: jax.random.uniform(jax.random.key(100 + next(counter)), (n, NUM_PARAMS)))
    data_like = ev.evaluate(fresh, None, "camera/balanced")
    for b in metrics.BINS:  # random identities at one camera: the data's own spread (16 groups of 4)
        assert 0.7 < data_like[f"zdiv_{b}"] < 1.4, (b, data_like[f"zdiv_{b}"])
        assert 0.7 < data_like[f"zdiv_pix_{b}"] < 1.4, (b, data_like[f"zdiv_pix_{b}"])
    # cross-view consistency over the REAL spread: fresh identities at every view are incoherent heads
    assert data_like["xview_spread"] > 1.2 * data_like["real_xview_spread"]


@pytest.fixture(scope="module")
def tiny_g():
    """The tiny preset's generator at init (one compile of `init`, shared by the inversion and w/z tests)."""
    graphdefs, init = train.make_models(configs.tiny())
    return graphdefs, jax.jit(init)(jax.random.key(0))["g"]


def test_single_view_inversion_fits_the_input(tiny_eval, tiny_g):
    cfg, ev = tiny_eval
    graphdefs, gp = tiny_g
    inv = metrics.make_inverter(cfg, graphdefs["g"], steps=15, lr=0.05)
    gen_w = metrics.make_generate_w_fn(cfg, graphdefs["g"])
    out = metrics.inversion_scores(cfg, ev, gen_w, inv, gp, "semantic/balanced", n=4)
    assert all(np.isfinite(v) for v in out.values()), out
    assert out["inv_input_mse"] < out["mean_head_input_mse"]  # the optimiser fits the one view it sees
    assert out["inv_heldout_mse"] > 0 and out["inv_heldout_attr_err"] > 0


def test_w_z_share(tiny_g):
    """One condition for all: every bit of w's variance comes from z (share 1); at init both paths contribute."""
    cfg = configs.tiny()
    graphdefs, gp = tiny_g
    cond = jax.random.normal(jax.random.key(1), (16, 4 + cfg.encoder.sem_dim))
    assert metrics.w_z_share(cfg, graphdefs["g"], gp, jnp.repeat(cond[:1], 16, 0)) == pytest.approx(1.0, abs=1e-5)
    assert 0.05 < metrics.w_z_share(cfg, graphdefs["g"], gp, cond) < 0.95
