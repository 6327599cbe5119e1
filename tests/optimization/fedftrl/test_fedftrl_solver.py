"""The FTRL argmin: KKT conditions on random and near-degenerate inputs, closed-form limits, autodiff gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from optimization.fedftrl.ftrl import ftrl_log_argmin, kkt_residual, regulariser, regulariser_grad


def _cases(rng, n=1500, K=20):
    """Random inputs over many scales plus near-degenerate ones (ties, huge gaps, one regulariser ~off)."""
    scale = 10 ** rng.uniform(-3, 6, (n, 1))
    L = rng.uniform(0, 1, (n, K)) * scale * (rng.uniform(size=(n, K)) < 0.6)
    a = 10 ** rng.uniform(-3, 3, n)
    b = 10 ** rng.uniform(-3, 5, n)
    m = n // 6
    L[:m] = 0.0                                           # all arms tied: uniform
    L[m:2 * m, 1:] = 1e7                                  # one arm far ahead: the others at ~1e-10 or below
    a[2 * m:3 * m] = 0.0                                  # pure negative entropy
    b[3 * m:4 * m] = 0.0                                  # pure 1/2-Tsallis
    a[4 * m:5 * m] = 1e-9                                 # Tsallis part negligible
    L[5 * m:, 1] = L[5 * m:, 0]                           # two exactly tied arms
    return L, a, b


@pytest.mark.parametrize("method", ["bisection", "newton"])
def test_kkt_conditions_hold_to_1e6(method):
    rng = np.random.default_rng(0)
    L, a, b = _cases(rng)
    with jax.enable_x64(True):
        f = jax.jit(lambda L, a, b: ftrl_log_argmin(L, a, b, method=method))
        lx = f(jnp.asarray(L), jnp.asarray(a), jnp.asarray(b))
        assert lx.dtype == jnp.float64
        mass_err, spread = kkt_residual(lx, jnp.asarray(L), jnp.asarray(a), jnp.asarray(b))
        assert float(jnp.max(mass_err)) < 1e-6
        assert float(jnp.max(spread)) < 1e-6
        assert bool(jnp.all(lx <= 1e-12))
        # uniform on exact ties
        m = len(L) // 6
        np.testing.assert_allclose(np.exp(np.asarray(lx[:m])), 1 / L.shape[1], rtol=1e-9)
        # far-ahead arm: the rest are tiny but still represented in log space
        assert float(jnp.max(lx[m:2 * m, 1:])) < -10


def test_methods_agree_in_float32():
    rng = np.random.default_rng(1)
    L, a, b = _cases(rng, n=600)
    L32, a32, b32 = (jnp.asarray(v, jnp.float32) for v in (L, a, b))
    x_b = jnp.exp(jax.jit(lambda *z: ftrl_log_argmin(*z, method="bisection"))(L32, a32, b32))
    x_n = jnp.exp(jax.jit(lambda *z: ftrl_log_argmin(*z, method="newton"))(L32, a32, b32))
    np.testing.assert_allclose(np.asarray(x_b), np.asarray(x_n), atol=2e-5)
    np.testing.assert_allclose(np.asarray(x_n.sum(-1)), 1.0, atol=1e-5)


def test_closed_form_limits():
    with jax.enable_x64(True):
        solve = jax.jit(ftrl_log_argmin)
        L = jnp.asarray([0.0, 0.3, 2.0, 5.0, 0.1])
        # pure negative entropy (a = 0): x = softmax(-L / b)
        for b in (0.1, 1.0, 30.0):
            x = jnp.exp(solve(L, 0.0, b))
            np.testing.assert_allclose(np.asarray(x), np.asarray(jax.nn.softmax(-L / b)), rtol=1e-10)
        # pure 1/2-Tsallis (b = 0): x_k = a^2 / (L_k + lam)^2 with sum 1 (lam by scipy's brentq)
        a = 0.7
        lam = brentq(lambda lam: np.sum(a**2 / (np.asarray(L) + lam) ** 2) - 1, a * 0.999, a * np.sqrt(5) + 1)
        x = jnp.exp(solve(L, a, 0.0))
        np.testing.assert_allclose(np.asarray(x), a**2 / (np.asarray(L) + lam) ** 2, rtol=1e-9)


def test_argmin_beats_random_feasible_points():
    """The solution's objective is below that of random points of the simplex (a direct optimality check)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        L = jnp.asarray(rng.uniform(0, 3, 6))
        a, b = 0.8, 0.5
        x = jnp.exp(jax.jit(ftrl_log_argmin)(L, a, b))
        obj = lambda z: jnp.dot(z, L) + regulariser(z, a, b)
        others = jnp.asarray(rng.dirichlet(np.ones(6), 2000))
        assert float(obj(x)) <= float(jnp.min(jax.vmap(obj)(others)))


def test_regulariser_gradient_matches_autodiff():
    with jax.enable_x64(True):
        x = jnp.asarray(np.random.default_rng(3).dirichlet(np.ones(7), 5))
        for a, b in [(0.3, 2.0), (4.0, 0.0), (0.0, 1.5)]:
            auto = jax.vmap(jax.grad(lambda z: regulariser(z, a, b)))(x)
            np.testing.assert_allclose(np.asarray(regulariser_grad(x, a, b)), np.asarray(auto), rtol=1e-12)


def test_unknown_method_raises():
    with pytest.raises(ValueError, match="bisection"):
        ftrl_log_argmin(jnp.zeros(3), 1.0, 1.0, method="simplex")
