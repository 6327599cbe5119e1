"""DecAlign objective terms against references written here (brute-force Sinkhorn, closed forms, loops)."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from multimodal.decalign import losses as L


def _random_instance(seed, k=(4, 5, 3), d=3):
    ks = jax.random.split(jax.random.key(seed), 9)
    mixes = tuple(L.Mixture(jnp.ones(n) / n, jax.random.normal(ks[i], (n, d)),
                            jnp.exp(0.5 * jax.random.normal(ks[3 + i], (n, d)))) for i, n in enumerate(k))
    nus = tuple(jax.nn.softmax(jax.random.normal(ks[6 + i], (n,))) for i, n in enumerate(k))
    return mixes, nus


@functools.partial(jax.jit, static_argnums=(2, 3))
def _brute_force_mm_sinkhorn(cost, marginals, eps, iters):
    """Log-domain multi-marginal Sinkhorn written directly:
    f_m <- eps log a_m - eps LSE_{-m}((sum_{n!=m} f_n - C)/eps)."""
    k = cost.ndim

    def expand(v, m):
        return jnp.expand_dims(v, [a for a in range(k) if a != m])

    def sweep(_, f):
        f = list(f)
        for m in range(k):
            s = sum(expand(f[n], n) for n in range(k) if n != m) - cost
            axes = tuple(a for a in range(k) if a != m)
            f[m] = eps * jnp.log(marginals[m]) - eps * jax.scipy.special.logsumexp(s / eps, axis=axes)
        return tuple(f)

    f = jax.lax.fori_loop(0, iters, sweep, tuple(jnp.zeros(n) for n in cost.shape))
    logp = (sum(expand(f[n], n) for n in range(k)) - cost) / eps
    plan = jnp.exp(logp)
    primal = jnp.sum(plan * cost) + eps * jnp.sum(plan * (logp - 1.0))
    return plan, primal


def _cost_tensor(mixes):
    c = [[None] * 3 for _ in range(3)]
    for i, j in ((0, 1), (0, 2), (1, 2)):
        c[i][j] = L.diag_w2_cost(mixes[i].means, mixes[i].variances, mixes[j].means, mixes[j].variances)
    return c[0][1][:, :, None] + c[0][2][:, None, :] + c[1][2][None, :, :]


_SOLVE = jax.jit(functools.partial(L.multimarginal_ot, epsilon=0.1, iters=400))


@pytest.mark.parametrize("seed", [0, 1])
def test_mm_ot_marginals_and_cost_match_brute_force(seed):
    mixes, nus = _random_instance(seed)
    eps = 0.1
    res = _SOLVE(mixes, nus)
    for m, nu in enumerate(nus):
        axes = tuple(a for a in range(3) if a != m)
        np.testing.assert_allclose(jnp.sum(res.plan, axis=axes), nu, atol=1e-4)
    plan, primal = _brute_force_mm_sinkhorn(_cost_tensor(mixes), nus, eps, 400)
    np.testing.assert_allclose(res.plan, plan, atol=1e-4)
    np.testing.assert_allclose(res.loss, primal, rtol=1e-4, atol=1e-4)


def test_mm_ot_gradient_is_finite_and_matches_finite_differences():
    mixes, nus = _random_instance(3)
    f = jax.jit(lambda mu: L.multimarginal_ot((mixes[0]._replace(means=mu),) + mixes[1:], nus, epsilon=0.1,
                                              iters=300).loss)
    g = jax.jit(jax.grad(f))(mixes[0].means)
    h = 1e-2
    e = jnp.zeros_like(mixes[0].means).at[1, 2].set(h)
    fd = (f(mixes[0].means + e) - f(mixes[0].means - e)) / (2 * h)
    np.testing.assert_allclose(g[1, 2], fd, rtol=2e-2, atol=1e-3)  # Danskin gradient at a converged plan


def test_diag_w2_equals_closed_form_and_gaussian_embedding():
    rng = np.random.default_rng(0)
    mu1, mu2 = rng.normal(size=(3, 4)), rng.normal(size=(2, 4))
    v1, v2 = rng.uniform(0.1, 2.0, (3, 4)), rng.uniform(0.1, 2.0, (2, 4))
    got = L.diag_w2_cost(jnp.asarray(mu1), jnp.asarray(v1), jnp.asarray(mu2), jnp.asarray(v2))
    for i, j in itertools.product(range(3), range(2)):
        s1, s2 = np.diag(v1[i]), np.diag(v2[j])
        r = scipy.linalg.sqrtm(s1)
        bures = np.trace(s1 + s2 - 2 * np.real(scipy.linalg.sqrtm(r @ s2 @ r)))  # general Gaussian W2^2
        want = (np.sum((mu1[i] - mu2[j]) ** 2) + bures) / 4  # mean reduction over d = 4
        np.testing.assert_allclose(got[i, j], want, rtol=1e-5)
    x1 = L.gaussian_points(L.Mixture(jnp.ones(3) / 3, jnp.asarray(mu1), jnp.asarray(v1)))
    x2 = L.gaussian_points(L.Mixture(jnp.ones(2) / 2, jnp.asarray(mu2), jnp.asarray(v2)))
    np.testing.assert_allclose(jnp.sum((x1[:, None] - x2[None]) ** 2, -1), got, rtol=1e-5)


def test_em_log_likelihood_never_decreases():
    fit = jax.jit(lambda x: L.fit_diag_gmm(x, 7, iters=12, var_floor=1e-4))
    for seed in range(3):
        ks = jax.random.split(jax.random.key(seed), 3)
        centers = 3.0 * jax.random.normal(ks[0], (4, 6))
        x = centers[jax.random.randint(ks[1], (64,), 0, 4)] + jax.random.normal(ks[2], (64, 6))
        g, post, lls = fit(x)
        init_ll = L.gmm_log_likelihood(x, L.Mixture(jnp.full(7, 1 / 7),
                                                    x[jnp.round(jnp.linspace(0, 63, 7)).astype(int)],
                                                    jnp.broadcast_to(jnp.var(x, 0), (7, 6))))
        lls = np.concatenate([[init_ll], np.asarray(lls)])
        assert np.all(np.diff(lls) >= -1e-4), lls
        assert lls[-1] > lls[0] + 0.1
        np.testing.assert_allclose(jnp.sum(post, -1), 1.0, atol=1e-5)
        np.testing.assert_allclose(jnp.sum(g.weights), 1.0, atol=1e-5)
        assert float(jnp.min(g.variances)) >= np.float32(1e-4)


def test_em_is_differentiable():
    x = jax.random.normal(jax.random.key(0), (32, 5))
    g = jax.jit(jax.grad(lambda x: L.heterogeneity_loss(jnp.stack([x, 2 * x, x + 1]))[0]))(x)
    assert np.all(np.isfinite(g)) and float(jnp.abs(g).sum()) > 0


def test_decoupling_loss_extremes():
    s = jnp.zeros((3, 2, 4, 2)).at[..., 0].set(1.0)
    c = jnp.zeros((3, 2, 4, 2)).at[..., 1].set(1.0)
    np.testing.assert_allclose(L.decoupling_loss(s, c), 0.0, atol=1e-7)
    np.testing.assert_allclose(L.decoupling_loss(s, -2 * s), 1.0, rtol=1e-6)


def test_mmd_matches_loop_and_is_zero_on_identical_samples():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(5, 3)), rng.normal(size=(4, 3)) + 0.5
    k = lambda a, b: np.exp(-np.sum((a - b) ** 2) / (2 * 1.0))
    want = (np.mean([[k(a, b) for b in x] for a in x]) + np.mean([[k(a, b) for b in y] for a in y])
            - 2 * np.mean([[k(a, b) for b in y] for a in x]))
    np.testing.assert_allclose(L.mmd(jnp.asarray(x), jnp.asarray(y)), want, rtol=1e-5)
    np.testing.assert_allclose(L.mmd(jnp.asarray(x), jnp.asarray(x)), 0.0, atol=1e-6)


def test_moment_loss_zero_for_equal_distributions_positive_otherwise():
    z = jax.random.normal(jax.random.key(0), (1, 16, 4))
    np.testing.assert_allclose(L.moment_loss(jnp.concatenate([z, z, z])), 0.0, atol=1e-7)
    shifted = jnp.concatenate([z, z + 1.0, z])
    # mean differs by 1 in every coordinate for two of three pairs: MSE of means = 1 each
    np.testing.assert_allclose(L.moment_loss(shifted), 2.0, rtol=1e-5)


def test_supcon_matches_loop():
    rng = np.random.default_rng(2)
    f = rng.normal(size=(6, 4))
    y = np.array([0, 1, 0, 2, 1, 0])
    t = 0.1
    fn = f / np.linalg.norm(f, axis=1, keepdims=True)
    total, count = 0.0, 0
    for i in range(6):
        pos = [j for j in range(6) if j != i and y[j] == y[i]]
        if not pos:
            continue
        denom = np.log(sum(np.exp(fn[i] @ fn[a] / t) for a in range(6) if a != i))
        total += -np.mean([fn[i] @ fn[p] / t - denom for p in pos])
        count += 1
    np.testing.assert_allclose(L.supcon_loss(jnp.asarray(f), jnp.asarray(y), t), total / count, rtol=1e-5)


def test_local_prototype_loss_matches_loop():
    rng = np.random.default_rng(3)
    x, post, mu = rng.normal(size=(3, 5, 2)), rng.dirichlet(np.ones(4), size=(3, 5)), rng.normal(size=(3, 4, 2))
    want = np.mean([np.mean([sum(post[m, i, k] * np.mean((x[m, i] - mu[n, k]) ** 2) for k in range(4))
                             for i in range(5)])
                    for m in range(3) for n in range(3) if m != n])
    np.testing.assert_allclose(L.local_prototype_loss(jnp.asarray(x), jnp.asarray(post), jnp.asarray(mu)), want,
                               rtol=1e-5)
