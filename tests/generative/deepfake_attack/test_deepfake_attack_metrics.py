"""ASR on hand-made predictions, PSNR / SSIM by hand, and the Frechet distance against closed forms."""

import jax.numpy as jnp
import numpy as np
import pytest

from generative.deepfake_attack import metrics as M


def test_asr_counts_only_correctly_attributed_fakes():
    source = np.array([2, 2, 2, 2, 2])
    clean = np.array([2, 2, 2, 1, 0])  # three correct before the attack
    adv = np.array([2, 0, 3, 0, 2])  # of those: kept, -> real, -> other generator
    out = M.attack_success(clean, adv, source)
    assert out == {"asr": pytest.approx(2 / 3), "to_real": pytest.approx(1 / 3), "n": 3}
    none = M.attack_success(np.array([1, 1]), np.array([2, 2]), np.array([2, 2]))
    assert none["n"] == 0 and np.isnan(none["asr"])
    avg = M.mean_asr([out, none, {"asr": 0.0, "to_real": 0.0, "n": 4}])
    assert avg == {"asr": pytest.approx(1 / 3), "to_real": pytest.approx(1 / 6), "cells": 2}


def test_asr_rejects_bad_input():
    with pytest.raises(ValueError, match="expected three equal"):
        M.attack_success(np.zeros(3), np.zeros(2), np.ones(3))
    with pytest.raises(ValueError, match="fakes only"):
        M.attack_success(np.zeros(2), np.zeros(2), np.array([0, 1]))


def test_psnr_by_hand_and_masked():
    x = jnp.zeros((1, 4, 4, 1))
    y = x.at[0, 0, 0, 0].set(0.4)  # mse = 0.16 / 16 = 0.01 -> 20 dB
    assert float(M.psnr(x, y)[0]) == pytest.approx(20.0, abs=1e-4)
    mask = jnp.zeros((1, 4, 4, 1), bool).at[0, 0, :2, 0].set(True)  # mse over 2 pixels = 0.08
    assert float(M.psnr(x, y, mask)[0]) == pytest.approx(10 * np.log10(1 / 0.08), abs=1e-4)


def test_stroke_mask_dilates_by_one_pixel():
    x = jnp.zeros((1, 5, 5, 1)).at[0, 2, 2, 0].set(1.0)
    m = np.asarray(M.stroke_mask(x))[0, ..., 0]
    assert m.sum() == 9 and m[1:4, 1:4].all()


def test_ssim_identity_constant_images_and_range():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(size=(2, 12, 12, 1)).astype(np.float32))
    np.testing.assert_allclose(np.asarray(M.ssim(x, x)), 1.0, atol=1e-5)
    # two constant images a, b: variances vanish, SSIM = (2ab + C1) / (a^2 + b^2 + C1)
    a, b = 0.2, 0.6
    c1 = 0.01**2
    s = M.ssim(jnp.full((1, 8, 8, 1), a), jnp.full((1, 8, 8, 1), b))
    assert float(s[0]) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-4)
    noisy = jnp.clip(x + 0.2 * jnp.asarray(rng.normal(size=x.shape)), 0, 1)
    assert np.all(np.asarray(M.ssim(x, noisy)) < 0.9)


def test_frechet_distance_closed_form():
    rng = np.random.default_rng(0)
    f1 = rng.normal(size=(4000, 3))
    f2 = rng.normal(size=(4000, 3)) * 2.0 + np.array([1.0, 0.0, 0.0])
    # N(m1, I) vs N(m2, 4I): |m1 - m2|^2 + tr(I + 4I - 2 * 2I) = 1 + 3 (up to sampling error)
    assert M.frechet_distance(f1, f2) == pytest.approx(4.0, abs=0.25)
    assert M.frechet_distance(f1, f1) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match=r"expected \(N, D\)"):
        M.frechet_distance(f1, f2[:, :2])
