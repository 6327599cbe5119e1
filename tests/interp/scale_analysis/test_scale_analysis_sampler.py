"""BAOAB Langevin against an exact Gaussian posterior, and the diagnostics against known values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from interp.scale_analysis import sample


def _linear_gaussian():
    """y = X theta + noise, prior N(0, I), noise variance kappa: the posterior is N(mean, A^-1)."""
    rng = np.random.default_rng(0)
    n, k, kappa = 20, 3, 0.5
    x = rng.normal(size=(n, k)) / np.sqrt(k)
    y = x @ np.array([1.0, -0.5, 0.3]) + np.sqrt(kappa) * rng.normal(size=n)
    a = x.T @ x / kappa + np.eye(k)
    cov = np.linalg.inv(a)
    mean = cov @ x.T @ y / kappa
    return jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32), kappa, mean, cov, a


@pytest.mark.parametrize("eta_scale", [0.2, 1.0])
def test_stationary_moments_equal_the_exact_posterior(eta_scale):
    x, y, kappa, mean, cov, a = _linear_gaussian()
    lam_max = np.linalg.eigvalsh(a).max()
    eta = eta_scale / np.sqrt(lam_max)          # BAOAB is configurationally exact on Gaussians for eta*sqrt(lam)<2

    def grad_u(q):
        return {"t": (x.T @ (x @ q["t"] - y)) / kappa + q["t"]}

    n_chains, n_rec, every = 512, 20, 25

    def chain(key):
        _, tr = sample.run_chain(grad_u, lambda q: {"t": q["t"]}, {"t": jnp.zeros(3)}, key, eta=eta,
                                 friction=1.0, n_records=n_rec, record_every=every)
        return tr["t"]

    samples = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(1), n_chains))   # (C, R, 3)
    s = np.asarray(samples)[:, n_rec // 2:, :].reshape(-1, 3)     # second half: burn-in discarded
    n_eff = n_chains                                           # conservative: one effective sample per chain
    se_mean = np.sqrt(np.diag(cov) / n_eff)
    np.testing.assert_array_less(np.abs(s.mean(0) - mean), 5 * se_mean)
    emp = np.cov(s.T)
    se_cov = np.sqrt((cov ** 2 + np.outer(np.diag(cov), np.diag(cov))) / n_eff)   # sd of a sample covariance
    np.testing.assert_array_less(np.abs(emp - cov), 5 * se_cov)
    # and the variances are not those of the prior (the test would notice a sampler ignoring the data)
    assert np.all(np.abs(np.diag(emp) - 1.0) > 5 * np.diag(se_cov))


def test_step_sizes_shrink_with_p():
    eta = np.asarray(sample.step_sizes(jnp.array([0, 100, 10000]), step_size=0.5, curvature=1.0, kappa=0.1))
    np.testing.assert_allclose(eta, 0.5 / np.sqrt(1 + np.array([0, 100, 10000]) / 0.1), rtol=1e-6)


def test_autocorrelation_time_of_ar1():
    rng = np.random.default_rng(0)
    rho, n = 0.8, 20000
    x = np.zeros(n)
    for t in range(1, n):
        x[t] = rho * x[t - 1] + rng.normal()
    tau = sample.integrated_autocorr_time(x)
    assert tau == pytest.approx((1 + rho) / (1 - rho), rel=0.2)     # exact value 9
    assert sample.integrated_autocorr_time(rng.normal(size=5000)) == pytest.approx(1.0, abs=0.3)


def test_split_rhat_detects_disagreeing_chains():
    rng = np.random.default_rng(0)
    same = rng.normal(size=(2, 400))
    assert sample.split_rhat(same) == pytest.approx(1.0, abs=0.02)
    apart = same + np.array([[0.0], [3.0]])
    assert sample.split_rhat(apart) > 1.5


def test_split_rhat_equals_numpyro_and_a_hand_computation():
    numpyro_diag = pytest.importorskip("numpyro.diagnostics")
    rng = np.random.default_rng(1)
    for shape, shift in (((2, 11), 0.5), ((2, 40), 0.0), ((4, 9), 1.0)):
        x = rng.normal(size=shape)
        x[0] += shift
        assert sample.split_rhat(x) == pytest.approx(float(numpyro_diag.split_gelman_rubin(x)), rel=1e-10)
    # by hand: chains [0,1,2,3] and [4,5,6,7] split into [0,1], [2,3], [4,5], [6,7]: W = 0.5, the chain means
    # 0.5, 2.5, 4.5, 6.5 have variance 20/3, so var+ = (1/2)(0.5) + 20/3 and R-hat = sqrt(var+ / W)
    x = np.arange(8.0).reshape(2, 4)
    assert sample.split_rhat(x) == pytest.approx(np.sqrt((0.25 + 20 / 3) / 0.5))


def test_steps_give_equal_simulated_time_at_every_p():
    kw = dict(sim_time=10.0, n_records=20, step_size=0.7, curvature=1.0, kappa=0.1)
    for p in (32, 320, 3200):
        every = sample.steps_per_record(p, **kw)
        eta = sample.step_size_at(p, step_size=0.7, curvature=1.0, kappa=0.1)
        assert 10.0 <= every * 20 * eta < 10.0 + 20 * eta + 1e-9
    # ~sqrt(P) more steps at large P (eta ~ 1/sqrt(P/kappa)); a fixed count would give ~sqrt(100)x less time
    ratio = sample.steps_per_record(3200, **kw) / sample.steps_per_record(32, **kw)
    assert ratio == pytest.approx(np.sqrt((1 + 32000) / (1 + 320)), rel=0.05)
    assert sample.step_size_at(100, step_size=0.5, curvature=1.0, kappa=0.1) == pytest.approx(
        float(sample.step_sizes(jnp.array([100]), step_size=0.5, curvature=1.0, kappa=0.1)[0]))


def test_swap_neighbours_by_hand():
    betas = jnp.array([1.0, 0.5, 0.25, 0.125])
    key = jax.random.key(0)
    # the colder replica holds the higher energy: every attempted swap has log ratio > 0 and is accepted
    energies = jnp.array([40.0, 30.0, 20.0, 10.0])
    perm, acc = sample.swap_neighbours(energies, betas, jnp.int32(0), key)        # pairs (0, 1), (2, 3)
    np.testing.assert_array_equal(np.asarray(perm), [1, 0, 3, 2])
    np.testing.assert_array_equal(np.asarray(acc), [True, False, True])
    perm, acc = sample.swap_neighbours(energies, betas, jnp.int32(1), key)        # pair (1, 2)
    np.testing.assert_array_equal(np.asarray(perm), [0, 2, 1, 3])
    # the colder replica already low: log ratio (b_k - b_k+1)(E_k - E_k+1) = 0.5 * -1000, never accepted
    perm, acc = sample.swap_neighbours(energies[::-1] * 100, betas, jnp.int32(0), key)
    np.testing.assert_array_equal(np.asarray(perm), [0, 1, 2, 3])
    assert not np.asarray(acc).any()
    # in between, the Metropolis probability exp((b0 - b1)(E0 - E1)) = exp(0.5 * -2 ln 3.3) ~ 0.3
    e = jnp.array([0.0, 2 * np.log(1 / 0.3)])
    accs = jax.vmap(lambda k: sample.swap_neighbours(e, betas[:2], jnp.int32(0), k)[1][0])(
        jax.random.split(key, 20000))
    assert abs(float(accs.mean()) - 0.3) < 0.015


def test_beta_ladder_is_geometric_from_one():
    np.testing.assert_allclose(sample.beta_ladder(3, 0.25), (1.0, 0.5, 0.25), rtol=1e-6)
    assert sample.beta_ladder(1, 0.1) == (1.0,)
    with pytest.raises(ValueError, match="beta_min"):
        sample.beta_ladder(4, 0.0)


def test_tempering_crosses_a_barrier_that_a_plain_chain_does_not():
    """Double well E(q) = h (q^2 - 1)^2, prior q^2 / 2: symmetric, so half the posterior mass is at q < 0. A
    chain started in the right well stays there (barrier h = 12); replica 0 of a tempering ensemble (hot replicas
    at beta down to 0.02 cross the barrier) visits both wells in proportion, at the posterior's variance."""
    h = 12.0
    energy = lambda q: h * jnp.sum((q["t"] ** 2 - 1.0) ** 2)  # noqa: E731
    grad_fn = jax.grad(lambda q, beta: beta * energy(q) + 0.5 * jnp.sum(q["t"] ** 2))
    betas = sample.beta_ladder(8, 0.02)
    n_chains, n_rec, every, eta = 64, 400, 10, 0.05

    def tempered(key):
        q0 = {"t": jnp.ones((len(betas), 1))}
        _, _, tr = sample.run_tempered_chain(grad_fn, energy, lambda q: {"t": q["t"][0]}, q0, q0, key,
                                             betas=betas, eta=eta, friction=1.0, n_records=n_rec,
                                             record_every=every)
        return tr["t"], tr["swap_accept"]

    def plain(key):
        _, tr = sample.run_chain(lambda q: grad_fn(q, 1.0), lambda q: {"t": q["t"][0]}, {"t": jnp.ones(1)}, key,
                                 eta=eta, friction=1.0, n_records=n_rec, record_every=every)
        return tr["t"]

    keys = jax.random.split(jax.random.key(3), n_chains)
    t, accept = jax.jit(jax.vmap(tempered))(keys)
    left = float((np.asarray(t)[:, n_rec // 2:] < 0).mean())
    assert 0.4 < left < 0.6 and 0.2 < float(accept.mean()) < 1.0
    stuck = float((np.asarray(jax.jit(jax.vmap(plain))(keys))[:, n_rec // 2:] < 0).mean())
    assert stuck < 0.05
    # replica 0's in-well spread is the posterior's (numerical quadrature of exp(-E - q^2/2) over q > 0)
    grid = np.linspace(1e-4, 3, 30001)
    w = np.exp(-h * (grid ** 2 - 1) ** 2 - grid ** 2 / 2)
    mean_abs = float((grid * w).sum() / w.sum())
    assert abs(float(np.abs(np.asarray(t)[:, n_rec // 2:]).mean()) - mean_abs) < 0.02
