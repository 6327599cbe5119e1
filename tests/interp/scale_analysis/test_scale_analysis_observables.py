"""Order parameters, data, model and analysis helpers against hand-checked values and Monte Carlo."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interp.scale_analysis import data, model, order_params, train


def test_target_has_unit_variance_and_no_linear_part():
    w = data.teacher_direction(jax.random.key(0), 8)
    x, y = data.sample(jax.random.key(1), 200_000, w)
    assert float(jnp.mean(y * y)) == pytest.approx(1.0, abs=0.03)
    assert float(jnp.mean(y * (x @ w))) == pytest.approx(0.0, abs=0.02)
    np.testing.assert_allclose(data.he3(jnp.array([0.0, 1.0, 2.0])), [0.0, -2.0, 2.0])


def test_alignment_and_kta():
    y = jnp.array([1.0, -2.0, 0.5, 3.0])
    assert float(order_params.alignment(y, y)) == pytest.approx(1.0)
    assert float(order_params.alignment(-0.5 * y, y)) == pytest.approx(-0.5)
    assert float(order_params.kernel_target_alignment(jnp.outer(y, y), y)) == pytest.approx(1.0, rel=1e-6)
    assert float(order_params.kernel_target_alignment(jnp.eye(4), y)) == pytest.approx(
        1 / 2, rel=1e-6)   # y^T y / (sqrt(4) y^T y)


def test_covariance_alignment_and_cosines():
    d = 16
    w_star = jnp.eye(d)[0]
    aligned = jnp.tile(w_star, (5, 1)) * 3.0
    assert float(order_params.covariance_alignment(aligned, w_star)) == pytest.approx(d)
    iso = jax.random.normal(jax.random.key(0), (20000, d))
    assert float(order_params.covariance_alignment(iso, w_star)) == pytest.approx(1.0, abs=0.05)
    np.testing.assert_allclose(order_params.cosines(aligned, w_star), 1.0, rtol=1e-6)


@pytest.mark.parametrize("d,tau", [(16, 0.5), (64, 0.3)])
def test_prior_spec_fraction_matches_monte_carlo(d, tau):
    w = np.random.default_rng(0).normal(size=(400_000, d))
    cos = np.abs(w[:, 0]) / np.linalg.norm(w, axis=1)
    assert order_params.prior_spec_fraction(d, tau) == pytest.approx(np.mean(cos > tau), abs=2e-3)


def test_prior_output_variance_is_the_arcsine_kernel():
    # standard parametrisation: E f(x)^2 = E erf(h)^2 with h ~ N(0, |x|^2/d) = (2/pi) arcsin(2 s / (1 + 2 s))
    d, n = 8, 32
    x = jnp.ones((1, d)) * 0.9
    s = float(jnp.sum(x * x)) / d
    f = jax.vmap(lambda k: model.forward(model.init_params(k, "two", d, (n,)), x)[0])(
        jax.random.split(jax.random.key(0), 40000))
    assert float(jnp.mean(f * f)) == pytest.approx(2 / math.pi * math.asin(2 * s / (1 + 2 * s)), rel=0.03)


def test_model_shapes_and_bad_inputs():
    p3 = model.init_params(jax.random.key(0), "three", 6, (5, 7))
    assert p3["w1"].shape == (5, 6) and p3["w2"].shape == (7, 5) and p3["a"].shape == (7,)
    assert model.forward(p3, jnp.ones((3, 6))).shape == (3,)
    with pytest.raises(ValueError, match="width"):
        model.init_params(jax.random.key(0), "two", 6, (0,))
    with pytest.raises(ValueError, match="features"):      # data with fewer features than the model's d
        model.forward(p3, jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="dimension"):
        data.target(jnp.ones((3, 4)), jnp.ones(6))


def test_crossing_fit_and_buckets():
    ps = [10, 20, 40, 80]
    assert train.crossing(ps, [0.1, 0.3, 0.7, 0.9]) == pytest.approx(20 * 2 ** 0.5)
    assert math.isnan(train.crossing(ps, [0.1, 0.2, 0.3, 0.4]))       # censored above
    assert math.isnan(train.crossing(ps, [0.6, 0.7, 0.8, 0.9]))       # censored below
    rng = np.random.default_rng(0)
    x = np.repeat([16.0, 32.0, 64.0], 4)
    y = 3.0 * x ** 1.5 * np.exp(0.05 * rng.normal(size=x.size))
    fit = train.loglog_fit(x, y)
    assert fit["lo"] < 1.5 < fit["hi"] and fit["hi"] - fit["lo"] < 0.3
    assert train.buckets([128, 256, 512, 1024], 2.0) == [[128, 256], [512, 1024]]
    assert train.buckets([4, 1000], 4.0) == [[4], [1000]]
