"""PhaseFormer / SparseTSF / DLinear: parameter counts, RevIN and phase round trips, routing layer against a
plain-numpy implementation written here, baselines against numpy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from forecasting.phaseformer import configs, model, train


def _abstract_count(config):
    params = nnx.state(nnx.eval_shape(lambda: train.build_model(config, jax.random.key(0))), nnx.Param)
    return sum(math.prod(p.shape) for p in jax.tree.leaves(params))


@pytest.mark.parametrize("setting", sorted(configs.PAPER_PARAMS))
def test_released_presets_have_the_analytic_parameter_count(setting):
    dataset, horizon = setting
    preset = configs.presets()[f"{dataset.lower()}_{horizon}"]
    assert _abstract_count(preset) == configs.PAPER_PARAMS[setting]


def test_baseline_parameter_counts():
    # SparseTSF: conv 1 + 2*12 = 25 weights + linear 30 x 4 (no bias); DLinear: 2 x (720 x 96 + 96)
    assert _abstract_count(configs.sparsetsf("ETTh1", 96)) == 25 + 30 * 4
    assert _abstract_count(configs.sparsetsf("ETTm1", 96)) == 5 + 180 * 24
    assert _abstract_count(configs.dlinear("ETTh1", 96)) == 2 * (720 * 96 + 96)


def test_revin_round_trip_and_statistics():
    x = jax.random.normal(jax.random.key(0), (3, 50, 4)) * 5.0 + 2.0
    xn, stats = model.revin_normalize(x)
    np.testing.assert_allclose(np.asarray(xn).mean(1), 0.0, atol=1e-5)
    var = np.asarray(x).var(1)  # ddof 0
    np.testing.assert_allclose(np.asarray(xn).std(1), np.sqrt(var / (var + 1e-5)), rtol=1e-5)
    np.testing.assert_allclose(model.revin_denormalize(xn, stats), x, rtol=1e-5, atol=1e-5)


def test_phase_tokens_round_trip_and_layout():
    x = jnp.arange(2 * 48, dtype=jnp.float32).reshape(2, 48)
    tokens = model.to_phase_tokens(x, 24)  # (N, P, K)
    assert tokens.shape == (2, 24, 2)
    np.testing.assert_array_equal(tokens[0, 5], [5.0, 29.0])  # offset 5 in each of the two cycles
    np.testing.assert_array_equal(model.from_phase_tokens(tokens, 48), x)
    np.testing.assert_array_equal(model.from_phase_tokens(tokens, 30), x[:, :30])


def test_phase_tokens_circular_padding():
    x = jnp.arange(30, dtype=jnp.float32)[None]  # L = 30, P = 24 -> K = 2, pad 18 from the start (circular)
    tokens = model.to_phase_tokens(x, 24)
    flat = np.asarray(model.from_phase_tokens(tokens, 48))[0]
    np.testing.assert_array_equal(flat, np.concatenate([np.arange(30), np.arange(18)]))


def _np_mha(q_in, kv, w, heads):
    wq, bq, wk, bk, wv, bv, wo, bo = [np.asarray(t, np.float64) for t in w]
    d = q_in.shape[-1]
    dh = d // heads
    q, k, v = q_in @ wq + bq, kv @ wk + bk, kv @ wv + bv
    out = np.zeros((q.shape[0], d))
    for h in range(heads):
        sl = slice(h * dh, (h + 1) * dh)
        s = q[:, sl] @ k[:, sl].T / np.sqrt(dh)
        a = np.exp(s - s.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        out[:, sl] = a @ v[:, sl]
    return out @ wo + bo


def _np_ln(x, scale, bias):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * scale + bias


def test_routing_layer_matches_plain_numpy():
    layer = model.RoutingLayer(8, 4, 2, 24, dropout=0.1, use_kernel=False, kernel_block=128, kernel_interpret=True,
                               key=jax.random.key(1))
    z = np.asarray(jax.random.normal(jax.random.key(2), (3, 24, 8)), np.float64)
    got = np.asarray(layer(jnp.asarray(z, jnp.float32)))  # key=None: deterministic (no dropout)
    g = lambda t: np.asarray(t[...], np.float64)  # noqa: E731
    for n in range(3):
        zz = z[n] + g(layer.pos)
        buf = _np_mha(g(layer.routers), zz, layer.send.weights(), 2)    # routers aggregate
        routed = _np_mha(zz, buf, layer.receive.weights(), 2)           # routers distribute
        h = _np_ln(zz + routed, g(layer.norm1.scale), g(layer.norm1.bias))
        pre = h @ g(layer.fc1.w) + g(layer.fc1.b)
        gelu = 0.5 * pre * (1 + np.vectorize(math.erf)(pre / np.sqrt(2)))
        h = _np_ln(h + gelu @ g(layer.fc2.w) + g(layer.fc2.b), g(layer.norm2.scale), g(layer.norm2.bias))
        np.testing.assert_allclose(got[n], h, rtol=1e-5, atol=1e-5)


def test_phaseformer_forward_shapes_dropout_and_stacking():
    m = model.PhaseFormer(seq_len=96, pred_len=30, latent_dim=4, num_layers=2, num_routers=4, num_heads=2,
                          key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (2, 96, 3))
    y = m(x)
    assert y.shape == (2, 30, 3)
    np.testing.assert_array_equal(y, m(x))                       # no key: deterministic
    assert not np.allclose(m(x, jax.random.key(5)), y)           # a key turns dropout on
    # channel independence: channel 1's forecast does not depend on channel 0
    x2 = x.at[:, :, 0].set(0.0)
    np.testing.assert_allclose(m(x2)[:, :, 1], y[:, :, 1], rtol=1e-5, atol=1e-6)
    # scale equivariance from RevIN: forecasting a*x + b gives a*y + b
    np.testing.assert_allclose(m(3.0 * x + 1.0), 3.0 * y + 1.0, rtol=1e-3, atol=1e-3)


def test_sparsetsf_matches_numpy():
    m = model.SparseTSF(seq_len=48, pred_len=12, period=4, key=jax.random.key(0))
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, 48, 3)), np.float64)
    w, lin = np.asarray(m.conv[...], np.float64), np.asarray(m.linear.w[...], np.float64)
    got = np.asarray(m(jnp.asarray(x, jnp.float32)))
    for b in range(2):
        for c in range(3):
            s = x[b, :, c] - x[b, :, c].mean()
            agg = np.correlate(np.pad(s, 2), w, mode="valid") + s   # conv1d (cross-correlation), zero pad 2
            seg = agg.reshape(12, 4).T                                # (period, seg_x)
            y = (seg @ lin).T.reshape(-1) + x[b, :, c].mean()
            np.testing.assert_allclose(got[b, :, c], y, rtol=1e-4, atol=1e-5)


def test_dlinear_matches_numpy():
    m = model.DLinear(seq_len=40, pred_len=8, moving_avg=5, key=jax.random.key(0))
    x = np.asarray(jax.random.normal(jax.random.key(1), (2, 40, 3)), np.float64)
    got = np.asarray(m(jnp.asarray(x, jnp.float32)))
    g = lambda t: np.asarray(t[...], np.float64)  # noqa: E731
    for b in range(2):
        for c in range(3):
            s = x[b, :, c]
            trend = np.convolve(np.pad(s, 2, mode="edge"), np.ones(5) / 5, mode="valid")
            y = (s - trend) @ g(m.seasonal.w) + g(m.seasonal.b) + trend @ g(m.trend.w) + g(m.trend.b)
            np.testing.assert_allclose(got[b, :, c], y, rtol=1e-4, atol=1e-5)


def test_bad_model_inputs():
    m = model.PhaseFormer(seq_len=48, pred_len=24, latent_dim=4, num_heads=2, num_routers=2, key=jax.random.key(0))
    with pytest.raises(ValueError, match="input length 40: expected seq_len=48"):
        m(jnp.zeros((1, 40, 2)))
    with pytest.raises(ValueError, match="latent_dim=6: expected a multiple of num_heads=4"):
        model.PhaseFormer(seq_len=48, pred_len=24, latent_dim=6, num_heads=4, key=jax.random.key(0))
    with pytest.raises(ValueError, match="seq_len=50: expected a multiple of the SparseTSF period 24"):
        model.SparseTSF(seq_len=50, pred_len=24, period=24, key=jax.random.key(0))
