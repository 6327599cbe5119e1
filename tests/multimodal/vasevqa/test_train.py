"""A smoke run of the real pipeline (base, LoRA SFT with the ViT frozen, GRPO) on the tiny preset, the GRPO loss
on a hand case, and the LoRA SFT step sharded over 8 fake devices against one device."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import sharding
from core.config import ConfigError
from core.lm import lora as lora_lib
from core.train import init_train_state, make_train_step
from multimodal import vlm
from multimodal.vasevqa import EXPERIMENT, Config, train
from multimodal.vasevqa import model as model_lib


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vasevqa")
    config = dataclasses.replace(EXPERIMENT.config("tiny"), pretrain_steps=3, sft_steps=3, grpo_steps=2)
    metrics, runner = train.run_experiment(config, workdir)
    return config, workdir, metrics, runner


def test_sft_trains_lora_only_and_grpo_moves_the_lm(tiny_run):
    config, _, _, runner = tiny_run
    # the ViT is never trainable after the base stage: SFT trains the adapters, GRPO the LM
    assert runner.trainable == {"sft": ["lora"], "grpo": ["lm"]}
    lcfg = runner.lcfg
    assert lcfg.rank == 8 and lcfg.alpha == 32 and set(lcfg.targets) == set(lora_lib.TARGETS)
    b_norm = sum(float(jnp.abs(w.b).sum()) for ws in runner.adapters.values() for w in ws.values())
    assert b_norm > 0  # B starts at zero: SFT moved it
    diff = sum(float(jnp.abs(a - b).sum()) for a, b in zip(jax.tree.leaves(runner.grpo_lm),
                                                           jax.tree.leaves(runner.sft_lm)))
    assert diff > 0
    assert np.isfinite([r["loss"] for r in runner.history["sft"]]).all()
    grpo = runner.history["grpo"]
    assert grpo and all(np.isfinite([r["reward"], r["loss"], r["kl"]]).all() for r in grpo)


def test_the_experiment_writes_metrics_and_released_caption_files(tiny_run):
    config, workdir, m, _ = tiny_run
    for arm in train.ARMS:
        assert 0.0 <= m[f"{arm}/r_at_1"] <= 1.0 and m[f"{arm}/hits_at_10"] <= config.n_test
        assert m[f"{arm}/semantic_similarity"] == m[f"{arm}/clip_score"]
        rows = json.loads((workdir / f"captions_{arm}.json").read_text())
        assert len(rows) == config.n_test and set(rows[0]) == {"images", "caption", "data_by"}
    for name in ("metrics.json", "views.png", "loss.png", "metrics.png", "grpo_reward.png"):
        assert (workdir / name).exists()


def _tiny_model():
    config = EXPERIMENT.config("tiny")
    return config, vlm.init_vlm(model_lib.vlm_config(config, 40), jax.random.key(0))


def _batch(config, n=8, length=12, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(4, 40, (n, length)).astype(np.int32)
    mask = np.ones((n, length), bool)
    mask[:, -3:] = rng.random((n, 3)) < 0.5
    loss_mask = np.zeros((n, length), bool)
    loss_mask[:, 4:] = True
    images = rng.random((n, config.image_size, config.image_size, 18)).astype(np.float32)
    return {"images": images, "tokens": tokens, "mask": mask, "loss_mask": loss_mask,
            "advantages": rng.normal(size=n).astype(np.float32)}


def test_sharded_sft_step_on_8_devices_equals_one_device(devices):
    config, model = _tiny_model()
    lcfg = model_lib.lora_config(config)
    adapters = lora_lib.init_lora(model.config.lm, lcfg, jax.random.key(1))
    adapters = jax.tree.map(lambda x: x + 0.01, adapters)  # nonzero B so the LoRA branch is live
    batch = jax.tree.map(jnp.asarray, _batch(config))
    mesh = sharding.make_mesh(data=8, devices=devices)
    tx = optax.sgd(0.1)
    cases = [(model_lib.make_sft_loss(model, lcfg), {"lora": adapters},
              {"vision": model.vision_params, "lm": model.lm_params})]
    for loss_fn, params, frozen in cases:
        step = make_train_step(loss_fn, tx, donate=False)
        one, m1 = step(init_train_state(params, tx, jax.random.key(0), frozen=frozen), batch)
        state = sharding.replicate(init_train_state(params, tx, jax.random.key(0), frozen=frozen), mesh)
        eight, m8 = step(state, sharding.shard_batch(batch, mesh))
        assert len(jax.tree.leaves(eight.params)[0].sharding.device_set) == 8
        np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=1e-5, atol=1e-7)
        for a, b in zip(jax.tree.leaves(eight.params), jax.tree.leaves(one.params)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_bad_config_values_raise_one_line():
    with pytest.raises(ConfigError, match="num_generations"):
        Config(num_generations=1)
    with pytest.raises(ConfigError, match="patch_size"):
        Config(image_size=30)
    with pytest.raises(ConfigError, match="corpus_fraction"):
        Config(corpus_fraction=1.0)


def test_grpo_step_raises_the_better_completion_and_masks_the_prompt():
    from core.rl.advantages import group_advantages
    from core.rl.losses import LossConfig

    config, model = _tiny_model()
    prompt = np.array([[1, 5, 6]], np.int32)
    completions = np.array([[7, 8, 2, 0], [9, 2, 0, 0]], np.int32)
    cmask = completions > 0
    adv = np.asarray(group_advantages(np.array([1.0, 0.0]), np.array([0, 0]), num_groups=1))
    assert adv[0] > 0 > adv[1]
    images = np.random.default_rng(0).random((2, config.image_size, config.image_size, 18)).astype(np.float32)
    batch = model_lib.rollout_batch(prompt, completions, cmask, images, adv)
    np.testing.assert_array_equal(batch["tokens"][1], [1, 5, 6, 9, 2, 0, 0])
    np.testing.assert_array_equal(batch["loss_mask"][1], [0, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch["mask"][0], [1, 1, 1, 1, 1, 1, 0])
    batch = jax.tree.map(jnp.asarray, batch)
    loss_fn = model_lib.make_grpo_loss(model, LossConfig(kl_coef=0.001, aggregation="seq-mean-token-mean"))
    tx = optax.sgd(0.5)
    step = make_train_step(loss_fn, tx, donate=False)
    frozen = {"vision": model.vision_params, "ref": model.lm_params}
    state, m = step(init_train_state({"lm": model.lm_params}, tx, jax.random.key(0), frozen=frozen), batch)
    assert float(m["kl"]) == pytest.approx(0.0, abs=1e-6)  # policy == reference before the update

    def seq_logp(lm):
        lp = vlm.answer_logprobs(model, model.vision_params, lm, batch)
        return np.asarray(jnp.where(batch["loss_mask"], lp, 0).sum(1))

    before, after = seq_logp(model.lm_params), seq_logp(state.params["lm"])
    assert after[0] > before[0] and after[1] < before[1]
