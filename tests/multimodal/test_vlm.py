"""multimodal/vlm.py: shapes, the image prefix and padding, answer-only loss, LoRA with a frozen LM, greedy
generation against teacher forcing, a learning smoke run and a sharded step on 8 fake devices."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from core import sharding
from core.config import ConfigError
from core.lm import lora as lora_lib
from core.lm.configs import LMConfig
from core.lm.generate import SamplingConfig, pad_prompts
from core.train import init_train_state, make_train_step
from multimodal import vlm

CONFIG = vlm.VLMConfig(vision=vlm.ViTConfig(image_size=8, patch_size=4, width=16, depth=1, heads=2),
                       lm=LMConfig(vocab_size=12, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2,
                                   num_kv_heads=1, head_dim=8))
N = CONFIG.vision.num_patches  # 4 image tokens


@pytest.fixture(scope="module")
def model():
    return vlm.init_vlm(CONFIG, jax.random.key(0))


def _images(b, seed=0):
    return jax.random.uniform(jax.random.key(seed), (b, 8, 8, 3))


def test_shapes_and_a_clear_error_for_a_wrong_image(model):
    tokens = jnp.array([[1, 2, 3], [4, 5, 6]])
    assert vlm.encode_images(model, model.vision_params, _images(2)).shape == (2, N, 16)
    x, mask = vlm.multimodal_inputs(model, model.vision_params, model.lm_params, _images(2), tokens,
                                    jnp.ones((2, 3), bool))
    assert x.shape == (2, N + 3, 16) and mask.shape == (2, N + 3) and bool(mask.all())
    with pytest.raises(ConfigError, match=r"images \(2, 8, 8, 1\): expected \(B, 8, 8, 3\)"):
        vlm.encode_images(model, model.vision_params, jnp.zeros((2, 8, 8, 1)))
    with pytest.raises(ValueError, match="vision.patch_size"):
        vlm.ViTConfig(image_size=8, patch_size=3)


def test_left_padded_prompts_get_the_image_right_before_their_first_token(model):
    tokens, mask = pad_prompts([[1, 2, 3], [4]], length=3)  # row 1: two pads on the left
    x, full = vlm.multimodal_inputs(model, model.vision_params, model.lm_params, _images(2), tokens, mask)
    np.testing.assert_array_equal(full[1], [False, False, True, True, True, True, True])
    image = vlm.encode_images(model, model.vision_params, _images(2))
    np.testing.assert_allclose(x[1, 2:2 + N], image[1], rtol=1e-6)
    np.testing.assert_allclose(x[0, :N], image[0], rtol=1e-6)  # no padding: unchanged order


def _batch(b=4, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 12, size=(b, 5))
    mask = np.ones((b, 5), bool)
    mask[0, 4:] = False  # a right-padded row
    loss_mask = np.zeros((b, 5), bool)
    loss_mask[:, 2:] = True  # the answer: tokens 2.. (the prompt is tokens 0, 1)
    return {"images": np.asarray(_images(b, seed)), "tokens": tokens, "mask": mask, "loss_mask": loss_mask}


def test_the_loss_is_the_mean_nll_of_the_answer_tokens_only_and_ignores_padding(model):
    batch = _batch()
    params, _ = vlm.trainable_params(model)
    loss, metrics = vlm.make_loss(model)(params, batch, jax.random.key(0))
    lp = vlm.answer_logprobs(model, model.vision_params, model.lm_params, batch)
    target = batch["loss_mask"] & batch["mask"]
    np.testing.assert_allclose(loss, -np.asarray(lp)[target].mean(), rtol=1e-6)
    assert int(metrics["tokens"]) == target.sum() == 11
    changed = dict(batch, tokens=batch["tokens"].copy())
    changed["tokens"][0, 4] = 7  # a padded position: no effect on any real position
    lp2 = vlm.answer_logprobs(model, model.vision_params, model.lm_params, changed)
    np.testing.assert_allclose(np.asarray(lp2)[batch["mask"]], np.asarray(lp)[batch["mask"]], rtol=1e-5)
    other_image = dict(batch, images=np.asarray(_images(4, seed=9)))  # the answer does depend on the image
    lp3 = vlm.answer_logprobs(model, model.vision_params, model.lm_params, other_image)
    assert np.abs(np.asarray(lp3) - np.asarray(lp)).max() > 1e-4


def test_greedy_generation_agrees_with_teacher_forcing_under_left_padding(model):
    prompts = [[3, 4, 5], [6]]
    tokens, mask = pad_prompts(prompts, length=3)
    out = vlm.generate(model, _images(2), tokens, mask, jax.random.key(1), SamplingConfig(max_new_tokens=3))
    for row, prompt in enumerate(prompts):  # the same row right-padded, teacher-forced on its own greedy output
        seq = np.array([prompt + list(np.asarray(out.tokens[row]))])
        batch = {"images": np.asarray(_images(2))[row:row + 1], "tokens": seq, "mask": np.ones_like(seq, bool)}
        lp = vlm.answer_logprobs(model, model.vision_params, model.lm_params, batch)
        np.testing.assert_allclose(lp[0, len(prompt):], out.logprobs[row], atol=1e-4)


def test_lora_starts_at_the_base_model_and_never_updates_the_frozen_lm(model):
    lora = lora_lib.LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "v_proj", "o_proj"))
    adapters = lora_lib.init_lora(CONFIG.lm, lora, jax.random.key(2))
    params, frozen = vlm.trainable_params(model, adapters)
    batch = _batch()
    full_loss, _ = vlm.make_loss(model)(vlm.trainable_params(model)[0], batch, jax.random.key(0))
    lora_loss, _ = vlm.make_loss(model, lora=lora)(params, batch, jax.random.key(0), frozen)
    np.testing.assert_allclose(lora_loss, full_loss, rtol=1e-6)  # B = 0 at init: the base model
    tx = optax.adam(1e-2)
    step = make_train_step(vlm.make_loss(model, lora=lora), tx, donate=False)
    state = init_train_state(params, tx, jax.random.key(3), frozen=frozen)
    for _ in range(3):
        state, metrics = step(state, jax.tree.map(jnp.asarray, batch))
    base = jax.tree.leaves(model.lm_params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.frozen["lm"]), base))
    assert float(metrics["loss"]) < float(lora_loss)


def _colour_task(n, seed):
    """The image's dominant colour channel (0, 1, 2) is the answer token (1, 2, 3) after the prompt token 9."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 3, n)
    images = 0.2 * rng.random((n, 8, 8, 3))
    images[np.arange(n), :, :, label] += 0.8
    tokens = np.stack([np.full(n, 9), label + 1], axis=1)
    return {"images": images.astype(np.float32), "tokens": tokens, "mask": np.ones((n, 2), bool),
            "loss_mask": np.array([[False, True]] * n)}, label


