"""Generator samplers (shape, range, determinism under a key), MADE's autoregressive mask, the single-scale PSNR
calibration and the additive L2 PGD (the attack readings, budget and pseudo-generators:
test_deepfake_attack_attacks)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from generative.deepfake_attack import losses as L
from generative.deepfake_attack import metrics as M
from generative.deepfake_attack import train as T
from generative.deepfake_attack.configs import GENERATORS, GenConfig
from generative.deepfake_attack.model import MADE, apply, split

GEN = GenConfig(latent=4, width=4, made_hidden=8, ddpm_timesteps=3)


@pytest.mark.parametrize("name", GENERATORS)
def test_sampler_shape_range_and_determinism(name):
    graphdef, params = T.build_generator(name, GEN, 8, jax.random.key(0))
    sample = T.make_sampler(name, graphdef, GEN, 8)
    a = np.asarray(sample(params, jax.random.key(1), 3))
    b = np.asarray(sample(params, jax.random.key(1), 3))
    c = np.asarray(sample(params, jax.random.key(2), 3))
    assert a.shape == (3, 8, 8, 1) and a.dtype == np.float32
    assert a.min() >= 0.0 and a.max() <= 1.0
    np.testing.assert_allclose(a * 255, np.round(a * 255), atol=1e-4)  # 8-bit levels
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_made_output_d_depends_only_on_earlier_pixels():
    graphdef, params = split(MADE(6, 16, rngs=nnx.Rngs(0)))
    params = jax.tree.map(lambda p: p + 0.1, params)  # make the zero-initialised direct term non-zero too
    jac = jax.jacobian(lambda x: apply(graphdef, params, x[None])[0])(jnp.full(6, 0.5))
    jac = np.asarray(jac)  # jac[d, j] = d logit_d / d x_j
    assert np.all(jac[np.triu_indices(6)] == 0.0)
    assert np.all(np.abs(jac[np.tril_indices(6, -1)]) > 0)


@pytest.mark.parametrize("mode", [0.0, 1.0])
def test_calibrated_scale_hits_target_psnr(mode):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.2, 0.8, size=(16, 8, 8, 1)).astype(np.float32)
    t = np.tanh(rng.normal(size=x.shape)).astype(np.float32)
    s = T.calibrate_scale(x, t, mode, 30.0)
    y = np.clip(x + s * t * (mode * x + 1 - mode), 0, 1)
    assert float(np.mean(M.psnr(jnp.asarray(x), jnp.asarray(y)))) == pytest.approx(30.0, abs=1e-3)


def test_pgd_stays_in_the_l2_ball_and_raises_the_loss():
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.uniform(0.3, 0.7, size=(5, 4, 4, 1)).astype(np.float32))
    w = jnp.asarray(rng.normal(size=(16, 3)).astype(np.float32))
    logits_fn = lambda xb: xb.reshape(xb.shape[0], -1) @ w  # noqa: E731
    y = jnp.argmax(logits_fn(x), -1)
    xa = T.pgd_l2(logits_fn, x, y, 0.5, 10)
    norms = np.sqrt(np.sum(np.asarray(xa - x) ** 2, axis=(1, 2, 3)))
    assert np.all(norms <= 0.5 + 1e-5) and np.all(norms > 0.1)
    assert float(L.cross_entropy(logits_fn(xa), y)) > float(L.cross_entropy(logits_fn(x), y))


def test_pgd_on_stacked_copies_equals_one_run_per_model():
    """The evaluator attacks all attribution models in one program, one copy of the images per model: each
    copy must follow exactly the PGD run against its own model alone."""
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.uniform(0.3, 0.7, size=(5, 4, 4, 1)).astype(np.float32))
    ws = jnp.asarray(rng.normal(size=(3, 16, 3)).astype(np.float32))
    one = lambda w: lambda xb: xb.reshape(xb.shape[0], -1) @ w  # noqa: E731
    y = jnp.asarray(rng.integers(0, 3, size=5))
    stacked_logits = lambda xs: jnp.stack([one(ws[a])(xs[a]) for a in range(3)])  # noqa: E731
    xa = T.pgd_l2(stacked_logits, jnp.broadcast_to(x, (3, *x.shape)), jnp.broadcast_to(y, (3, 5)), 0.5, 6)
    for a in range(3):
        np.testing.assert_allclose(np.asarray(xa[a]), np.asarray(T.pgd_l2(one(ws[a]), x, y, 0.5, 6)), atol=1e-6)
