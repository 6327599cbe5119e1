"""The real training function on the tiny preset, a sharded step on 8 fake devices, and config errors."""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core.config import ConfigError, apply_overrides
from core.sharding import make_mesh, replicate, shard_batch
from multimodal.decalign import EXPERIMENT, configs, train
from multimodal.decalign.data import load_mmsa

SAMPLE = pathlib.Path(__file__).with_name("decalign_sample_mmsa.pkl")


def _sample_config():
    cfg = configs.tiny()
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, source="pickle", path=str(SAMPLE)))


def test_tiny_run_writes_metrics_and_plots(tmp_path):
    cfg = _sample_config()
    metrics = EXPERIMENT.run(cfg, tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == pytest.approx(metrics)
    for v in cfg.variants:
        for k in ("mae", "corr", "acc2", "f1", "acc7"):
            assert f"{v}/{k}" in metrics
        assert np.isfinite(metrics[f"{v}/mae"]) and metrics[f"{v}/mae"] < 3.0
    assert (tmp_path / "val_loss.png").stat().st_size > 1000 and (tmp_path / "test_mae.png").stat().st_size > 1000
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["runs"]) == len(cfg.variants) * cfg.train.seeds
    terms = res["history"]["terms"][-1]
    for t in ("task", "dec", "hetero", "homo", "ct", "hetero_ot", "hetero_local", "homo_mmd"):
        assert np.all(np.isfinite(terms[t])), t


def test_interrupted_run_resumes_at_its_last_epoch_to_the_uninterrupted_result(tmp_path, monkeypatch):
    cfg = _sample_config()
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=3))
    data = load_mmsa(SAMPLE)
    whole = train.train_and_evaluate(cfg, tmp_path / "whole", data=data, progress=False)
    assert whole["speed"]["epochs_run"] == 3

    real_evaluate, calls = train.evaluate, {"n": 0}
    evals_per_epoch = 2 * len(cfg.variants) * cfg.train.seeds  # valid + test for every run

    def dies_in_epoch_2(*args, **kwargs):  # after epoch 1 was checkpointed
        calls["n"] += 1
        if calls["n"] > evals_per_epoch:
            raise KeyboardInterrupt
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(train, "evaluate", dies_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(cfg, tmp_path / "killed", data=data, progress=False)
    monkeypatch.setattr(train, "evaluate", real_evaluate)
    resumed = train.train_and_evaluate(cfg, tmp_path / "killed", data=data, progress=False)
    assert resumed["speed"]["epochs_run"] == 2  # epochs 2 and 3 only
    assert resumed["runs"] == whole["runs"]
    assert resumed["history"] == whole["history"]
    # metrics.jsonl: one record per epoch, the killed run's records not repeated, the same values as uninterrupted
    def records(folder):
        return [json.loads(line) for line in (tmp_path / folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records("killed")] == [1, 2, 3]
    assert records("killed") == records("whole")
    assert records("whole")[-1]["val_loss"] == pytest.approx(np.mean(whole["history"]["val_loss"][-1]))


def test_sharded_step_equals_single_device():
    cfg = _sample_config()
    data = load_mmsa(SAMPLE)
    dims = train.input_dims(data)
    graphdef, init = train.make_model(cfg, dims)
    # plain SGD: Adam's first step is lr * sign(g), which turns float-rounding noise in gradients that are ~0
    # (e.g. LayerNorm biases) into +-lr differences; SGD keeps the comparison about the step's computation.
    tx = optax.sgd(0.1)
    params = init(jax.random.key(0))
    state = train.TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), jax.random.key(1))
    batch = {k: jnp.asarray(data["train"][k][:16]) for k in ("text", "audio", "vision", "labels")}
    switches = jnp.ones(4)
    step = jax.jit(train.make_train_step(cfg, graphdef, tx), compiler_options=train.compiler_options(cfg))
    single, m1 = step(state, batch, switches)
    mesh = make_mesh(data=8)
    sharded, m8 = step(replicate(state, mesh), shard_batch(batch, mesh), replicate(switches, mesh))
    assert len(jax.tree.leaves(sharded.params)[0].sharding.device_set) == 8
    for k in m1:
        np.testing.assert_allclose(np.asarray(m8[k]), np.asarray(m1[k]), rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)


def test_presets_and_config_errors():
    assert {"tiny", "demo", "paper", "mosi"} <= set(EXPERIMENT.presets)
    assert EXPERIMENT.presets["paper"].loss.hetero == 0.05 and EXPERIMENT.presets["paper"].model.d_model == 64
    cfg = configs.tiny()
    assert apply_overrides(cfg, ["data.heterogeneity=0.2"]).data.heterogeneity == 0.2
    with pytest.raises(ConfigError, match=r"data.heterogeneity=2.0: expected a number in \[0, 1\]"):
        apply_overrides(cfg, ["data.heterogeneity=2"])
    with pytest.raises(ConfigError, match="variants"):
        apply_overrides(cfg, ["variants=baseline,nope"])
    with pytest.raises(ConfigError, match="model.num_heads"):
        apply_overrides(cfg, ["model.num_heads=3"])
    with pytest.raises(ConfigError, match="data.path"):
        apply_overrides(cfg, ["data.source=pickle"])
    with pytest.raises(ConfigError, match="model.num_outputs"):
        apply_overrides(cfg, ["loss.task=ce"])
