"""The fast paths of the spiking layer (issue 47): the custom-VJP LIF against differentiating the plain scan, the
elementwise max-pool backward against XLA's select-and-scatter, and the im2col stem conv against XLA's conv."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from forecasting.prednext.spiking import BatchNormThroughTime, LIFConfig, SpikingConv, conv_im2col, lif_scan, max_pool

# the options the custom VJP covers (the SpikingJelly order): every combination of reset kind (hard to 0, soft),
# detach_reset and a learned decay (PLIF), with the surrogate and decay_input alternating across them, and a
# nonzero hard-reset voltage; the membrane output carries a cotangent too
VJP_CASES = [dict(v_reset=r, detach_reset=dr, learned=lk, surrogate=("sigmoid", "atan")[i % 2], decay_input=i % 4 < 2)
             for i, (r, dr, lk) in enumerate(itertools.product([0.0, None], [False, True], [False, True]))]
VJP_CASES += [dict(v_reset=-0.2, detach_reset=False, learned=True, surrogate="atan", decay_input=True),
              dict(v_reset=-0.2, detach_reset=True, learned=False, surrogate="sigmoid", decay_input=False)]


def test_custom_vjp_gradients_equal_differentiating_the_scan():
    x = jax.random.uniform(jax.random.key(0), (6, 5, 7), minval=-0.5, maxval=2.5)
    ws, wh = jax.random.normal(jax.random.key(1), x.shape), jax.random.normal(jax.random.key(2), x.shape)
    k0 = jnp.float32(0.37)

    @functools.partial(jax.jit, static_argnums=0)
    def both(kw):  # gradients and forward of the custom VJP and of the plain scan, in one compile per case
        kw = dict(kw)
        learned = kw.pop("learned")
        cfg = LIFConfig(alpha=4.0 if kw["surrogate"] == "sigmoid" else 2.0, **kw)

        def loss(x, k, custom):
            s, h = lif_scan(x, cfg, decay=k if learned else None, return_membrane=True, custom_vjp=custom)
            return jnp.sum(ws * s) + jnp.sum(wh * h), (s, h)

        return [jax.grad(loss, (0, 1), has_aux=True)(x, k0, custom) for custom in (True, False)]

    for kw in VJP_CASES:
        ((gx, gk), fwd), ((gx_ref, gk_ref), fwd_ref) = both(tuple(sorted(kw.items())))
        # the same spikes; the membrane to float rounding (under jit XLA may contract the unrolled steps into FMAs)
        np.testing.assert_array_equal(np.asarray(fwd[0]), np.asarray(fwd_ref[0]), err_msg=str(kw))
        np.testing.assert_allclose(np.asarray(fwd[1]), np.asarray(fwd_ref[1]), rtol=1e-6, atol=1e-7, err_msg=str(kw))
        assert 0 < float(fwd[0].sum()) < fwd[0].size  # the case exercises both spikes and silence
        np.testing.assert_allclose(np.asarray(gx), np.asarray(gx_ref), rtol=1e-5, atol=1e-6, err_msg=str(kw))
        np.testing.assert_allclose(float(gk), float(gk_ref), rtol=1e-5, err_msg=str(kw))
        assert (float(gk) != 0.0) == kw["learned"], kw  # a constant decay gets no gradient
        assert float(jnp.abs(gx).sum()) > 0


def test_custom_vjp_spike_only_gradient_and_which_path_runs():
    cfg = LIFConfig()
    x = jax.random.uniform(jax.random.key(3), (8, 2, 3, 3, 4), minval=0.0, maxval=2.5)
    w = jax.random.normal(jax.random.key(4), x.shape)
    g = jax.grad(lambda x: jnp.sum(w * lif_scan(x, cfg)))(x)
    g_ref = jax.grad(lambda x: jnp.sum(w * lif_scan(x, cfg, custom_vjp=False)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-5, atol=1e-6)
    assert "name=_lif_sj" in str(jax.make_jaxpr(lambda x: lif_scan(x, cfg))(x))
    # the snnTorch order is not covered by the custom VJP: it runs the plain scan
    assert "name=_lif_sj" not in str(jax.make_jaxpr(lambda x: lif_scan(x, LIFConfig(order="snntorch")))(x))


@pytest.mark.parametrize("size", [2, 4])
def test_max_pool_values_and_gradient_equal_xla_on_ties(size):
    spikes = (jax.random.uniform(jax.random.key(5), (3, 8, 8, 5)) > 0.5).astype(jnp.float32)  # ties everywhere
    floats = jax.random.normal(jax.random.key(6), (3, 8, 8, 5))
    for x in (spikes, floats, jnp.zeros((2, 8, 8, 1))):
        g = jax.random.normal(jax.random.key(7), (x.shape[0], 8 // size, 8 // size, x.shape[-1]))

        def ref(x):
            return nnx.max_pool(x, (size, size), strides=(size, size))

        np.testing.assert_array_equal(np.asarray(max_pool(x, size)), np.asarray(ref(x)))
        ours = jax.vjp(lambda x: max_pool(x, size), x)[1](g)[0]
        theirs = jax.vjp(ref, x)[1](g)[0]
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    with pytest.raises(ValueError, match="divisible"):
        max_pool(jnp.ones((1, 5, 4, 1)), 2)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_im2col_conv_equals_xla_conv_and_its_gradient(k):
    x = jax.random.normal(jax.random.key(8), (4, 9, 7, 2))
    w = jax.random.normal(jax.random.key(9), (k, k, 2, 5))
    g = jax.random.normal(jax.random.key(10), (4, 9, 7, 5))

    def ref(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    np.testing.assert_allclose(np.asarray(conv_im2col(x, w)), np.asarray(ref(x, w)), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.vjp(conv_im2col, x, w)[1](g), jax.vjp(ref, x, w)[1](g)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-4)


def test_spiking_conv_stem_uses_im2col_with_the_same_gradient_as_xla_conv():
    conv = SpikingConv(1, 4, rngs=nnx.Rngs(0))
    x = jax.random.uniform(jax.random.key(11), (3, 2, 6, 6, 1))
    kernel = conv.conv.kernel[...]

    def pre_lif(kernel, fast):
        xm = x.reshape(-1, 6, 6, 1)
        y = conv_im2col(xm, kernel) if fast else jax.lax.conv_general_dilated(
            xm, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.sin(y))

    g_fast, g_xla = (np.asarray(jax.grad(pre_lif)(kernel, fast)) for fast in (True, False))
    np.testing.assert_allclose(g_fast, g_xla, rtol=1e-5, atol=1e-5)
    # the module's output is the im2col path's: spikes of BN(conv_im2col(x))
    bn = jax.jit(lambda y: conv.bn.bn(y, use_running_average=True))
    expected = lif_scan(bn(conv_im2col(x.reshape(-1, 6, 6, 1), kernel)).reshape(3, 2, 6, 6, 4))
    out = nnx.jit(lambda m, x: m(x, train=False))(conv, x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(expected))


def test_fused_batch_norm_equals_nnx_batch_norm_values_gradients_and_running_stats():
    x = jax.random.normal(jax.random.key(12), (3, 4, 5, 5, 6)) * 2.0 + 0.7
    g = jax.random.normal(jax.random.key(13), x.shape)
    fused = BatchNormThroughTime(6, rngs=nnx.Rngs(0))
    ref = nnx.BatchNorm(6, momentum=0.9, rngs=nnx.Rngs(0))
    for m in (fused.bn, ref):  # a non-trivial scale and shift
        m.scale[...] = jnp.linspace(0.5, 1.5, 6)
        m.bias[...] = jnp.linspace(-0.2, 0.3, 6)

    def run(module, fast):
        graphdef, params, stats = nnx.split(module, nnx.Param, nnx.BatchStat)

        def loss(params, x):
            m = nnx.merge(graphdef, params, stats, copy=True)
            y = m(x, train=True) if fast else m(x.reshape(-1, 6), use_running_average=False).reshape(x.shape)
            return jnp.sum(g * y), (y, nnx.state(m, nnx.BatchStat))

        return jax.jit(jax.grad(loss, (0, 1), has_aux=True))(params, x)

    (gp, gx), (y, stats) = run(fused, True)
    (gp_ref, gx_ref), (y_ref, stats_ref) = run(ref, False)
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_ref), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(gx_ref), rtol=1e-4, atol=1e-5)
    for name in ("scale", "bias"):
        np.testing.assert_allclose(np.asarray(gp["bn"][name][...]), np.asarray(gp_ref[name][...]), rtol=1e-4)
    for name in ("mean", "var"):
        np.testing.assert_allclose(np.asarray(stats["bn"][name][...]), np.asarray(stats_ref[name][...]), rtol=1e-5)
    # evaluation uses the running averages, as nnx.BatchNorm does
    np.testing.assert_allclose(np.asarray(nnx.jit(lambda m, x: m(x, train=False))(fused, x)),
                               np.asarray(ref(x.reshape(-1, 6), use_running_average=True)).reshape(x.shape),
                               rtol=1e-5, atol=1e-6)  # jit vs eager rounding near 0