def test_a_short_full_fine_tune_learns_to_read_the_image(model):
    train, _ = _colour_task(64, 0)
    params, _ = vlm.trainable_params(model)
    tx = optax.adam(3e-3)
    step = make_train_step(vlm.make_loss(model), tx, donate=False)
    state = init_train_state(params, tx, jax.random.key(0))
    batch = jax.tree.map(jnp.asarray, train)
    for _ in range(60):
        state, metrics = step(state, batch)
    test, label = _colour_task(32, 1)
    trained = model._replace(vision_params=state.params["vision"], lm_params=state.params["lm"])
    tokens, mask = pad_prompts([[9]] * 32, length=1)
    out = vlm.generate(trained, jnp.asarray(test["images"]), tokens, mask, jax.random.key(0),
                       SamplingConfig(max_new_tokens=1))
    accuracy = float(np.mean(np.asarray(out.tokens[:, 0]) == label + 1))
    assert accuracy >= 0.9, f"held-out accuracy {accuracy:.2f} (chance 1/3); final loss {float(metrics['loss']):.3f}"


def test_a_sharded_step_on_8_devices_equals_one_device(model, devices):
    batch = jax.tree.map(jnp.asarray, _batch(b=8, seed=3))
    params, _ = vlm.trainable_params(model)
    tx = optax.sgd(0.1)
    step = make_train_step(vlm.make_loss(model), tx, donate=False)
    one, m1 = step(init_train_state(params, tx, jax.random.key(0)), batch)
    mesh = sharding.make_mesh(data=8, devices=devices)
    state = sharding.replicate(init_train_state(params, tx, jax.random.key(0)), mesh)
    eight, m8 = step(state, sharding.shard_batch(batch, mesh))
    assert m8["loss"].sharding.mesh.size == 8 or len(eight.params["vision"]["patch"]["kernel"].devices()) == 8
    np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(eight.params), jax.tree.leaves(one.params)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_the_conv_stem_keeps_the_token_grid_and_sees_only_its_neighbourhood():
    """The conv stem (three stride-2 3x3 layers and a 1x1 projection for 8-pixel patches) gives the same token
    grid as the patch stem; before attention token (i, j) sees pixels 8i..8i+14 x 8j..8j+14 (its patch and 7 more
    on its far sides), so a pixel of the corner patch moves token (0, 0) only."""
    vision = vlm.ViTConfig(image_size=32, patch_size=8, width=16, depth=1, heads=2, stem="conv")
    config = vlm.VLMConfig(vision=vision, lm=CONFIG.lm)
    tower = nnx.merge(*nnx.split(vlm.VisionTower(config, rngs=nnx.Rngs(0))))
    assert [conv.kernel.shape for conv in tower.stem] == [(3, 3, 3, 8), (3, 3, 8, 8), (3, 3, 8, 16)]
    assert tower(jnp.zeros((2, 32, 32, 3))).shape == (2, 16, 16)
    grid = tower.patch_grid  # (B, 4, 4, width): what the blocks receive

    base = jax.random.uniform(jax.random.key(1), (1, 32, 32, 3))
    changed = grid(base.at[0, 0, 0].set(1.0 - base[0, 0, 0])) - grid(base)  # a pixel in the corner patch
    moved = np.abs(np.asarray(changed[0])).max(-1) > 1e-6
    expected = np.zeros((4, 4), bool)
    expected[0, 0] = True
    np.testing.assert_array_equal(moved, expected)
    far = grid(base.at[0, 14, 14].set(1.0 - base[0, 14, 14])) - grid(base)  # patch 1, and the border of patch 0
    np.testing.assert_array_equal(np.abs(np.asarray(far[0])).max(-1) > 1e-6,
                                  np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], bool))
    with pytest.raises(ValueError, match="vision.patch_size"):
        vlm.ViTConfig(image_size=24, patch_size=6, stem="conv")
    with pytest.raises(ValueError, match="vision.stem"):
        vlm.ViTConfig(stem="resnet")
