"""HeadsLite renderer: camera rays, the bounding-sphere chord, the back-only cue, datasets and the encoder."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from generative.headgan import configs, data
from generative.headgan.render import (
    BACK_ONLY,
    CAMERA_RADIUS,
    FOV_DEG,
    NUM_PARAMS,
    camera_rays,
    chunked,
    ray_sphere,
    render_batch,
    render_head,
)


def test_camera_rays_geometry():
    res = 5
    o, d = camera_rays(jnp.float32(0.0), jnp.float32(0.0), res)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(d), axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(o[0, 0]), [0, 0, CAMERA_RADIUS], atol=1e-6)
    np.testing.assert_allclose(np.asarray(d[2, 2]), [0, 0, -1], atol=1e-6)  # centre pixel looks at the origin
    # the corner ray makes the angle atan(tan(fov/2) * sqrt(2) * (1 - 1/res)) with the axis
    t = math.tan(math.radians(FOV_DEG) / 2) * (1 - 1 / res)
    np.testing.assert_allclose(float(-d[0, 0, 2]), 1 / math.sqrt(1 + 2 * t * t), atol=1e-6)
    assert d[0, 0, 1] > 0 and d[0, 0, 0] < 0  # row 0 is the top, column 0 the left (camera at +z sees -x left)
    o, d = camera_rays(jnp.float32(math.pi / 2), jnp.float32(0.3), res)  # yaw 90 deg: camera on the +x side
    pos = CAMERA_RADIUS * np.array([math.cos(0.3), math.sin(0.3), 0.0])
    np.testing.assert_allclose(np.asarray(o[0, 0]), pos, atol=1e-5)
    np.testing.assert_allclose(np.asarray(d[2, 2]), -pos / CAMERA_RADIUS, atol=1e-5)


def test_ray_sphere_chord_closed_form():
    o = jnp.array([[0.0, 0.3, 2.7], [0.0, 0.0, 2.7], [0.0, 1.5, 2.7]])
    d = jnp.array([[0.0, 0.0, -1.0]] * 3)
    near, far, hit = ray_sphere(o, d, 1.0)
    np.testing.assert_allclose(np.asarray(far - near)[:2], [2 * math.sqrt(1 - 0.09), 2.0], atol=1e-6)
    np.testing.assert_allclose(float(near[1]), 1.7, atol=1e-6)
    assert list(np.asarray(hit)) == [True, True, False]


def test_back_only_cue_invisible_from_the_front():
    p = jax.random.uniform(jax.random.key(0), (NUM_PARAMS,))
    q = p.at[jnp.array(BACK_ONLY)].set(1.0 - p[jnp.array(BACK_ONLY)])  # another ponytail colour and size
    yaws = jnp.array([0.0, 0.4, -0.4, math.pi])  # frontal, +-23 deg, back
    params = jnp.stack([p] * 4 + [q] * 4)
    rgb, mask = render_batch(params, jnp.tile(yaws, 2), jnp.full((8,), 0.2), res=16, chunk=8)
    rgb, mask = np.asarray(rgb), np.asarray(mask)
    np.testing.assert_array_equal(rgb[:3], rgb[4:7])
    np.testing.assert_array_equal(mask[:3], mask[4:7])
    assert np.abs(rgb[3] - rgb[7]).max() > 0.2  # but it is seen from the back


def test_render_outputs_and_errors():
    p = jax.random.uniform(jax.random.key(1), (3, NUM_PARAMS))
    rgb, mask = render_batch(p, jnp.zeros(3), jnp.zeros(3), res=16, chunk=2)
    assert rgb.shape == (3, 16, 16, 3) and mask.shape == (3, 16, 16)
    rgb, mask = np.asarray(rgb), np.asarray(mask)
    assert 0.15 < mask.mean() < 0.8 and mask.min() == 0.0 and mask.max() == 1.0
    assert np.all(rgb[mask == 0] == 0.0) and rgb.min() >= 0 and rgb.max() <= 1
    alone, _ = render_batch(p[2:], jnp.zeros(1), jnp.zeros(1), res=16, chunk=2)
    np.testing.assert_array_equal(np.asarray(alone[0]), rgb[2])  # the padded last chunk is cut correctly
    with pytest.raises(ValueError, match=r"params of shape \(5,\): expected \(\.\.\., 16\)"):
        render_head(jnp.zeros(5), jnp.float32(0.0), jnp.float32(0.0), 8)


def test_datasets_regimes_and_semantics():
    cfg = configs.DataConfig(res=16, n_images=400, views_per_id=8)
    yaw = np.abs(np.degrees(np.asarray(data.sample_yaws(jax.random.key(0), 4000, "imbalanced", cfg))))
    assert abs((yaw <= 45).mean() - 0.7) < 0.03 and abs((yaw >= 135).mean() - 0.1) < 0.02
    bal = np.asarray(data.sample_yaws(jax.random.key(0), 4000, "balanced", cfg))
    # each identity's 8 views: one per 45-degree sector
    sectors = np.floor((bal + math.pi) / (2 * math.pi) * 8).astype(int).reshape(-1, 8)
    assert np.all(sectors == np.arange(8))
    with pytest.raises(ValueError, match="regime='nope'"):
        data.sample_yaws(jax.random.key(0), 4, "nope", cfg)
    enc = configs.EncoderConfig(sem_dim=8, feat_dim=8, channels=8, n_train=128, steps=60, batch_size=32,
                                fast_compile=True)
    small = dataclasses.replace(cfg, n_images=32, views_per_id=4)
    prepared = data.prepare(small, enc, regimes=("balanced",))
    d = prepared["balanced"]
    assert d["images"].shape == (32, 16, 16, 3) and d["images"].dtype == np.uint8
    sem = d["sem"].reshape(8, 4, -1)
    np.testing.assert_array_equal(sem, np.repeat(sem[:, :1], 4, 1))  # one semantic per identity, all views
    np.testing.assert_allclose(np.linalg.norm(d["sem"], axis=-1), 1.0, atol=1e-5)
    assert not np.allclose(sem[0, 0], sem[1, 0])
    info = prepared["semantic_info"]
    assert info["final_loss"] < info["first_loss"]  # the stand-in encoder learned something


def test_chunked_equals_one_call_with_a_ragged_last_chunk_and_one_compile():
    calls = []

    @jax.jit
    def fn(a, b):
        calls.append(a.shape)  # runs at trace time only: one entry per compile
        return a * 2.0 + b[:, None], jnp.sum(a, 1)

    a = np.arange(22 * 3, dtype=np.float32).reshape(22, 3)
    b = np.linspace(-1, 1, 22, dtype=np.float32)
    out, total = chunked(fn, 8)(a, jnp.asarray(b))  # chunks of 8, 8 and 6 (padded to 8)
    np.testing.assert_array_equal(out, a * 2.0 + b[:, None])
    np.testing.assert_array_equal(total, a.sum(1))
    assert out.shape == (22, 3) and total.shape == (22,) and calls == [(8, 3)]


def test_arm_params_slices_every_leaf_of_the_stacked_arms():
    from generative.headgan.train import arm_params

    tree = {"w": jnp.arange(24.0).reshape(3, 2, 4), "b": {"v": jnp.arange(3)}}
    for i in range(3):
        got = arm_params(tree, i)
        np.testing.assert_array_equal(got["w"], np.arange(24.0).reshape(3, 2, 4)[i])
        assert int(got["b"]["v"]) == i
