"""Attack metrics: attack success rate over correctly attributed fakes, the "attributed as real" rate, PSNR and
SSIM (also restricted to the stroke region), and FID on a small digit classifier's features."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from . import ops


def attack_success(pred_clean: np.ndarray, pred_adv: np.ndarray, source: np.ndarray) -> dict[str, float]:
    """ASR of one (attribution model, generator) cell, as in the paper.

    pred_clean, pred_adv: (N,) predicted classes before / after the attack; source: (N,) true class of each
    fake (its generator's index; 0 is "real"). Only fakes attributed correctly before the attack count:
    ASR = #(correct before and not the source after) / #(correct before); to_real = #(correct before and
    "real" after) / #(correct before). With no correctly attributed fake both are NaN and `n` is 0.
    """
    pred_clean, pred_adv, source = (np.asarray(a) for a in (pred_clean, pred_adv, source))
    if not (pred_clean.shape == pred_adv.shape == source.shape) or pred_clean.ndim != 1:
        raise ValueError(f"shapes {pred_clean.shape}, {pred_adv.shape}, {source.shape}: expected three equal (N,)")
    if np.any(source == 0):
        raise ValueError("source contains class 0 (real): ASR is defined over fakes only")
    correct = pred_clean == source
    n = int(correct.sum())
    if n == 0:
        return {"asr": float("nan"), "to_real": float("nan"), "n": 0}
    return {"asr": float(np.sum(correct & (pred_adv != source)) / n),
            "to_real": float(np.sum(correct & (pred_adv == 0)) / n), "n": n}


def mean_asr(cells: list[dict[str, float]]) -> dict[str, float]:
    """Average over (attribution model x generator) cells that have a denominator (the paper's average)."""
    good = [c for c in cells if c["n"] > 0]
    if not good:
        return {"asr": float("nan"), "to_real": float("nan"), "cells": 0}
    return {"asr": float(np.mean([c["asr"] for c in good])),
            "to_real": float(np.mean([c["to_real"] for c in good])), "cells": len(good)}


def stroke_mask(x: jax.Array, threshold: float = 0.1) -> jax.Array:
    """Pixels on or next to (3x3 dilation) a stroke of the clean image: (N, H, W, 1) bool."""
    on = (x > threshold).astype(jnp.float32)
    p = jnp.pad(on, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = x.shape[1], x.shape[2]
    return sum(p[:, i:i + h, j:j + w] for i in range(3) for j in range(3)) > 0


def psnr(x: jax.Array, y: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Per-image PSNR in dB for images in [0, 1] (peak 1), over `mask` when given: (N,)."""
    err = (x - y) ** 2
    if mask is None:
        mse = err.mean(axis=(1, 2, 3))
    else:
        m = mask.astype(err.dtype)
        mse = (err * m).sum(axis=(1, 2, 3)) / jnp.maximum(m.sum(axis=(1, 2, 3)), 1.0)
    return 10.0 * jnp.log10(1.0 / jnp.maximum(mse, 1e-10))


def ssim(x: jax.Array, y: jax.Array, mask: jax.Array | None = None, sigma: float = 1.5,
         radius: int = 3) -> jax.Array:
    """Per-image SSIM (Wang et al. 2004, Gaussian window, C1=(0.01)^2, C2=(0.03)^2, data range 1): (N,).

    With `mask` the SSIM map is averaged over the masked pixels only (the stroke region of MNIST digits).
    """
    k = ops.gaussian_kernel(sigma, radius)
    f = lambda a: ops._sep_conv(a, k, mode="reflect")  # noqa: E731
    c1, c2 = 0.01**2, 0.03**2
    mx, my = f(x), f(y)
    vx = f(x * x) - mx**2
    vy = f(y * y) - my**2
    cxy = f(x * y) - mx * my
    smap = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    if mask is None:
        return smap.mean(axis=(1, 2, 3))
    m = mask.astype(smap.dtype)
    return (smap * m).sum(axis=(1, 2, 3)) / jnp.maximum(m.sum(axis=(1, 2, 3)), 1.0)


def frechet_distance(f1: np.ndarray, f2: np.ndarray) -> float:
    """Frechet distance between Gaussians fitted to two feature sets (N, D): the FID formula."""
    f1, f2 = np.asarray(f1, np.float64), np.asarray(f2, np.float64)
    if f1.ndim != 2 or f2.ndim != 2 or f1.shape[1] != f2.shape[1]:
        raise ValueError(f"feature shapes {f1.shape}, {f2.shape}: expected (N, D) and (M, D)")
    m1, m2 = f1.mean(0), f2.mean(0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    covmean = scipy.linalg.sqrtm(s1 @ s2)
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2.0 * covmean))
