"""Issue 42: ordinal encoding of numeric-level pools, the exact random-search reference, the reference code's
soft box, and the piBO arm of the simulated experiment."""

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from core.config import BadInputError
from optimization.lgbo import configs, model, train
from optimization.lgbo.data import Problem, get_problem
from optimization.lgbo.space import Continuous, Ordinal, Space, sobol


def test_lnp3_numeric_levels_are_ordinal_and_lipid_one_hot():
    ordinal, onehot = get_problem("lnp3"), get_problem("lnp3", ordinal=False)
    kinds = [type(p).__name__ for p in ordinal.space.params]
    assert kinds == ["Ordinal", "Categorical", "Ordinal", "Ordinal", "Ordinal"]
    assert ordinal.space.dim == 4 + 3 and onehot.space.dim == 4 + 3 + 4 + 4 + 4
    np.testing.assert_array_equal(ordinal.pool_y, onehot.pool_y)
    # one row by hand: drug_input 24 -> (24 - 6) / 42; surfactant 0.005 -> 0.5; solid_lipid_input 96 -> 0.5
    x = ordinal.space.encode(["24", "Compritol_888", "96", "12", "0.005"])
    np.testing.assert_allclose(x, [18 / 42, 0, 1, 0, (96 - 72) / 48, 12 / 48, 0.5], atol=1e-12)
    # every pool row decodes back to its values; the JSON spec keeps the type
    for i in range(0, len(ordinal.pool_x), 37):
        assert ordinal.space.decode(ordinal.pool_x[i]) == ordinal.space.from_unit(ordinal.pool_u[i])
    again = Space.from_json(ordinal.space.to_json())
    assert again == ordinal.space
    with pytest.raises(BadInputError, match="numbers"):
        Ordinal(name="o", options=("low", "high"))


def _pool(y):
    y = np.asarray(y, np.float64)
    space = Space((Continuous(name="x", low=0.0, high=1.0),))
    u = np.linspace(0.05, 0.95, len(y))[:, None]
    return Problem(name="toy", space=space, optimum=float(y.max()), floor=0.0, optimum_u=u[np.argmax(y)],
                   poor_u=u[np.argmin(y)], pool_x=u, pool_u=u, pool_y=y)


def test_random_search_expectation_equals_brute_force():
    y = [0.1, 0.95, 0.3, 0.92, 0.5, 0.2, 0.3]
    prob = _pool(y)
    cfg = dataclasses.replace(configs.tiny(), n_init=2, iterations=3, target=0.9)
    rs = train.random_search_expected(prob, cfg)
    perms = list(itertools.permutations(range(len(y))))
    yy = np.asarray(y)[np.asarray(perms)]                                # every draw order, equally likely
    best = np.maximum.accumulate(yy, axis=1)[:, cfg.n_init - 1: cfg.n_init + cfg.iterations]   # (perms, 4)
    np.testing.assert_allclose(rs["curve_mean"], best.mean(0) / 0.95, rtol=1e-12)
    hit = best >= 0.9 * 0.95
    ttt = np.where(hit.any(1), hit.argmax(1), cfg.iterations + 1)
    assert rs["iters_to_target_mean"] == pytest.approx(ttt.mean(), rel=1e-12)
    assert rs["reached_target"] == pytest.approx(hit[:, -1].mean(), rel=1e-12)
    # LNP3 at the benchmark's budget: random sampling reaches 90 % in about 13 rows on average
    lnp3 = train.random_search_expected(get_problem("lnp3"), dataclasses.replace(cfg, iterations=30))
    assert 8 < lnp3["iters_to_target_mean"] < 20


def test_reference_soft_box_weights_by_hand():
    grid = jnp.asarray(sobol(256, 2, seed=3))
    region = model.Region(jnp.asarray([0.2, 0.2]), jnp.asarray([0.7, 0.7]), jnp.asarray(0.8), jnp.asarray(False))
    hard, e = model.region_weights(region, grid)
    assert float(e) > model.HARD_E and set(np.unique(np.asarray(hard) > 0)) == {False, True}
    soft, _ = model.region_weights(region, grid, model.REFERENCE_SOFTNESS, True)
    g = np.asarray(grid)
    sig = lambda z: 1 / (1 + np.exp(-z))
    ref = np.prod(sig((g - 0.2) / 0.06) * sig((0.7 - g) / 0.06), axis=-1)
    np.testing.assert_allclose(np.asarray(soft), ref / ref.sum(), rtol=1e-6)
    assert np.all(np.asarray(soft) > 0)                    # never hard: every grid point keeps some weight


def test_pibo_prior_steers_the_first_pick_to_the_prior_centre():
    """With a huge beta the prior term dominates LogEI: piBO's first BO pick is the pool row nearest the prior
    centre (the optimum, jitter 0), so it reaches 100 % after one iteration; plain BO need not."""
    cfg = dataclasses.replace(configs.tiny(), problems=("lnp3",), arms=("none", "pibo"), seeds=4, seed_batch=4,
                              iterations=1, fit_steps=3, jitter=0.0, pibo_beta=1e6)
    prob = get_problem("lnp3")
    curves = train.run_problem(prob, cfg)               # (arms, seeds, 2)
    np.testing.assert_allclose(curves[1, :, 1], prob.optimum)
    assert np.any(curves[0, :, 1] < prob.optimum)
