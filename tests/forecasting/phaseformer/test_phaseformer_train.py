"""Training: the tiny preset end to end (2 epochs), a sharded step on 8 fake devices, schedules, config errors."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import assert_trees_close
from jax.sharding import NamedSharding, PartitionSpec

from core.config import ConfigError, apply_overrides
from forecasting import data as data_lib
from forecasting.phaseformer import EXPERIMENT, configs, losses, train
from forecasting.phaseformer import model as model_lib


def test_tiny_preset_trains_two_epochs_and_writes_outputs(tmp_path, module_compile_cache):
    config = EXPERIMENT.presets["tiny"]
    metrics = train.train_and_evaluate(config, tmp_path)
    assert metrics["epochs_run"] == 2
    assert metrics["test_windows"] == 2880 - 24 + 1  # every test window, no drop_last
    assert np.isfinite(metrics["mse"]) and 0 < metrics["mse"] < 3
    assert metrics["params"] == model_lib.count_params(train.build_model(config, jax.random.key(0)))
    # the last epoch's weights are scored beside the best-validation ones; equal when the best epoch is the last
    assert np.isfinite(metrics["mse_last"]) and np.isfinite(metrics["mae_last"])
    if metrics["best_epoch"] == metrics["epochs_run"]:
        assert metrics["mse_last"] == pytest.approx(metrics["mse"])
        assert metrics["mae_last"] == pytest.approx(metrics["mae"])
    else:
        assert metrics["mse_last"] != pytest.approx(metrics["mse"], rel=1e-7)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["mse"] == pytest.approx(metrics["mse"])
    assert (tmp_path / "forecast.png").stat().st_size > 0 and (tmp_path / "loss.png").stat().st_size > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    assert rows[1]["train_loss"] < rows[0]["train_loss"] * 1.5


def test_killed_run_resumes_at_its_last_epoch_and_ends_where_an_uninterrupted_one_ends(tmp_path, monkeypatch,
                                                                                        module_compile_cache):
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], epochs=3, patience=3, plot=False)
    whole = train.train_and_evaluate(config, tmp_path / "whole")
    assert (whole["epochs_run"], whole["resumed_at_epoch"]) == (3, 0)

    real_make_epoch_fn, calls = train.make_epoch_fn, []

    def dies_in_epoch_2(*args, **kwargs):
        epoch_fn = real_make_epoch_fn(*args, **kwargs)

        def epoch(*a):
            calls.append(1)
            if len(calls) == 2:  # epoch 1 has been checkpointed
                raise KeyboardInterrupt
            return epoch_fn(*a)
        return epoch

    monkeypatch.setattr(train, "make_epoch_fn", dies_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(config, tmp_path / "killed")
    monkeypatch.setattr(train, "make_epoch_fn", real_make_epoch_fn)
    resumed = train.train_and_evaluate(config, tmp_path / "killed")
    assert resumed["resumed_at_epoch"] == 1
    timing = ("train_seconds", "total_seconds", "resumed_at_epoch")
    assert {k: v for k, v in resumed.items() if k not in timing} == {k: v for k, v in whole.items() if k not in timing}
    rows = lambda d: [{k: v for k, v in json.loads(line).items() if k not in ("seconds", "test_seconds")}  # noqa: E731
                      for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert rows("killed") == rows("whole") and [r["epoch"] for r in rows("killed")] == [1, 2, 3]
    # a finished run folder restores the end state and only evaluates
    again = train.train_and_evaluate(config, tmp_path / "whole")
    assert (again["resumed_at_epoch"], again["mse"], again["mse_last"]) == (3, whole["mse"], whole["mse_last"])
    with pytest.raises(ValueError, match="another config"):
        train.train_and_evaluate(dataclasses.replace(config, lr=2e-3), tmp_path / "whole")


def _small_setup():
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], dropout=0.0, num_layers=1)
    model = train.build_model(config, jax.random.key(0))
    graphdef, params = nnx.split(model, nnx.Param)
    tx = train.make_optimizer(config)
    return config, graphdef, params, tx


def test_sharded_step_equals_single_device(devices):
    config, graphdef, params, tx = _small_setup()
    step = train.make_train_step(config, graphdef, tx)
    x = jax.random.normal(jax.random.key(1), (16, config.seq_len, 7))
    y = jax.random.normal(jax.random.key(2), (16, config.pred_len, 7))
    mask = jnp.ones(16).at[-3:].set(0.0)
    opt_state = tx.init(params)
    single = jax.jit(step)(params, opt_state, x, y, mask, jax.random.key(3))
    mesh = jax.make_mesh((8,), ("data",), devices=devices)
    shard = NamedSharding(mesh, PartitionSpec("data"))
    repl = NamedSharding(mesh, PartitionSpec())
    xs, ys, ms = jax.device_put(x, shard), jax.device_put(y, shard), jax.device_put(mask, shard)
    ps, os_ = jax.device_put(params, repl), jax.device_put(opt_state, repl)
    sharded = jax.jit(step, out_shardings=repl)(ps, os_, xs, ys, ms, jax.random.key(3))
    assert_trees_close(jax.device_get(sharded[0]), jax.device_get(single[0]), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(sharded[2], single[2], rtol=1e-5)


def test_data_parallel_training_equals_one_device(devices, module_compile_cache):
    """The real training function on 8 fake devices (each batch split over them, the fused kernel per device under
    shard_map) against one device: same losses, same test metrics, parameters replicated."""
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], plot=False)
    one = train.train(dataclasses.replace(config, data_parallel=False), show_progress=False)
    assert train.make_data_mesh(dataclasses.replace(config, data_parallel=False)) is None
    assert train.make_data_mesh(config).shape["data"] == len(devices) == 8
    for use_kernel in (False, True):
        # an evaluation batch of 250 is rounded up to 256 (a multiple of 8), the padding masked
        split = train.train(dataclasses.replace(config, use_kernel=use_kernel, eval_batch_size=250),
                            show_progress=False)
        np.testing.assert_allclose([h["train_loss"] for h in split.history],
                                   [h["train_loss"] for h in one.history], rtol=2e-6)
        for k in ("mse", "mae", "val_loss"):
            np.testing.assert_allclose(split.metrics[k], one.metrics[k], rtol=2e-5)
        assert_trees_close(jax.device_get(split.params), jax.device_get(one.params), atol=2e-5, rtol=2e-5)
        for leaf in jax.tree.leaves(split.params):
            assert len(leaf.sharding.device_set) == 8 and leaf.sharding.is_fully_replicated
    with pytest.raises(ValueError, match=r"batch_size=12: data parallelism over 8 devices needs a multiple of 8"):
        train.make_data_mesh(dataclasses.replace(config, batch_size=12))


def test_masked_batch_equals_unpadded_batch():
    config, graphdef, params, _ = _small_setup()
    loss_fn = train.make_loss_fn(config, graphdef)
    x = jax.random.normal(jax.random.key(1), (5, config.seq_len, 2))
    y = jax.random.normal(jax.random.key(2), (5, config.pred_len, 2))
    padded = loss_fn(params, x, y, jnp.array([1.0, 1, 1, 0, 0]), None)[0]
    plain = loss_fn(params, x[:3], y[:3], jnp.ones(3), None)[0]
    np.testing.assert_allclose(padded, plain, rtol=1e-6)


def test_eval_counts_every_window():
    config, graphdef, params, _ = _small_setup()
    series = jax.random.normal(jax.random.key(0), (config.seq_len + config.pred_len + 9, 3))  # 10 windows
    evaluate = train.make_eval_fn(dataclasses.replace(config, eval_batch_size=4), graphdef, 10)
    out = evaluate(params, series)
    x, y = data_lib.windows(series, jnp.arange(10), config.seq_len, config.pred_len)
    pred = train.make_apply(graphdef)(params, x)
    np.testing.assert_allclose(out["mse"], jnp.mean((pred - y) ** 2), rtol=1e-5)
    np.testing.assert_allclose(out["loss"], jnp.mean(losses.huber(pred, y)), rtol=1e-5)


def test_huber_matches_definition():
    err = jnp.array([-3.0, -1.0, -0.5, 0.0, 0.2, 1.0, 2.5])
    expected = [2.5, 0.5, 0.125, 0.0, 0.02, 0.5, 2.0]
    np.testing.assert_allclose(losses.huber(err, 0.0, 1.0), expected, rtol=1e-6)


def test_learning_rate_schedules():
    base = configs.sparsetsf("ETTh1", 96)
    assert [train.lr_for_epoch(base, e) for e in range(6)] == pytest.approx(
        [0.02, 0.02, 0.02, 0.02, 0.016, 0.0128])
    dl = configs.dlinear("ETTh1", 96)
    assert [train.lr_for_epoch(dl, e) for e in range(4)] == pytest.approx([5e-3, 5e-3, 2.5e-3, 1.25e-3])
    assert train.lr_for_epoch(configs.phaseformer("ETTh1", 96), 20) == 1e-3


def test_config_errors_and_overrides():
    config = EXPERIMENT.presets["etth1_96"]
    assert apply_overrides(config, ["use_kernel=true"]).use_kernel is True
    with pytest.raises(ConfigError, match="latent_dim=6: expected a multiple of num_heads=4"):
        apply_overrides(config, ["num_heads=4", "latent_dim=6"])
    with pytest.raises(ConfigError, match="dropout=1.5"):
        apply_overrides(config, ["dropout=1.5"])
    with pytest.raises(ConfigError, match=r"kernel_block=-8: expected >= 0 \(0 = automatic\)"):
        apply_overrides(config, ["kernel_block=-8"])
    with pytest.raises(ConfigError, match="weights"):
        apply_overrides(config, ["weights=middle"])
    with pytest.raises(ValueError, match="setting ETTh3-96"):
        configs.phaseformer("ETTh3", 96)


def test_presets_cover_every_setting_and_ambiguities():
    presets = EXPERIMENT.presets
    for d in configs.DATASETS:
        for h in configs.HORIZONS:
            for prefix in ("", "sparsetsf_", "dlinear_"):
                assert f"{prefix}{d.lower()}_{h}" in presets
    assert presets["etth1_720"].lr == 1e-4 and presets["etth1_336"].lr == 1e-3
    # the released scripts: one head, batch 16 and a training loader with drop_last on every dataset
    for name in ("etth1_96", "etth2_720", "ettm1_96", "ettm2_336"):
        assert (presets[name].num_heads, presets[name].batch_size, presets[name].train_drop_last) == (1, 16, True)
    assert presets["ettm1_96"].batch_size == 16 and presets["ettm1_96"].num_layers == 2
    assert presets["ettm1_336_variant"].num_layers == 2 and presets["ettm1_96_variant"].num_layers == 1
    assert presets["etth1_96"].weights == "best"
