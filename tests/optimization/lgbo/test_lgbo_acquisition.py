"""LogEI against mpmath, qLogEI against analytic EI, and the candidate / batch / pool / refine selection."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

from optimization import gp
from optimization.lgbo import acquisition, model
from optimization.lgbo.space import Categorical, Continuous, Space, sobol


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def test_log_h_matches_mpmath_over_the_whole_range():
    zs = np.array([-1e9, -1e5, -300.0, -40.0, -12.0, -5.0, -1.5, -1.0, -0.5, 0.0, 0.7, 3.0, 20.0])
    mpmath.mp.dps = 50

    def ref(z):
        z = mpmath.mpf(z)
        return float(mpmath.log(mpmath.npdf(z) + z * mpmath.ncdf(z)))

    got = np.asarray(jax.jit(acquisition.log_h)(jnp.asarray(zs)))
    want = np.array([ref(z) for z in zs])
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert np.all(np.isfinite(np.asarray(jax.jit(jax.vmap(jax.grad(acquisition.log_h)))(jnp.asarray(zs)))))


def test_log_ei_is_log_of_closed_form_ei():
    mean, var, best = np.array([0.3, -0.2, 1.5]), np.array([0.5, 0.04, 2.0]), 0.4
    sd = np.sqrt(var)
    z = (mean - best) / sd
    ei = sd * (stats.norm.pdf(z) + z * stats.norm.cdf(z))
    np.testing.assert_allclose(acquisition.log_ei(jnp.asarray(mean), jnp.asarray(var), best), np.log(ei), rtol=1e-10)


def test_qlog_ei_with_one_point_matches_analytic_ei():
    base = acquisition.qmc_normal(4096, 1, seed=3)
    for mean, var, best in [(0.2, 0.3, 0.5), (1.0, 0.1, 0.2), (-1.0, 1.0, 0.0)]:
        got = float(acquisition.qlog_ei(jnp.asarray([mean]), jnp.asarray([[var]]), best, base, jnp.ones(1)))
        want = float(acquisition.log_ei(jnp.asarray(mean), jnp.asarray(var), best))
        assert abs(math.exp(got) / math.exp(want) - 1) < 0.01, (mean, var, got, want)


def _surrogate(d=2, n=6, n_max=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n_max, d))
    mask = (np.arange(n_max) < n).astype(np.float64)
    y = np.where(mask > 0, np.sin(6 * x[:, 0]) * np.cos(3 * x[:, -1]), 0.0)
    params = gp.GPParams(jnp.full((d,), 0.25), jnp.asarray(1e-3), jnp.asarray(0.0))
    post = gp.posterior(params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask))
    grid = jnp.asarray(sobol(64, d, seed=1))
    region = model.Region(jnp.full((d,), 0.1), jnp.full((d,), 0.5), jnp.asarray(0.8), jnp.asarray(False))
    lift = model.make_lift(post, region, grid, grid)
    best = jnp.asarray(y[:n].max())
    return jax.tree.map(lambda a: a[None], (post, lift)), best


@pytest.fixture(scope="module")
def suggest_jit():
    return jax.jit(acquisition.suggest, static_argnames=("settings",))


def test_argmax_over_candidates_matches_brute_force(suggest_jit):
    with jax.enable_x64(True):
        (posts, lifts), best = _surrogate()
        cands = jnp.asarray(sobol(256, 2, seed=4))
        avail = jnp.ones(256, bool).at[:100].set(False)
        x, idx, val = suggest_jit(posts, lifts, best, cands, avail, jnp.ones(2), acquisition.qmc_normal(64, 1),
                                  acquisition.AcqSettings(q=1))
        post, lift = jax.tree.map(lambda a: a[0], (posts, lifts))
        mean, var = model.lifted_predict(post, lift, cands)
        scores = np.where(np.asarray(avail), np.asarray(acquisition.log_ei(mean, var, best)), -np.inf)
        assert int(idx[0]) == int(np.argmax(scores)) and int(idx[0]) >= 100
        np.testing.assert_allclose(val[0], scores.max(), rtol=1e-10)


def test_batch_picks_distinct_available_pool_rows(suggest_jit):
    with jax.enable_x64(True):
        (posts, lifts), best = _surrogate()
        cands = jnp.asarray(sobol(64, 2, seed=5))
        avail = jnp.ones(64, bool).at[::2].set(False)
        x, idx, val = suggest_jit(posts, lifts, best, cands, avail, jnp.ones(2), acquisition.qmc_normal(256, 3),
                                  acquisition.AcqSettings(q=3))
        idx = np.asarray(idx)
        assert len(set(idx.tolist())) == 3 and np.all(idx % 2 == 1)
        np.testing.assert_array_equal(x, np.asarray(cands)[idx])
        assert np.all(np.isfinite(np.asarray(val)))


def test_refined_points_stay_feasible_with_categoricals(suggest_jit):
    space = Space((Continuous(name="a", low=0, high=1), Categorical(name="c", options=("x", "y", "z"))))
    with jax.enable_x64(True):
        (posts, lifts), best = _surrogate(d=space.dim)
        cands = space.encode_unit(space.snap_unit(jnp.asarray(sobol(64, 2, seed=6))))
        x, idx, val = suggest_jit(posts, lifts, best, cands, jnp.ones(64, bool), jnp.asarray(space.continuous_mask()),
                                  acquisition.qmc_normal(128, 1), acquisition.AcqSettings(q=1, refine_starts=4,
                                                                                          refine_steps=10))
        x = np.asarray(x)
        assert np.all((x >= 0) & (x <= 1))
        np.testing.assert_array_equal(np.sort(x[:, 1:], axis=1), [[0, 0, 1]])  # valid one-hot
        for xi in x:
            vals = space.decode(xi)
            assert vals[1] in ("x", "y", "z") and 0 <= vals[0] <= 1
        # refinement never lowers the first pick's acquisition below the best candidate's
        scores = acquisition.surrogate_log_ei(posts, lifts, best, cands)
        assert float(val[0]) >= float(scores.max()) - 1e-12
