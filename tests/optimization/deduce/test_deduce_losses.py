"""DEDUCE pieces against hand-computed references: detector G, LUM, Fisher, GUM, LEEP, the bound."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from optimization.deduce import losses


def _tree(v):
    return {"a": {"kernel": jnp.asarray(v, jnp.float32)}}


@pytest.mark.parametrize("g_m, eps, expected", [
    ([-1.0, 0.1], 0.0, True),        # obtuse: conflict
    ([0.0, 1.0], 0.0, True),         # orthogonal: <= 0 counts as a conflict at eps = 0
    ([0.0, 1.0], -0.5, False),       # ... but not at a stricter threshold
    ([1.0, 0.5], 0.0, False),        # aligned
    ([-0.3, 0.9539392], -0.5, False),  # cos = -0.3 > -0.5
    ([-0.3, 0.9539392], -0.2, True),   # cos = -0.3 <= -0.2
])
def test_gradient_conflict_on_constructed_gradients(g_m, eps, expected):
    g_t = _tree([1.0, 0.0])
    assert bool(jax.jit(losses.gradient_conflict)(g_t, _tree(g_m), eps)) is expected


def test_gradient_conflict_is_scale_free():
    g_t, g_m = _tree([3.0, -4.0]), _tree([-0.1, 0.02])
    for s in (1e-3, 1.0, 1e3):
        assert bool(losses.gradient_conflict(g_t, jax.tree.map(lambda x: s * x, g_m), -0.5))


def test_lum_paper_step_by_hand():
    theta, g, anchor = _tree([1.0, 2.0]), _tree([0.5, -1.0]), _tree([0.0, 2.5])
    fisher = _tree([1.0, 3.0])                 # mean 2 -> F / mean F = [0.5, 1.5]
    out = losses.lum_paper(theta, g, anchor, fisher, delta=0.1, alpha=0.2, damping=1.0)
    grad_u = -np.array([0.5, -1.0]) + 2 * 0.2 * (np.array([1.0, 2.0]) - np.array([0.0, 2.5]))
    expected = np.array([1.0, 2.0]) - 0.1 * grad_u / (1.0 + np.array([0.5, 1.5]))
    np.testing.assert_allclose(out["a"]["kernel"], expected, rtol=1e-6)
    # unlearning ascends the current loss: the step has a positive inner product with g_t when anchor = theta
    out2 = losses.lum_paper(theta, g, theta, fisher, delta=0.1, alpha=0.2, damping=1.0)
    step = out2["a"]["kernel"] - theta["a"]["kernel"]
    assert float(jnp.vdot(step, g["a"]["kernel"])) > 0


def test_lum_code_step_is_norm_rescaled():
    theta, g, anchor, fisher = _tree([3.0, 4.0]), _tree([1.0, 0.0]), _tree([3.0, 4.0]), _tree([0.0, 0.0])
    out, copy = losses.lum_code(theta, g, anchor, fisher, jax.random.key(0), delta=0.1, alpha=0.1, lr=0.01,
                                noise=0.0, fisher_scale=1e-3)
    np.testing.assert_allclose(copy["a"]["kernel"], [3.01, 4.0], rtol=1e-6)
    # Delta = (0.01, 0) rescaled to |theta| = 5 -> (5, 0); step delta * (5, 0)
    np.testing.assert_allclose(out["a"]["kernel"], [3.5, 4.0], rtol=1e-6)


def test_fisher_penalty_by_hand():
    p, t, f = _tree([1.0, 2.0]), _tree([0.0, 0.0]), _tree([2.0, 0.5])
    assert float(losses.fisher_penalty(p, t, f)) == pytest.approx(2 * 1 + 0.5 * 4)


def test_diag_fisher_matches_a_loop_over_examples():
    w = jax.random.normal(jax.random.key(1), (3, 4))
    params = {"w": w}

    def apply(p, x):
        return x @ p["w"], {}

    x = jax.random.normal(jax.random.key(2), (16, 3))
    weights = jnp.ones(16).at[12:].set(0.0)
    key = jax.random.key(3)
    f = losses.diag_fisher(apply, params, x, key, weights, chunk=8)
    ys = jax.random.categorical(key, x @ w)
    ref = np.zeros((3, 4))
    for i in range(12):
        g = jax.grad(lambda p: jax.nn.log_softmax(x[i] @ p["w"])[ys[i]])(params)["w"]
        ref += np.asarray(g) ** 2
    np.testing.assert_allclose(f["w"], ref / 12, rtol=1e-5, atol=1e-7)


def _gum_setup(pending):
    units = 6
    params = {"fc0": {"kernel": jnp.ones((4, units)), "bias": jnp.full((units,), 0.5)},
              "head": {"kernel": jnp.ones((units, 3)), "bias": jnp.zeros((3,))}}
    fisher = jax.tree.map(jnp.zeros_like, params)
    gum = losses.init_gum(params, (("fc0", "head"),))
    gum = gum._replace(age={"fc0": jnp.array([300, 300, 300, 5, 300, 300], jnp.int32)},
                       utility={"fc0": jnp.array([0.9, 0.2, 0.5, 0.01, 0.7, 0.8])},
                       pending={"fc0": jnp.float32(pending)})
    hidden = {"fc0": jnp.zeros((2, units))}   # no new evidence: utility just decays, ranking unchanged
    return params, fisher, gum, hidden


def test_gum_resets_only_the_lowest_utility_mature_unit():
    params, fisher, gum, hidden = _gum_setup(pending=0.999)
    new, gum2, n = losses.gum_step(params, gum, hidden, fisher, jax.random.key(0), (("fc0", "head"),),
                                   rate=1e-3, maturity=100, decay=0.9, gate_scale=10.0, max_resets=2)
    assert int(n) == 1
    k = np.asarray(new["fc0"]["kernel"])
    changed = [u for u in range(6) if not np.allclose(k[:, u], 1.0)]
    assert changed == [1]                     # unit 3 has lower utility but is immature
    assert float(new["fc0"]["bias"][1]) == 0.0 and float(new["fc0"]["bias"][0]) == 0.5
    np.testing.assert_array_equal(np.asarray(new["head"]["kernel"])[1], 0.0)     # outgoing zeroed
    np.testing.assert_array_equal(np.asarray(new["head"]["kernel"])[[0, 2, 3, 4, 5]], 1.0)
    assert int(gum2.age["fc0"][1]) == 0 and int(gum2.age["fc0"][0]) == 301
    assert float(gum2.utility["fc0"][1]) == 0.0
    assert float(gum2.pending["fc0"]) == pytest.approx(0.999 + 5e-3 - 1.0, abs=1e-6)


def test_gum_waits_until_a_whole_unit_is_owed():
    params, fisher, gum, hidden = _gum_setup(pending=0.5)
    new, gum2, n = losses.gum_step(params, gum, hidden, fisher, jax.random.key(0), (("fc0", "head"),),
                                   rate=1e-3, maturity=100, decay=0.9, gate_scale=10.0)
    assert int(n) == 0
    np.testing.assert_array_equal(np.asarray(new["fc0"]["kernel"]), 1.0)
    assert float(gum2.pending["fc0"]) == pytest.approx(0.5 + 5e-3, abs=1e-6)


def test_leep_against_numpy():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=20).astype(np.float32)
    y = rng.integers(0, 3, size=20)
    joint = np.zeros((3, 4))
    for p, t in zip(probs, y):
        joint[t] += p / 20
    cond = joint / joint.sum(0, keepdims=True)
    ref = np.mean([np.log((cond[t] * p).sum()) for p, t in zip(probs, y)])
    got = losses.leep(jnp.asarray(probs), jnp.asarray(y), 3, jnp.ones(20))
    assert float(got) == pytest.approx(ref, rel=1e-5)


def test_domain_classifier_separates_shifted_features_and_bound():
    k1, k2 = jax.random.split(jax.random.key(0))
    old = jax.random.normal(k1, (200, 5))
    new = jax.random.normal(k2, (200, 5)) + 3.0
    err = losses.domain_error(old, jnp.ones(200), new, jnp.ones(200), jax.random.key(3), steps=100)
    assert float(err) < 0.05
    same = losses.domain_error(old[:100], jnp.ones(100), old[100:], jnp.ones(100), jax.random.key(3), steps=100)
    assert float(same) > 0.25
    assert float(losses.transfer_bound(0.1, 0.2, -0.5, 1.0)) == pytest.approx(0.1 + 0.6 + 0.5)
