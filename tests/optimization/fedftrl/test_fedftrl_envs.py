"""Environments: statistics against formulas, heterogeneity, the FTL trap, the MovieLens-format reader."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from optimization.fedftrl.envs import (
    FTLTrapEnv,
    RatingsEnv,
    StochasticEnv,
    SwitchingEnv,
    clipped_normal_mean,
    make_env,
    read_movielens,
)


def _rollout(env, T, seed=0):
    params = env.init(jax.random.key(seed))
    ts = jnp.arange(1, T + 1, dtype=jnp.int32)
    keys = jax.random.split(jax.random.key(seed + 1), T)
    fb, mean = jax.jit(jax.vmap(lambda t, k: env.step(params, t, k)))(ts, keys)
    return params, np.asarray(fb), np.asarray(mean)


def test_clipped_normal_mean_matches_monte_carlo():
    rng = np.random.default_rng(0)
    mu = np.array([0.0, 0.03, 0.5, 0.97, 1.0, 0.2])
    z = rng.standard_normal((400_000, 1))
    for sd in (0.1, 0.3):
        mc = np.clip(mu + sd * z, 0, 1).mean(0)
        np.testing.assert_allclose(np.asarray(clipped_normal_mean(jnp.asarray(mu), sd)), mc, atol=2e-3)
    np.testing.assert_allclose(np.asarray(clipped_normal_mean(jnp.asarray(mu), 0.0)), np.clip(mu, 0, 1))


def test_stochastic_env_statistics():
    env = StochasticEnv(V=6, K=5, noise_sd=0.1)
    params, fb, mean = _rollout(env, 4000)
    mu = np.asarray(params["mu"])
    assert fb.min() >= 0 and fb.max() <= 1
    # per-agent empirical means match the exact clipped means (4000 draws: SE <= 0.1 / 63)
    np.testing.assert_allclose(fb.mean(0), np.asarray(clipped_normal_mean(jnp.asarray(mu), 0.1)), atol=0.008)
    np.testing.assert_allclose(fb.std(0)[(mu > 0.3) & (mu < 0.7)], 0.1, rtol=0.1)
    np.testing.assert_allclose(mean[0], fb.mean((0, 1)), atol=0.004)
    # heterogeneous: a fresh instance per key, and means uniform on [0, 1]
    many = jax.vmap(env.init)(jax.random.split(jax.random.key(5), 400))
    m = np.asarray(many["mu"]).ravel()
    assert abs(m.mean() - 0.5) < 0.01 and abs(m.var() - 1 / 12) < 0.005


def test_corrupted_env_flips_then_recovers():
    env = StochasticEnv(V=3, K=4, noise_sd=0.0, corruption_rounds=5)
    params, fb, mean = _rollout(env, 8)
    mu = np.asarray(params["mu"])
    np.testing.assert_allclose(fb[:5], np.broadcast_to(1 - mu, (5, 3, 4)), atol=1e-6)
    np.testing.assert_allclose(fb[5:], np.broadcast_to(mu, (3, 3, 4)), atol=1e-6)
    np.testing.assert_allclose(mean[5], mu.mean(0), atol=1e-6)


def test_switching_env_blocks_and_heterogeneity():
    env = SwitchingEnv(V=8, K=5, gap=0.2, block0=10, growth=1.5, n_best=2)
    params, fb, mean = _rollout(env, 300)
    # reference block structure by a loop: block j has ceil(10 * 1.5^j)... here the closed form's floor
    # boundaries start at 1 + 10 (1.5^j - 1) / 0.5
    starts = [1 + 10 * (1.5**j - 1) / 0.5 for j in range(12)]
    ref = np.array([(np.searchsorted(starts, t, side="right") - 1) % 2 for t in range(1, 301)])
    np.testing.assert_array_equal(np.argmin(mean, 1), ref)
    np.testing.assert_allclose(fb.mean(1), mean, atol=1e-6)          # offsets have zero agent mean
    assert fb.min() >= 0 and fb.max() <= 1
    local_best = np.argmin(fb[0], 1)                                  # agents disagree on the best arm
    assert len(set(local_best.tolist())) > 1


def test_ftl_trap_defeats_follow_the_leader():
    env = FTLTrapEnv(V=4, K=3)
    _, fb, mean = _rollout(env, 200)
    cum = np.cumsum(mean, 0)
    leader = np.argmin(np.vstack([np.zeros(3), cum[:-1]]), 1)         # FTL on the global losses
    ftl_loss = mean[np.arange(200), leader].sum()
    regret = ftl_loss - cum[-1].min()
    assert regret > 0.4 * 200 * env.span                               # linear regret for FTL
    assert abs(cum[-1, 0] - cum[-1, 1]) <= env.span                    # the two leaders stay level


def _write_movielens(path, *, drop=None):
    movies = "movieId,title,genres\n1,A,Comedy|Drama\n2,B,Drama\n3,C,Horror\n4,D,(no genres listed)\n"
    ratings = ("userId,movieId,rating,timestamp\n"
               "1,1,5.0,0\n1,2,3.0,0\n1,3,0.5,0\n1,2,4.0,1\n"
               "2,1,1.0,0\n2,4,2.5,0\n"
               "3,3,4.5,0\n")
    if drop:
        ratings = ratings.replace(drop, "other")
    (path / "movies.csv").write_text(movies)
    (path / "ratings.csv").write_text(ratings)


def test_movielens_reader_and_env(tmp_path):
    _write_movielens(tmp_path)
    data = read_movielens(tmp_path, num_users=2)
    assert data["genres"] == ["(no genres listed)", "Comedy", "Drama", "Horror"]
    assert data["users"] == [1, 2]                                   # most ratings first
    c = data["counts"]
    assert c.shape == (2, 4, 10) and c.sum() == 4 + 1 + 2 + 1       # user 1: movie 1 counts for two genres
    env = RatingsEnv(path=str(tmp_path), V=2, missing_loss=1.0)
    assert env.K == 4
    params, fb, mean = _rollout(env, 3000)
    loss = lambda r: (5.5 - r) / 5
    exp = np.array([[1.0, loss(5.0), np.mean([loss(5.0), loss(3.0), loss(4.0)]), loss(0.5)],
                    [loss(2.5), loss(1.0), loss(1.0), 1.0]])
    np.testing.assert_allclose(mean[0], exp.mean(0), atol=1e-6)
    np.testing.assert_allclose(fb.mean(0), exp, atol=0.01)
    np.testing.assert_allclose(np.unique(np.round(fb[:, 0, 2].astype(float), 4)),
                               sorted(loss(r) for r in (5.0, 4.0, 3.0)), atol=1e-6)
    env_setting = make_env("movielens", V=2, K=0, ratings_path=str(tmp_path))
    assert env_setting.K == 4


def test_bad_inputs(tmp_path):
    _write_movielens(tmp_path, drop="rating")
    with pytest.raises(ValueError, match="lacks column"):
        read_movielens(tmp_path, num_users=2)
    with pytest.raises(ValueError, match="no ratings.csv"):
        read_movielens(tmp_path / "nowhere", num_users=2)
    _write_movielens(tmp_path)
    with pytest.raises(ValueError, match="num_users"):
        read_movielens(tmp_path, num_users=10)
    with pytest.raises(ValueError, match="K must be an integer >= 2"):
        StochasticEnv(V=4, K=1)
    with pytest.raises(ValueError, match="gap"):
        SwitchingEnv(V=4, K=3, gap=0.4)
    with pytest.raises(ValueError, match="unknown setting"):
        make_env("bandit", V=4, K=3)
    with pytest.raises(ValueError, match="ratings_path"):
        make_env("movielens", V=4, K=3)
