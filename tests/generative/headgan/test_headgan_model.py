"""Volume rendering against closed forms, the tri-plane sampler against direct indexing, modulated convs."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from generative.headgan.model import ModConv, composite, sample_pdf, sample_triplane
from generative.headgan.model import volume_render as _volume_render
from generative.headgan.render import camera_rays, ray_sphere

# jitted once per (field, sample counts): eager op-by-op dispatch is slow on a loaded CPU
volume_render = jax.jit(_volume_render, static_argnums=(0, 4, 5), static_argnames=("bound",))


def test_constant_density_closed_form():
    """Constant sigma inside the unit sphere: opacity 1 - exp(-sigma * chord), features c * opacity."""
    o, d = camera_rays(jnp.float32(0.3), jnp.float32(0.1), 6)
    sigma, c = 1.7, jnp.array([0.2, 0.5, 0.9])
    field = lambda p: (jnp.full(p.shape[:-1], sigma), jnp.broadcast_to(c, p.shape[:-1] + (3,)))
    near, far, hit = ray_sphere(o, d, 0.6)
    expected = np.where(np.asarray(hit), 1 - np.exp(-sigma * np.asarray(far - near)), 0.0)
    assert np.asarray(hit).sum() > 10 and (~np.asarray(hit)).sum() > 0
    for key in (None, jax.random.key(0)):
        for n_fine in (0, 5):
            r = volume_render(field, o, d, key, 7, n_fine, bound=0.6)
            if key is None:  # the first sample sits at the entry point
                np.testing.assert_allclose(np.asarray(r["opacity"]), expected, atol=1e-5)
                np.testing.assert_allclose(np.asarray(r["features"]), expected[..., None] * np.asarray(c), atol=1e-5)
            else:  # jittered: the first sample lies within the first bin after the entry
                assert np.all(np.asarray(r["opacity"]) <= expected + 1e-6)
                lo = np.where(np.asarray(hit), 1 - np.exp(-sigma * np.asarray(far - near) * (1 - 1 / 7)), 0.0)
                assert np.all(np.asarray(r["opacity"]) >= lo - 1e-6)


def test_slab_density_closed_form():
    """Density sigma in the slab a <= z <= b: transmittance exp(-sigma (b - a) / |d_z|), error within one bin."""
    sigma, a, b = 3.0, -0.2, 0.3
    o = jnp.array([[0.0, 0.0, 2.7], [0.3, 0.1, 2.7]])
    d = jnp.array([[0.0, 0.0, -1.0], [0.1, 0.05, -1.0]])
    d = d / jnp.linalg.norm(d, axis=-1, keepdims=True)
    field = lambda p: (jnp.where((p[..., 2] >= a) & (p[..., 2] <= b), sigma, 0.0), jnp.ones(p.shape[:-1] + (1,)))
    expected = 1 - np.exp(-sigma * (b - a) / np.abs(np.asarray(d[:, 2])))
    near, far, _ = ray_sphere(o, d, 1.0)
    n = 400
    err_bound = sigma * 2 * float(jnp.max(far - near)) / n  # one bin of misplaced density at each slab face
    r = volume_render(field, o, d, None, n, 0)
    assert np.all(np.abs(np.asarray(r["opacity"]) - expected) <= err_bound)
    # with importance samples the bound is that of the coarse bins (the bins straddling a face keep their size)
    fine_err = np.abs(np.asarray(volume_render(field, o, d, None, 16, 64)["opacity"]) - expected)
    assert np.all(fine_err <= sigma * 2 * float(jnp.max(far - near)) / 16)
    # mean depth: entry + 1/sigma - L e^{-sigma L} / (1 - e^{-sigma L}) for the truncated exponential
    dz = np.abs(np.asarray(d[:, 2]))
    length = (b - a) / dz
    mean_depth = (2.7 - b) / dz + 1 / sigma - length * np.exp(-sigma * length) / (1 - np.exp(-sigma * length))
    np.testing.assert_allclose(np.asarray(r["depth"] / r["opacity"]), mean_depth, atol=2 * err_bound)


def test_composite_weights_sum_to_opacity():
    sigma = jnp.array([[0.5, 2.0, 0.0, 1.0]])
    t = jnp.array([[0.0, 0.3, 0.5, 1.2]])
    far = jnp.array([2.0])
    f, op, _, w = composite(sigma, jnp.ones((1, 4, 1)), t, far)
    tau = 0.5 * 0.3 + 2.0 * 0.2 + 0.0 + 1.0 * 0.8
    np.testing.assert_allclose(float(op[0]), 1 - math.exp(-tau), atol=1e-6)
    np.testing.assert_allclose(float(w[0, 0]), 1 - math.exp(-0.15), atol=1e-6)
    np.testing.assert_allclose(float(w[0, 1]), math.exp(-0.15) * (1 - math.exp(-0.4)), atol=1e-6)


def test_sample_pdf_inverse_cdf():
    edges = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    w = jnp.array([[0.0, 1.0, 0.0]])
    u = jnp.linspace(0.01, 0.999, 50)[None]
    s = np.asarray(sample_pdf(edges, w, u))
    assert np.all((s >= 0.999) & (s <= 2.001))  # nearly all mass in the middle bin (1e-5 floor elsewhere)
    w = jnp.array([[1.0, 1.0, 2.0]])
    s = np.asarray(sample_pdf(edges, w, jnp.array([[0.25, 0.5, 0.75]])))
    np.testing.assert_allclose(s[0], [1.0, 2.0, 2.5], atol=1e-4)  # CDF 0, .25, .5, 1 at the edges


def test_triplane_sampler_matches_direct_indexing():
    r, c = 6, 3
    planes = jax.random.normal(jax.random.key(0), (3, r, r, c))
    centre = lambda i: (i + 0.5) / r * 2 - 1
    rng = np.random.default_rng(0)
    idx = rng.integers(0, r, (20, 3))  # texel index along x, y, z
    pts = jnp.asarray(centre(idx.astype(np.float32)))
    out = np.asarray(sample_triplane(planes, pts))
    p = np.asarray(planes)
    x, y, z = idx[:, 0], idx[:, 1], idx[:, 2]
    direct = (p[0, y, x] + p[1, z, x] + p[2, y, z]) / 3  # xy: row y, col x; xz: row z, col x; zy: row y, col z
    np.testing.assert_allclose(out, direct, atol=1e-5)
    # halfway between two texels along x: the average of the two in the planes that contain x
    mid = jnp.asarray([[(centre(1) + centre(2)) / 2, centre(3), centre(0)]], jnp.float32)
    exp = ((p[0, 3, 1] + p[0, 3, 2]) / 2 + (p[1, 0, 1] + p[1, 0, 2]) / 2 + p[2, 3, 0]) / 3
    np.testing.assert_allclose(np.asarray(sample_triplane(planes, mid))[0], exp, atol=1e-5)


def test_modconv_equals_per_sample_modulated_weights():
    layer = ModConv(3, 4, 5, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 6, 6, 3))
    w = jax.random.normal(jax.random.key(2), (2, 5))
    y = np.asarray(layer(x, w))
    s = np.asarray(layer.style(w))
    base = np.asarray(layer.weight[...]) / math.sqrt(9 * 3)
    for b in range(2):
        wb = base * s[b][None, None, :, None]
        wb = wb / np.sqrt((wb**2).sum((0, 1, 2), keepdims=True) + 1e-8)
        ref = jax.lax.conv_general_dilated(x[b:b + 1], jnp.asarray(wb), (1, 1), "SAME",
                                           dimension_numbers=("NHWC", "HWIO", "NHWC"))
        np.testing.assert_allclose(y[b], np.asarray(ref[0]) + np.asarray(layer.bias[...]), atol=1e-4)
