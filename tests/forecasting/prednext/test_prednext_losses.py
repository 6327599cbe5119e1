"""SSL objectives, PredNext's prediction losses, consistency metrics and the linear probe against references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from forecasting.prednext import losses as L
from forecasting.prednext.train import linear_probe


def np_cos(a, b):
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_simclr_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    z1, z2 = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    tau = 0.3
    z = np.concatenate([z1, z2])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    total = 0.0
    for i in range(12):
        pos = (i + 6) % 12
        others = [j for j in range(12) if j != i]
        logits = np.array([z[i] @ z[j] / tau for j in others])
        total += -(z[i] @ z[pos] / tau - np.log(np.exp(logits).sum()))
    np.testing.assert_allclose(float(L.simclr_loss(jnp.asarray(z1), jnp.asarray(z2), tau)), total / 12, rtol=1e-5)


def test_simsiam_value_and_stop_gradient():
    rng = np.random.default_rng(1)
    p1, p2, z1, z2 = (jnp.asarray(rng.normal(size=(4, 3))) for _ in range(4))
    expected = 0.5 * np.mean(1 - np_cos(np.asarray(p1), np.asarray(z2))) + \
        0.5 * np.mean(1 - np_cos(np.asarray(p2), np.asarray(z1)))
    np.testing.assert_allclose(float(L.simsiam_loss(p1, p2, z1, z2)), expected, rtol=1e-5)
    gz = jax.grad(lambda z: L.simsiam_loss(p1, p2, z, z2))(z1)
    assert float(jnp.abs(gz).sum()) == 0.0
    assert float(L.simsiam_loss(z1, z2, z2, z1)) == pytest.approx(0.0, abs=1e-6)


def test_barlow_twins_matches_a_numpy_reference():
    rng = np.random.default_rng(2)
    z1, z2 = rng.normal(size=(16, 4)), rng.normal(size=(16, 4))
    a = (z1 - z1.mean(0)) / (z1.std(0) + 1e-5)
    b = (z2 - z2.mean(0)) / (z2.std(0) + 1e-5)
    c = a.T @ b / 16
    lam = 0.01
    expected = sum((1 - c[i, i]) ** 2 for i in range(4)) + lam * sum(c[i, j] ** 2 for i in range(4)
                                                                     for j in range(4) if i != j)
    np.testing.assert_allclose(float(L.barlow_twins_loss(jnp.asarray(z1), jnp.asarray(z2), lam)), expected,
                               rtol=1e-4)


def test_step_prediction_pairs_t_with_t_plus_m_and_stops_target_gradients():
    rng = np.random.default_rng(3)
    p, tgt = rng.normal(size=(5, 3, 4)), rng.normal(size=(5, 3, 4))
    for m in (1, 2, 4):
        expected = np.mean([1 - np_cos(p[t], tgt[t + m]) for t in range(5 - m)])
        np.testing.assert_allclose(float(L.step_prediction_loss(jnp.asarray(p), jnp.asarray(tgt), m)), expected,
                                   rtol=1e-5)
    g = jax.grad(lambda t: L.step_prediction_loss(jnp.asarray(p), t, 1))(jnp.asarray(tgt))
    assert float(jnp.abs(g).sum()) == 0.0
    gc = jax.grad(lambda f: L.clip_prediction_loss(jnp.asarray(p[0]), f))(jnp.asarray(tgt[0]))
    assert float(jnp.abs(gc).sum()) == 0.0
    with pytest.raises(ValueError, match="m=5"):
        L.step_prediction_loss(jnp.asarray(p), jnp.asarray(tgt), 5)


def test_temporal_inconsistency_matches_its_definition():
    rng = np.random.default_rng(4)
    z = rng.normal(size=(4, 3, 6))  # (T, N, D)
    total = 0.0
    for i in range(3):
        for t in range(4):
            for s in range(4):
                if s != t:
                    total += 1 - np_cos(z[t, i], z[s, i])
    expected = total / 3 / (4 * 3)
    np.testing.assert_allclose(float(L.temporal_inconsistency(jnp.asarray(z))), expected, rtol=1e-5)
    const = jnp.broadcast_to(jnp.asarray(z[0]), (4, 3, 6))
    assert float(L.temporal_inconsistency(const)) == pytest.approx(0.0, abs=1e-6)
    assert float(L.step_to_clip_inconsistency(const)) == pytest.approx(0.0, abs=1e-6)
    # the forced-consistency loss is the same quantity, with gradients through every step
    g = jax.grad(L.forced_consistency_loss)(jnp.asarray(z))
    assert float(jnp.abs(g).min()) >= 0 and float(jnp.abs(g).sum()) > 0
    with pytest.raises(ValueError, match="T=1"):
        L.temporal_inconsistency(jnp.ones((1, 2, 3)))


def test_collapse_monitor():
    z = jax.random.normal(jax.random.key(0), (512, 64))
    assert abs(float(L.feature_std(z)) - 1 / 8) < 0.01  # 1/sqrt(d) for spread features
    assert float(L.feature_std(jnp.ones((16, 64)))) == pytest.approx(0.0, abs=1e-7)


def test_linear_probe_agrees_with_sklearn_on_separable_and_noisy_data():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(5)
    centers = rng.normal(size=(4, 8)) * 3
    y = rng.integers(0, 4, 400)
    x = centers[y] + rng.normal(size=(400, 8))
    acc = float(linear_probe(jnp.asarray(x[:300]), jnp.asarray(y[:300]), jnp.asarray(x[300:]),
                             jnp.asarray(y[300:]), 4, steps=300))
    ref = LogisticRegression(max_iter=2000).fit(x[:300], y[:300]).score(x[300:], y[300:])
    assert acc >= ref - 0.02 and acc > 0.9
    # random labels: no better than chance by much
    yr = rng.integers(0, 4, 400)
    acc_r = float(linear_probe(jnp.asarray(x[:300]), jnp.asarray(yr[:300]), jnp.asarray(x[300:]),
                               jnp.asarray(yr[300:]), 4, steps=300))
    assert acc_r < 0.45
