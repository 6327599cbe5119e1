"""Image operators against scipy references (blur, median, block DCT) and their defining properties."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft
import scipy.ndimage

from generative.deepfake_attack import ops


def _images(n=3, size=16, seed=0):
    return np.random.default_rng(seed).uniform(size=(n, size, size, 1)).astype(np.float32)


def test_gaussian_blur_matches_scipy():
    x = _images()
    sigma = 1.0
    radius = int(np.ceil(2 * sigma))
    ref = np.stack([scipy.ndimage.gaussian_filter(im[..., 0], sigma, mode="mirror", truncate=radius / sigma)
                    for im in x])[..., None]
    np.testing.assert_allclose(np.asarray(ops.gaussian_blur(jnp.asarray(x), sigma)), ref, atol=1e-5)


def test_median3x3_matches_scipy():
    x = _images()
    ref = np.stack([scipy.ndimage.median_filter(im[..., 0], size=3, mode="nearest") for im in x])[..., None]
    np.testing.assert_allclose(np.asarray(ops.median3x3(jnp.asarray(x))), ref, atol=0)


def test_block_dct_matches_scipy_and_inverts():
    x = _images(2, 8)
    c = np.asarray(ops.block_dct(jnp.asarray(x), 4))
    assert c.shape == (2, 2, 2, 4, 4)
    ref = scipy.fft.dctn(x[0, 4:8, 0:4, 0], norm="ortho")
    np.testing.assert_allclose(c[0, 1, 0], ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ops.block_idct(jnp.asarray(c))), x, atol=1e-5)
    with pytest.raises(ValueError, match="divisible by the DCT block 3"):
        ops.block_dct(jnp.asarray(x), 3)


def test_dct_quantize_small_step_is_identity_and_large_step_removes_detail():
    x = _images(2, 8)
    np.testing.assert_allclose(np.asarray(ops.dct_quantize(jnp.asarray(x), 1e-6)), x, atol=1e-5)
    coarse = np.asarray(ops.dct_quantize(jnp.asarray(x), 10.0))
    # only the DC term survives: every 4x4 block is constant
    assert np.allclose(coarse[:, :4, :4].std(axis=(1, 2)), 0, atol=1e-6)


def test_spectrum_normalize_whitens_by_profile():
    x = _images(4, 8)
    y = np.asarray(ops.spectrum_normalize(jnp.asarray(x), jnp.ones((8, 8))))
    np.testing.assert_allclose(y.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=(1, 2, 3)), 1, atol=1e-3)
    # with a flat profile it is a standardisation of the image itself
    z = (x - x.mean(axis=(1, 2, 3), keepdims=True)) / x.std(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(y, z, atol=1e-3)


def test_nearest_repeat_equals_jax_image_resize():
    x = jnp.asarray(_images(2, 7))
    np.testing.assert_array_equal(np.asarray(ops.resize(x, 14, "nearest")),
                                  np.asarray(jax.image.resize(x, (2, 14, 14, 1), "nearest")))


def test_quantize8_and_errors():
    x = jnp.array([-0.1, 0.0, 0.5, 1.2])
    np.testing.assert_allclose(np.asarray(ops.quantize8(x)), [0.0, 0.0, 128 / 255, 1.0], atol=1e-7)
    with pytest.raises(ValueError, match="sigma=0"):
        ops.gaussian_kernel(0)
    with pytest.raises(ValueError, match="method='cubic'"):
        ops.resize(jnp.zeros((1, 4, 4, 1)), 8, "cubic")
