"""R1, ViCiCo, GPC and NS losses on constructed inputs; Frechet distance and consistency against closed forms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from generative.headgan import losses as L
from generative.headgan.metrics import cross_view_spread, frechet_distance, mean_pairwise_distance


def test_r1_on_linear_and_quadratic_discriminators():
    x = {"image": jax.random.normal(jax.random.key(0), (4, 3, 3, 2)),
         "mask": jax.random.normal(jax.random.key(1), (4, 2))}
    a_img, a_mask = jnp.arange(18.0).reshape(3, 3, 2) / 10, jnp.array([1.0, -2.0])
    linear = lambda v: jnp.sum(v["image"] * a_img, (1, 2, 3)) + v["mask"] @ a_mask
    logits, r1 = L.r1_penalty(linear, x)
    np.testing.assert_allclose(float(r1), float(jnp.sum(a_img**2) + jnp.sum(a_mask**2)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(linear(x)), rtol=1e-6)
    quad = lambda v: jnp.sum(v["image"] ** 2, (1, 2, 3)) + jnp.sum(v["mask"] ** 2, 1)
    _, r1 = L.r1_penalty(quad, x)
    expected = np.mean(4 * (np.sum(np.asarray(x["image"]) ** 2, (1, 2, 3)) + np.sum(np.asarray(x["mask"]) ** 2, 1)))
    np.testing.assert_allclose(float(r1), expected, rtol=1e-5)


def test_ns_and_vicico_losses():
    real, fake = jnp.array([2.0, -1.0]), jnp.array([0.5, -3.0])
    sp = lambda v: math.log1p(math.exp(v))
    np.testing.assert_allclose(float(L.d_loss_ns(real, fake)), (sp(0.5) + sp(-3)) / 2 + (sp(-2) + sp(1)) / 2, rtol=1e-6)
    np.testing.assert_allclose(float(L.g_loss_ns(fake)), (sp(-0.5) + sp(3)) / 2, rtol=1e-6)
    v = jnp.array([1.3, -0.4])
    sig = 1 / (1 + np.exp(-np.asarray(v)))
    np.testing.assert_allclose(float(L.vicico_loss(v)), np.mean(-np.log(1 - sig)), rtol=1e-6)  # -log(1 - D)


def test_shuffle_conditions_always_mismatch():
    b = 16
    cam = jnp.arange(b * 4, dtype=jnp.float32).reshape(b, 4)
    sem = -jnp.arange(b * 3, dtype=jnp.float32).reshape(b, 3)
    seen = set()
    for s in range(10):
        c2, s2, which = L.shuffle_conditions(jax.random.key(s), cam, sem)
        c2, s2, which = np.asarray(c2), np.asarray(s2), np.asarray(which)
        cam_changed = np.any(c2 != np.asarray(cam), 1)
        sem_changed = np.any(s2 != np.asarray(sem), 1)
        np.testing.assert_array_equal(cam_changed, which != 1)
        np.testing.assert_array_equal(sem_changed, which != 0)
        assert np.all(cam_changed | sem_changed)
        assert set(map(tuple, c2)) <= set(map(tuple, np.asarray(cam)))  # values come from the batch
        seen |= set(which.tolist())
    assert seen == {0, 1, 2}
    with pytest.raises(ValueError, match="batch of 1"):
        L.shuffle_conditions(jax.random.key(0), cam[:1], sem[:1])


def test_gpc_swap():
    cam, other = jnp.zeros((1000, 4)), jnp.ones((1000, 4))
    assert float(L.gpc_swap(jax.random.key(0), cam, other, 0.0).sum()) == 0
    assert float(L.gpc_swap(jax.random.key(0), cam, other, 1.0).mean()) == 1
    assert abs(float(L.gpc_swap(jax.random.key(0), cam, other, 0.7)[:, 0].mean()) - 0.7) < 0.05


def test_frechet_distance_and_diversity_closed_forms():
    mu1, mu2 = np.array([0.0, 1.0]), np.array([1.0, -1.0])
    c1, c2 = np.diag([1.0, 4.0]), np.diag([9.0, 1.0])
    expected = 1 + 4 + (1 - 3) ** 2 + (2 - 1) ** 2
    np.testing.assert_allclose(frechet_distance(mu1, c1, mu2, c2), expected, rtol=1e-8)
    c = np.array([[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(frechet_distance(mu1, c, mu1, c), 0.0, atol=1e-8)
    f = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 4.0]])
    np.testing.assert_allclose(mean_pairwise_distance(f), (5 + 4 + 3) / 3)
    same = np.repeat(np.random.default_rng(0).normal(size=(5, 1, 3)), 4, 1)
    assert cross_view_spread(same) == 0.0
    noisy = same + np.random.default_rng(1).normal(size=same.shape)
    assert cross_view_spread(noisy) > 0.3
