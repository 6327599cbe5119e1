"""The region lift: the tilted posterior mean against a closed-form tilted Gaussian, the region's average
lift against Phi^-1(c) posterior standard deviations, and the region-size rules."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from optimization import gp
from optimization.lgbo import model
from optimization.lgbo.space import sobol


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def np_matern52(a, b, ls):
    r = np.sqrt(np.sum(((a[:, None, :] - b[None, :, :]) / ls) ** 2, -1))
    return (1 + math.sqrt(5) * r + 5 / 3 * r ** 2) * np.exp(-math.sqrt(5) * r)


def setup(n_grid=16, seed=0):
    rng = np.random.default_rng(seed)
    n, n_max, d = 5, 8, 2
    x = rng.uniform(size=(n_max, d))
    y = np.where(np.arange(n_max) < n, np.sin(5 * x[:, 0]) + x[:, 1], 0.0)
    mask = (np.arange(n_max) < n).astype(np.float64)
    params = gp.GPParams(jnp.asarray([0.15, 0.2]), jnp.asarray(1e-2), jnp.asarray(0.0))
    post = gp.posterior(params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask))
    grid = sobol(n_grid, d, seed=5)
    return post, x[:n], y[:n], np.asarray(params.lengthscale), 1e-2, grid


def np_posterior(xa, xb, xobs, yobs, ls, noise):
    k = np_matern52(xobs, xobs, ls) + noise * np.eye(len(xobs))
    ka, kb = np_matern52(xa, xobs, ls), np_matern52(xb, xobs, ls)
    mean = ka @ np.linalg.solve(k, yobs)
    cov = np_matern52(xa, xb, ls) - ka @ np.linalg.solve(k, kb.T)
    return mean, cov


def test_tilted_mean_equals_closed_form_tilted_gaussian():
    post, xo, yo, ls, noise, grid = setup()
    region = model.Region(jnp.asarray([0.2, 0.1]), jnp.asarray([0.8, 0.9]), jnp.asarray(0.9), jnp.asarray(False))
    lift = model.make_lift(post, region, jnp.asarray(grid), jnp.asarray(grid))
    xs = np.random.default_rng(9).uniform(size=(3, 2))
    # joint posterior of Z = (f(xs), f(G)); tilt p(Z) exp(lam b^T Z) with b = (0, a); complete the square
    z = np.concatenate([xs, grid])
    mu, cov = np_posterior(z, z, xo, yo, ls, noise)
    b = np.concatenate([np.zeros(3), np.asarray(lift.a)])
    prec = np.linalg.inv(cov)
    tilted = np.linalg.solve(prec, prec @ mu + float(lift.lam) * b)
    mean, var = model.lifted_predict(post, lift, jnp.asarray(xs))
    np.testing.assert_allclose(mean, tilted[:3], atol=1e-7, rtol=0)
    np.testing.assert_allclose(var, np.diag(cov)[:3], atol=1e-8, rtol=0)  # covariance unchanged


@pytest.mark.parametrize("c", [0.3, 0.6, 0.84, 0.97])
def test_region_average_rises_by_phi_inv_c_posterior_sds(c):
    post, xo, yo, ls, noise, grid = setup(n_grid=64)
    region = model.Region(jnp.asarray([0.1, 0.3]), jnp.asarray([0.6, 0.9]), jnp.asarray(c), jnp.asarray(False))
    lift = model.make_lift(post, region, jnp.asarray(grid), jnp.asarray(grid))
    a = np.asarray(lift.a)
    _, cov_gg = np_posterior(grid, grid, xo, yo, ls, noise)
    sd = math.sqrt(a @ cov_gg @ a)
    lift_avg = a @ np.asarray(model.shift(post, lift, jnp.asarray(grid)))
    np.testing.assert_allclose(float(lift.region_sd), sd, rtol=1e-8)
    np.testing.assert_allclose(lift_avg, stats.norm.ppf(c) * sd, rtol=1e-8, atol=1e-12)


def test_no_preference_is_no_shift_and_confidence_is_clamped():
    post, *_, grid = setup()
    g = jnp.asarray(grid)
    lift = model.make_lift(post, model.no_region(2), g, g)
    assert float(lift.lam) == 0.0
    np.testing.assert_array_equal(model.shift(post, lift, g), 0.0)
    for c in (0.0, 1.0):
        r = model.Region(jnp.asarray([0.2, 0.2]), jnp.asarray([0.7, 0.7]), jnp.asarray(c), jnp.asarray(False))
        lam = float(model.make_lift(post, r, g, g).lam)
        assert math.isfinite(lam) and abs(lam * float(model.make_lift(post, r, g, g).region_sd)) == pytest.approx(
            stats.norm.ppf(1 - model.C_EPS), rel=1e-9)


def test_region_size_rules():
    grid = jnp.asarray(sobol(512, 2, seed=3))
    # E >= 6: hard box, uniform weights on the grid points inside
    r = model.Region(jnp.asarray([0.0, 0.0]), jnp.asarray([0.5, 0.25]), jnp.asarray(0.8), jnp.asarray(False))
    a, e = model.region_weights(r, grid)
    inside = np.all((np.asarray(grid) >= [0, 0]) & (np.asarray(grid) <= [0.5, 0.25]), -1)
    assert float(e) == pytest.approx(64.0)
    np.testing.assert_allclose(a, inside / inside.sum(), atol=1e-15)
    # 2 <= E < 6: soft box (every weight positive, more weight inside)
    r = model.Region(jnp.asarray([0.4, 0.4]), jnp.asarray([0.5, 0.48]), jnp.asarray(0.8), jnp.asarray(False))
    a, e = model.region_weights(r, grid)
    assert 2.0 <= float(e) < 6.0 and np.all(np.asarray(a) > 0)
    # E < 2 (and a point answer): the box around the centre with E ~ 2.05, soft
    tiny = model.Region(jnp.asarray([0.3, 0.6]), jnp.asarray([0.31, 0.61]), jnp.asarray(0.8), jnp.asarray(False))
    point = model.Region(jnp.asarray([0.305, 0.605]), jnp.asarray([0.305, 0.605]), jnp.asarray(0.8), jnp.asarray(True))
    a1, e1 = model.region_weights(tiny, grid)
    a2, e2 = model.region_weights(point, grid)
    assert float(e1) == pytest.approx(model.POINT_E, rel=1e-6) and float(e2) == pytest.approx(model.POINT_E, rel=1e-6)
    np.testing.assert_allclose(a1, a2, atol=1e-12)
    # a point in a corner: the clipped box still holds E ~ 2.05
    lb, ub = model.point_box(jnp.asarray([0.0, 1.0]), 512)
    assert 512 * float(jnp.prod(ub - lb)) == pytest.approx(model.POINT_E, rel=1e-6)
