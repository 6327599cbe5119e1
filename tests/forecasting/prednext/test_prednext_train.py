"""The training step and the experiment: loss composition per variant, one program for all variants, a sharded
step on 8 fake devices equal to the single-device one, a smoke run of the real `run` on the tiny preset."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close

from core import sharding
from core.config import BadInputError, ConfigError, apply_overrides
from forecasting.prednext import EXPERIMENT, configs, train

CFG = configs.tiny()


@pytest.fixture(scope="module")
def setup():
    graphdef, init_fn, tx, step, _, _ = train.programs(train._shape_key(CFG))
    rng = np.random.default_rng(0)
    c = CFG.data
    batch = {"clip": rng.integers(0, 255, (8, c.clip_len + 2 * c.jitter, c.canvas, c.canvas), dtype=np.uint8),
             "future": rng.integers(0, 255, (8, c.clip_len, c.canvas, c.canvas), dtype=np.uint8)}
    return graphdef, init_fn, tx, step, batch


def switches(variant):
    return jnp.asarray([configs.VARIANTS[variant][k] for k in train.SWITCHES], jnp.float32)


def test_loss_is_the_documented_mix_and_all_variants_share_one_program(setup):
    _, init_fn, _, step, batch = setup
    a, b = CFG.loss.alpha, CFG.loss.beta
    for variant, expected in (
        ("base", lambda m: m["ssl"]),
        ("prednext", lambda m: (1 - a) * m["ssl"] + a * (m["step_pred"] + m["clip_pred"])),
        ("forced", lambda m: m["ssl"] + b * m["forced"]),
        ("clip_only", lambda m: (1 - a) * m["ssl"] + a * m["clip_pred"]),
        ("same_view", lambda m: (1 - a) * m["ssl"] + a * (m["step_pred"] + m["clip_pred"])),
    ):
        state = init_fn(jax.random.key(0))
        before = jax.tree.map(np.asarray, state.stats)
        state, m = step(state, batch, switches(variant))
        m = jax.device_get(m)
        np.testing.assert_allclose(float(m["loss"]), float(expected(m)), rtol=1e-5, err_msg=variant)
        assert int(state.step) == 1 and np.isfinite(float(m["grad_norm"]))
        moved = jax.tree.map(lambda x, y: not np.allclose(x, np.asarray(y)), before, state.stats)
        assert any(jax.tree.leaves(moved)), "BN running statistics must be returned by the step"
    assert step._cache_size() == 1  # the variant is data, not a new program


def test_sharded_step_equals_single_device_step(setup):
    _, init_fn, _, step, batch = setup
    mesh = sharding.make_mesh()
    assert mesh.shape["data"] == 8
    s1, m1 = step(init_fn(jax.random.key(0)), batch, switches("prednext"))
    state = sharding.replicate(init_fn(jax.random.key(0)), mesh)
    s8, m8 = step(state, sharding.shard_batch(batch, mesh), switches("prednext"))
    assert s8.params["projector"]["fc1"]["kernel"][...].sharding.is_fully_replicated
    assert_trees_close(jax.device_get(s8.params), jax.device_get(s1.params), atol=1e-5, rtol=1e-5)
    assert_trees_close(jax.device_get(s8.stats), jax.device_get(s1.stats), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)


@pytest.mark.slow  # its own compiled program (~25 s)
def test_byol_keeps_an_ema_target():
    cfg = dataclasses.replace(CFG, loss=dataclasses.replace(CFG.loss, base="byol", byol_momentum=0.9))
    graphdef, init_fn, tx, step, _, _ = train.programs(train._shape_key(cfg))
    rng = np.random.default_rng(1)
    c = cfg.data
    batch = {"clip": rng.integers(0, 255, (8, c.clip_len + 2, c.canvas, c.canvas), dtype=np.uint8),
             "future": rng.integers(0, 255, (8, c.clip_len, c.canvas, c.canvas), dtype=np.uint8)}
    state = init_fn(jax.random.key(0))
    target0 = jax.tree.map(np.asarray, state.target[0])
    new, _ = step(state, batch, switches("base"))
    expected = jax.tree.map(lambda t, p: 0.9 * t + 0.1 * np.asarray(p), target0, new.params)
    assert_trees_close(jax.device_get(new.target[0]), expected, atol=1e-6, rtol=1e-5)


def test_moco_step_updates_the_momentum_encoder_and_the_queue():
    cfg = dataclasses.replace(CFG, loss=dataclasses.replace(CFG.loss, base="moco", moco_momentum=0.9, moco_queue=40))
    _, init_fn, _, step, _, _ = train.programs(train._shape_key(cfg))
    rng = np.random.default_rng(1)
    c = cfg.data
    batch = {"clip": rng.integers(0, 255, (8, c.clip_len + 2, c.canvas, c.canvas), dtype=np.uint8),
             "future": rng.integers(0, 255, (8, c.clip_len, c.canvas, c.canvas), dtype=np.uint8)}
    state = init_fn(jax.random.key(0))
    target0 = jax.tree.map(np.asarray, state.target[0])
    queue0 = np.asarray(state.queue[0])
    assert queue0.shape == (40, cfg.model.proj_dim) and int(state.queue[1]) == 0
    np.testing.assert_allclose(np.linalg.norm(queue0, axis=1), 1.0, rtol=1e-5)
    for variant in ("base", "prednext"):
        new, m = step(jax.tree.map(jnp.array, state), batch, switches(variant))
        assert np.isfinite(float(m["ssl"])) and float(m["ssl"]) > 0
        expected = jax.tree.map(lambda t, p: 0.9 * t + 0.1 * np.asarray(p), target0, new.params)
        assert_trees_close(jax.device_get(new.target[0]), expected, atol=1e-6, rtol=1e-5)
        q, ptr = np.asarray(new.queue[0]), int(new.queue[1])
        assert ptr == 16  # both views' 8 keys enqueued
        np.testing.assert_array_equal(q[16:], queue0[16:])
        np.testing.assert_allclose(np.linalg.norm(q[:16], axis=1), 1.0, rtol=1e-5)
        assert not np.allclose(q[:16], queue0[:16])
    # the keys are the momentum encoder's clip features of the views, not the online network's: with momentum 0
    # they would be the online ones; here the first step's target equals the initial weights, so the enqueued
    # keys are a function of the initial weights only (the same for both variants)
    new_b, _ = step(jax.tree.map(jnp.array, state), batch, switches("base"))
    new_p, _ = step(jax.tree.map(jnp.array, state), batch, switches("prednext"))
    np.testing.assert_allclose(np.asarray(new_b.queue[0]), np.asarray(new_p.queue[0]), atol=1e-6)
    assert step._cache_size() == 1


def test_finetuning_trains_backbone_and_head_on_the_labels(setup):
    _, init_fn, _, _, batch = setup
    cfg = dataclasses.replace(CFG, train=dataclasses.replace(CFG.train, finetune_steps=20, finetune_lr=3e-3))
    init, step = train.finetune_programs(train.eval_key(cfg), 4)
    state = init_fn(jax.random.key(0))
    backbone0 = jax.tree.map(np.asarray, state.params["backbone"])
    y = jnp.asarray([0, 1, 2, 3, 0, 1, 2, 3])
    width = cfg.model.channels[-1]

    def run(sd):  # the same batch and augmentation every step: the training loss must fall
        ft, losses = init(state.params, state.stats), []
        for _ in range(20):
            ft, loss = step(ft, batch["clip"], y, jax.random.key(1), jnp.zeros(width), jnp.full(width, sd))
            losses.append(float(loss))
        return ft, losses

    raw = run(1.0)[1]  # the head on raw spike rates (~0.04), as the benchmark's run had it
    ft, losses = run(0.05)  # standardised to the spike-rate scale
    assert losses[0] == pytest.approx(np.log(4), rel=1e-5)  # zero-initialised head: uniform prediction
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.9 * losses[0], losses
    assert losses[0] - losses[-1] > 5 * (raw[0] - raw[-1]), (losses, raw)
    moved = jax.tree.map(lambda a, b: not np.allclose(a, np.asarray(b)), backbone0, ft[0][0]["backbone"])
    assert any(jax.tree.leaves(moved)), "fine-tuning must update the backbone, not only the head"


def test_run_tiny_writes_metrics_and_plots(tmp_path):
    metrics = EXPERIMENT.run(EXPERIMENT.config("tiny"), tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    for v in CFG.variants:
        for k in ("probe_motion", "probe_digit", "inconsistency_z", "inconsistency_f", "z_std", "finetune_task",
                  "retrieval_r1", "retrieval_r5"):
            assert np.isfinite(saved[f"{v}/{k}"]) and f"{v}/{k}" in metrics
        assert 0.0 <= saved[f"{v}/probe_motion"] <= 1.0
    assert {p.name for p in tmp_path.glob("*.png")} >= {"train_loss.png", "probe_motion.png"}
    result = json.loads((tmp_path / "results.json").read_text())
    assert len(result["runs"]) == len(CFG.variants) * CFG.train.seeds
    assert result["history"][-1]["step"] == CFG.train.steps


def test_interrupted_run_resumes_from_its_checkpoint_to_the_uninterrupted_result(tmp_path, monkeypatch):
    from forecasting.prednext.data import ClipSampler, make_datasets

    cfg = dataclasses.replace(CFG, train=dataclasses.replace(CFG.train, steps=4, log_every=1))
    data = make_datasets(cfg.data)
    whole, history, _ = train.train_run(cfg, "prednext", 0, data, workdir=tmp_path / "whole", progress_bar=False)
    assert [h["step"] for h in history] == [1, 2, 3, 4]

    real_next = ClipSampler.__next__
    calls = {"n": 0}

    def dies_at_third_batch(self):  # a crash after two steps (both checkpointed), before the third
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_next(self)

    monkeypatch.setattr(ClipSampler, "__next__", dies_at_third_batch)
    with pytest.raises(KeyboardInterrupt):
        train.train_run(cfg, "prednext", 0, data, workdir=tmp_path / "killed", progress_bar=False)
    monkeypatch.setattr(ClipSampler, "__next__", real_next)
    resumed, history, times = train.train_run(cfg, "prednext", 0, data, workdir=tmp_path / "killed",
                                              progress_bar=False)
    assert len(times) == 2 and [h["step"] for h in history] == [1, 2, 3, 4]  # only steps 3 and 4 ran again
    assert int(resumed.step) == 4
    assert_trees_close(jax.device_get(resumed.params), jax.device_get(whole.params), exact=True)
    assert_trees_close(jax.device_get(resumed.stats), jax.device_get(whole.stats), exact=True)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="variants"):
        dataclasses.replace(CFG, variants=("base", "magic"))
    with pytest.raises(ConfigError, match="loss.step_offset"):
        apply_overrides(CFG, ["loss.step_offset=4"])
    with pytest.raises(ConfigError, match="loss.base"):
        apply_overrides(CFG, ["loss.base=swav"])
    with pytest.raises(ConfigError, match="loss.moco_queue"):
        dataclasses.replace(CFG, loss=dataclasses.replace(CFG.loss, base="moco", moco_queue=8))
    with pytest.raises(ConfigError, match="data_root"):
        dataclasses.replace(CFG, source="ucf101")
    assert apply_overrides(CFG, ["loss.alpha=0.25"]).loss.alpha == 0.25
    # moving digits only: a frame-folder config handed to train_and_evaluate is one clear line, not a NameError
    frames = dataclasses.replace(CFG, source="ucf101", data_root="/data/frames", split_dir="/data/splits",
                                 model=dataclasses.replace(CFG.model, in_channels=3))
    with pytest.raises(BadInputError, match="source='ucf101': train_and_evaluate runs moving digits"):
        train.train_and_evaluate(frames, "/nonexistent")


@pytest.mark.slow  # its own compiled programs (3-channel frames, ~40 s); the loader itself is tested in _data
def test_frame_folder_pretraining_on_a_fake_ucf101(tmp_path):
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("prednext_data_tests",
                                                  pathlib.Path(__file__).with_name("test_prednext_data.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    write_fake_ucf = module.write_fake_ucf
    frames, splits = write_fake_ucf(tmp_path)
    cfg = dataclasses.replace(
        CFG, source="ucf101", data_root=str(frames), split_dir=str(splits), frame_stride=2,
        data=dataclasses.replace(CFG.data, length=12), model=dataclasses.replace(CFG.model, in_channels=3),
        train=dataclasses.replace(CFG.train, batch_size=4, steps=2, log_every=1, eval_clips=2),
        variants=("prednext",))
    metrics = EXPERIMENT.run(cfg, tmp_path / "run")
    assert 0.0 <= metrics["prednext/probe_action"] <= 1.0 and np.isfinite(metrics["prednext/inconsistency_z"])
    assert (tmp_path / "run" / "prednext" / "metrics.jsonl").exists()
    assert (tmp_path / "run" / "prednext" / "checkpoints").is_dir()
