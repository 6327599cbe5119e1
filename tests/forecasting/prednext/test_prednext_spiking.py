"""The spiking layer: LIF golden values, surrogate gradients, scan vs a Python loop, compile counts, blocks."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import CompileCounter

from core.config import ConfigError
from forecasting.prednext.spiking import (
    LIF,
    BatchNormThroughTime,
    LIFConfig,
    SEWBlock,
    SpikingConv,
    lif_scan,
    spike,
    surrogate_grad,
)


def numpy_lif(x, *, tau=2.0, v_th=1.0, v_reset=0.0, decay_input=True, order="spikingjelly"):
    """An independent step-by-step reference of the neuron (forward only)."""
    x = np.asarray(x, np.float64)
    spikes = np.zeros_like(x)
    if order == "spikingjelly":
        v = np.full(x.shape[1:], 0.0 if v_reset is None else v_reset)
        vr = 0.0 if v_reset is None else v_reset
        for t in range(len(x)):
            if decay_input:
                h = v + (x[t] - (v - vr)) / tau
            else:
                h = v - (v - vr) / tau + x[t]
            s = (h >= v_th).astype(np.float64)
            v = np.where(s > 0, vr, h) if v_reset is not None else h - v_th * s
            spikes[t] = s
    else:
        beta = 1.0 - 1.0 / tau
        u = np.zeros(x.shape[1:])
        s_prev = np.zeros(x.shape[1:])
        for t in range(len(x)):
            if v_reset is None:
                u = beta * u + x[t] - v_th * s_prev
            else:
                u = np.where(s_prev > 0, v_reset, beta * u + x[t])
            s_prev = (u >= v_th).astype(np.float64)
            spikes[t] = s_prev
    return spikes


def test_constant_input_1p5_spikes_every_other_step():
    s = lif_scan(jnp.full((12, 3), 1.5))
    np.testing.assert_array_equal(np.asarray(s[:, 0]), [0, 1] * 6)


def test_input_1_never_spikes_and_membrane_is_one_minus_half_power():
    # H_t = 1 - 2^-t < 1 for every t; float32 represents it exactly up to t = 23 (at t >= 25 it rounds to 1
    # and the neuron fires, as SpikingJelly's does in float32), so the golden check runs 20 steps
    s, h = lif_scan(jnp.full((20, 2), 1.0), return_membrane=True)
    assert float(s.sum()) == 0.0
    t = np.arange(1, 21)
    np.testing.assert_allclose(np.asarray(h[:, 0]), 1.0 - 2.0 ** (-t), rtol=1e-6)


@pytest.mark.parametrize("surrogate,alpha", [("sigmoid", 4.0), ("atan", 2.0), ("sigmoid", 1.5)])
def test_surrogate_gradient_equals_closed_form(surrogate, alpha):
    x = jnp.linspace(-2.0, 2.0, 41)
    g = jax.vmap(jax.grad(lambda v: spike(v, surrogate, alpha)))(x)
    xn = np.asarray(x, np.float64)
    if surrogate == "sigmoid":
        sig = 1.0 / (1.0 + np.exp(-alpha * xn))
        expected = alpha * sig * (1.0 - sig)
    else:
        expected = (alpha / 2.0) / (1.0 + (math.pi / 2.0 * alpha * xn) ** 2)
    np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(spike(x, surrogate, alpha)), (xn >= 0).astype(np.float32))


CASES = [
    dict(),
    dict(v_reset=None),
    dict(decay_input=False),
    dict(v_reset=-0.2, tau=3.0),
    dict(order="snntorch"),
    dict(order="snntorch", v_reset=None),
]


@pytest.mark.parametrize("kw", CASES)
def test_scan_matches_python_loop_step_for_step(kw):
    x = jax.random.uniform(jax.random.key(0), (20, 4, 5), minval=-0.5, maxval=2.5)
    cfg = LIFConfig(**kw)
    ref = numpy_lif(x, tau=cfg.tau, v_th=cfg.v_threshold, v_reset=cfg.v_reset, decay_input=cfg.decay_input,
                    order=cfg.order)
    out = lif_scan(x, cfg)
    np.testing.assert_array_equal(np.asarray(out), ref)
    assert 0 < ref.sum() < ref.size  # the case exercises both spikes and silence


def loop_lif(x, cfg):
    """A Python-loop JAX reference (unrolled) with the same spike function, for gradients."""
    vr = 0.0 if cfg.v_reset is None else cfg.v_reset
    v, out = jnp.full(x.shape[1:], vr), []
    for t in range(x.shape[0]):
        h = v + (x[t] - (v - vr)) / cfg.tau
        s = spike(h - cfg.v_threshold, cfg.surrogate, cfg.alpha)
        sd = jax.lax.stop_gradient(s) if cfg.detach_reset else s
        v = h * (1 - sd) + vr * sd if cfg.v_reset is not None else h - cfg.v_threshold * sd
        out.append(s)
    return jnp.stack(out)


@pytest.mark.parametrize("detach", [False, True])
@pytest.mark.parametrize("surrogate", ["sigmoid", "atan"])
def test_scan_gradient_matches_python_loop(detach, surrogate):
    cfg = LIFConfig(detach_reset=detach, surrogate=surrogate, alpha=4.0 if surrogate == "sigmoid" else 2.0)
    x = jax.random.uniform(jax.random.key(1), (10, 6), minval=0.0, maxval=2.5)
    w = jax.random.normal(jax.random.key(2), (10, 6))
    g = jax.grad(lambda x: jnp.sum(w * lif_scan(x, cfg)))(x)
    g_ref = jax.grad(lambda x: jnp.sum(w * loop_lif(x, cfg)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.abs(g).sum()) > 0


def test_detach_reset_changes_the_gradient():
    x = jax.random.uniform(jax.random.key(3), (10, 6), minval=0.5, maxval=2.5)
    grads = [jax.grad(lambda x: lif_scan(x, LIFConfig(detach_reset=d)).sum())(x) for d in (False, True)]
    assert not np.allclose(np.asarray(grads[0]), np.asarray(grads[1]))


def test_state_resets_per_call_and_samples_are_independent():
    x = jax.random.uniform(jax.random.key(4), (8, 5), minval=0.0, maxval=2.0)
    both = lif_scan(x)
    np.testing.assert_array_equal(np.asarray(both[:, 2:3]), np.asarray(lif_scan(x[:, 2:3])))
    np.testing.assert_array_equal(np.asarray(lif_scan(x)), np.asarray(both))


def test_layer_jits_once_for_new_values_and_once_per_batch_size():
    layer = LIF(LIFConfig(parametric=True))
    graphdef, state = nnx.split(layer)

    @jax.jit
    def apply(state, x):
        return nnx.merge(graphdef, state)(x)

    x = jnp.ones((8, 4, 3))
    apply(state, x)
    inputs = [(jax.tree.map(lambda p: p + 0.1 * i, state), x * i) for i in range(3)]  # eager ops compile here
    with CompileCounter() as cc:
        for s, xi in inputs:  # new inputs and new parameter values: no recompilation
            jax.block_until_ready(apply(s, xi))
    assert cc.count == 0
    assert apply._cache_size() == 1
    # one trace serves every batch size: a shape-polymorphic export over (T, B)
    t_, b_ = jax.export.symbolic_shape("T, B")
    exported = jax.export.export(jax.jit(lambda x: lif_scan(x)))(jax.ShapeDtypeStruct((t_, b_, 3), jnp.float32))
    for b in (1, 5, 7):
        xb = jax.random.uniform(jax.random.key(b), (6, b, 3), minval=0.0, maxval=2.0)
        np.testing.assert_array_equal(np.asarray(exported.call(xb)), np.asarray(lif_scan(xb)))


def test_parametric_lif_starts_at_tau_and_learns_its_decay():
    layer = LIF(LIFConfig(parametric=True, tau=2.0))
    np.testing.assert_allclose(float(layer.decay()), 0.5, rtol=1e-6)
    graphdef, params = nnx.split(layer, nnx.Param)
    x = jax.random.uniform(jax.random.key(5), (8, 16), minval=0.0, maxval=2.0)
    g = jax.grad(lambda p: nnx.merge(graphdef, p)(x).sum())(params)
    gw = float(g["w"][...])
    assert math.isfinite(gw) and gw != 0.0
    # decay 0.5 reproduces the fixed-tau neuron exactly
    np.testing.assert_array_equal(np.asarray(layer(x)), np.asarray(lif_scan(x, LIFConfig(tau=2.0))))


@nnx.jit
def train_call(module, x):
    return module(x, train=True)


def test_batchnorm_through_time_shares_statistics_over_steps_and_samples():
    bn = BatchNormThroughTime(3, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(6), (4, 5, 2, 2, 3)) * jnp.arange(1, 5)[:, None, None, None, None]
    y = train_call(bn, x)
    flat = np.asarray(x).reshape(-1, 3)
    ref = (flat - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-5)
    np.testing.assert_allclose(np.asarray(y).reshape(-1, 3), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(bn.bn.mean[...]), 0.1 * flat.mean(0), rtol=1e-4, atol=1e-6)


def test_spiking_conv_and_sew_block_shapes_and_connections():
    rngs = nnx.Rngs(0)
    x = (jax.random.uniform(jax.random.key(7), (3, 2, 8, 8, 4)) > 0.5).astype(jnp.float32)
    conv = SpikingConv(4, 6, stride=2, rngs=rngs)
    s = train_call(conv, x)
    assert s.shape == (3, 2, 4, 4, 6) and set(np.unique(np.asarray(s))) <= {0.0, 1.0}
    assert 0 < float(s.mean()) < 1

    @nnx.jit
    def both(block, x):  # the block's output and its residual path, from the same BN state
        path = block.conv2(block.conv1(x, train=True), train=True)
        return block(x, train=True), path

    for connect, combine in (("ADD", lambda p, x: p + x), ("IAND", lambda p, x: x * (1 - p))):
        out, path = both(SEWBlock(4, 4, connect=connect, rngs=nnx.Rngs(1)), x)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(combine(path, x)), err_msg=connect)
    assert train_call(SEWBlock(4, 8, stride=2, rngs=nnx.Rngs(2)), x).shape == (3, 2, 4, 4, 8)


def test_bad_inputs_raise():
    with pytest.raises(ConfigError, match="lif.tau"):
        LIFConfig(tau=1.0)
    with pytest.raises(ConfigError, match="lif.v_reset"):
        LIFConfig(v_reset=1.5)
    with pytest.raises(ConfigError, match="lif.order"):
        LIFConfig(order="brian")
    with pytest.raises(ValueError, match="surrogate"):
        spike(jnp.ones(3), "relu")
    with pytest.raises(ValueError, match="time-major"):
        lif_scan(jnp.float32(1.0))
    with pytest.raises(ValueError, match="connect"):
        SEWBlock(2, 2, connect="OR", rngs=nnx.Rngs(0))
    assert np.all(np.isfinite(np.asarray(surrogate_grad(jnp.linspace(-50, 50, 11), "atan", 2.0))))
