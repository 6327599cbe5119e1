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


def test_moco_infonce_matches_a_numpy_reference_on_a_hand_case():
    # 2 queries, their keys and a queue of 3 negatives, in 2-d: logits written out by hand
    q = np.array([[1.0, 0.0], [0.0, 2.0]])
    k = np.array([[3.0, 0.0], [1.0, 1.0]])
    queue = np.array([[0.0, 1.0], [-1.0, 0.0], [0.6, 0.8]])
    tau = 0.5
    total = 0.0
    for qi, ki in zip(q, k):
        qn, kn = qi / np.linalg.norm(qi), ki / np.linalg.norm(ki)
        logits = np.concatenate([[qn @ kn], queue @ qn]) / tau
        total += -(logits[0] - np.log(np.exp(logits).sum()))
    got = L.moco_loss(jnp.asarray(q), jnp.asarray(k), jnp.asarray(queue), tau)
    np.testing.assert_allclose(float(got), total / 2, rtol=1e-6)
    # the first query's hand logits: cos(q1, k1) = 1, queue: 0, -1, 0.6
    np.testing.assert_allclose(np.concatenate([[1.0], queue @ q[0]]) / tau, [2.0, 0.0, -2.0, 1.2])
    # keys and queue are stop-gradient
    gk = jax.grad(lambda kk: L.moco_loss(jnp.asarray(q), kk, jnp.asarray(queue), tau))(jnp.asarray(k))
    assert float(jnp.abs(gk).sum()) == 0.0


def test_enqueue_is_a_ring_buffer_of_unit_keys():
    queue = jnp.zeros((5, 2))
    keys = jnp.asarray([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]])
    q, ptr = L.enqueue(queue, jnp.asarray(0), keys)
    np.testing.assert_allclose(np.asarray(q[:3]), [[0.6, 0.8], [0.0, 1.0], [1.0, 0.0]], rtol=1e-6)
    assert int(ptr) == 3 and not np.asarray(q[3:]).any()
    q, ptr = L.enqueue(q, ptr, 2 * keys)  # wraps: rows 3, 4, 0; rows 1, 2 keep the first keys
    assert int(ptr) == 1
    np.testing.assert_allclose(np.asarray(q), [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8], [0.0, 1.0]],
                               rtol=1e-6)
    with pytest.raises(ValueError, match="6 keys into a queue of 5"):
        L.enqueue(queue, jnp.asarray(0), jnp.ones((6, 2)))


def test_retrieval_recall_on_a_hand_case():
    from forecasting.prednext.train import retrieval_recall

    train_x = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])  # mean 0: centring is a no-op
    train_y = jnp.asarray([0, 1, 2, 3])
    test_x = jnp.asarray([[1.0, 0.1], [0.1, 1.0], [-1.0, -0.5]])
    # nearest train items: q0 -> 0, 1; q1 -> 1, 0; q2 -> 2, 3
    r = retrieval_recall(train_x, train_y, test_x, jnp.asarray([0, 0, 3]), (1, 2))
    assert r[1] == pytest.approx(1 / 3) and r[2] == pytest.approx(1.0)
