"""Weather / Electricity / Traffic presets (released scripts' configurations, analytic parameter counts, a user's CSV
of the right width runs, a wrong one is refused), the batch-256 ETTh presets, and the per-epoch test metrics
(logged like the released scripts, never used for selection)."""

import dataclasses
import json
import math

import jax
import numpy as np
import pytest
from flax import nnx

from core.config import BadInputError, apply_overrides
from core.data import MissingInputError
from forecasting import data as data_lib
from forecasting.phaseformer import EXPERIMENT, configs, losses, train

# (D, layers, routers, heads, lr) read off run_weather.py / run_electricity.py / run_traffic.py (neumyor/PhaseFormer)
SCRIPTS = {
    "weather_96": (8, 3, 8, 1, 1e-3), "weather_192": (8, 2, 8, 1, 1e-3), "weather_336": (8, 2, 8, 1, 1e-3),
    "weather_720": (8, 2, 8, 1, 1e-3),
    "electricity_96": (8, 2, 8, 1, 2e-3), "electricity_192": (128, 1, 4, 4, 1e-3),
    "electricity_336": (8, 2, 8, 1, 1e-3), "electricity_720": (128, 1, 4, 4, 1e-3),
    "traffic_96": (32, 2, 1, 8, 1e-3), "traffic_192": (128, 1, 4, 4, 1e-3), "traffic_336": (128, 1, 4, 4, 1e-3),
    "traffic_720": (128, 1, 4, 4, 1e-3),
}


def _analytic_params(d, layers, routers, horizon, k=30, p=24):
    """PhaseFormer's parameter count written out: embedding K->D + LN; per routing layer positional embedding,
    routers, two 4-projection MHAs, two LNs, the D-4D-D MLP; re-projections between layers; the predictor."""
    q = -(-horizon // 24)
    routing = p * d + routers * d + 2 * 4 * (d * d + d) + 2 * 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    between = (layers - 1) * ((d * k + k) + (k * d + d) + 2 * d)  # W_out of layer i, W_in + LN of layer i + 1
    return (k * d + d) + 2 * d + layers * routing + between + (d * q + q)


def _abstract_count(config):
    params = nnx.state(nnx.eval_shape(lambda: train.build_model(config, jax.random.key(0))), nnx.Param)
    return sum(math.prod(p.shape) for p in jax.tree.leaves(params))


def test_analytic_formula_reproduces_the_ett_counts():
    assert _analytic_params(4, 3, 8, 96) == 2072 and _analytic_params(8, 1, 8, 96) == 1716
    assert _analytic_params(8, 2, 8, 96) == 3666 and _analytic_params(4, 1, 4, 720) == 718


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_large_presets_equal_the_released_scripts(name):
    preset = EXPERIMENT.presets[name]
    d, layers, routers, heads, lr = SCRIPTS[name]
    dataset = name.split("_")[0]
    file_name, channels = {"weather": ("weather.csv", 21), "electricity": ("electricity.csv", 321),
                           "traffic": ("traffic.csv", 862)}[dataset]
    assert (preset.latent_dim, preset.num_layers, preset.num_routers, preset.num_heads, preset.lr) == \
        (d, layers, routers, heads, lr)
    assert (preset.dataset, preset.num_channels, preset.split, preset.seq_len) == (file_name, channels, "ratio", 720)
    assert (preset.batch_size, preset.train_drop_last, preset.loss, preset.huber_delta) == (16, True, "huber", 1.0)
    assert (preset.lr_schedule, preset.epochs, preset.patience, preset.period) == ("constant", 30, 8, 24)
    assert _abstract_count(preset) == _analytic_params(d, layers, routers, preset.pred_len)


def test_large_preset_table_gives_paper_numbers_and_commands():
    rows = {r["preset"]: r for r in configs.LARGE_PRESETS}
    assert sorted(rows) == sorted(SCRIPTS)
    assert (rows["traffic_96"]["paper_mse"], rows["traffic_96"]["paper_mae"]) == (0.361, 0.238)
    assert (rows["electricity_720"]["paper_mse"], rows["weather_192"]["paper_mae"]) == (0.201, 0.237)
    assert rows["weather_96"]["command"] == \
        "iclr26 run phaseformer --preset weather_96 --set dataset=/path/to/weather.csv"
    # the D = 128 configurations are the ~273k-parameter ones of the method notes
    assert _abstract_count(EXPERIMENT.presets["electricity_192"]) == 273160


def test_batch_256_presets_differ_from_the_first_release_only_in_batch():
    presets = EXPERIMENT.presets
    for dataset in ("etth1", "etth2"):
        for h in configs.HORIZONS:
            b16, b256 = presets[f"{dataset}_{h}"], presets[f"{dataset}_{h}_b256"]
            assert (b16.batch_size, b256.batch_size) == (16, 256)
            assert dataclasses.replace(b256, batch_size=16) == b16
    assert presets["etth1_720_b256"].lr == 1e-4 and presets["etth1_720_b256"].latent_dim == 8
    with pytest.raises(BadInputError, match="ETTh1 / ETTh2 only"):
        configs.phaseformer_b256("ETTm1", 96)


def _write_csv(path, rows, channels, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(rows)[:, None]
    values = np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6, channels)) + 0.1 * rng.standard_normal((rows, channels))
    header = "date," + ",".join([f"v{i}" for i in range(channels - 1)] + ["OT"])
    lines = [header] + [f"2020-01-01 {i}," + ",".join(f"{v:.4f}" for v in row) for i, row in enumerate(values)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_user_csv_gets_the_tsl_70_10_20_split_by_rows(tmp_path):
    path = _write_csv(tmp_path / "weather.csv", 1001, 21)
    d = data_lib.load(path, 96, 24)
    n_train, n_test = int(1001 * 0.7), int(1001 * 0.2)  # 700, 200; val the remaining 101
    assert d.borders == ((0, 700), (700 - 96, 801), (1001 - 200 - 96, 1001))
    assert (n_train, n_test) == (700, 200) and d.num_channels == 21
    assert d.num_windows("test") == 200 - 24 + 1  # every test window


# weather_96 (21 variables), electricity_192 (321 variables, D = 128, 4 heads), traffic_96 (862 variables, 8 heads)
@pytest.mark.parametrize("name,channels", [("weather_96", 21), ("electricity_192", 321), ("traffic_96", 862)])
def test_large_preset_runs_on_a_generated_csv_of_its_width(tmp_path, name, channels):
    path = _write_csv(tmp_path / f"{name.split('_')[0]}.csv", 110, channels)
    config = apply_overrides(EXPERIMENT.presets[name],
                             [f"dataset={path}", "seq_len=24", "pred_len=8", "epochs=1", "max_train_windows=16",
                              "eval_batch_size=8", "plot=false", "data_parallel=false"])
    if name == "weather_96":  # the CLI's entry point (checkpoints, metrics files) once; train() for the wide ones
        metrics = train.train_and_evaluate(config, tmp_path / "run")
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    else:
        result = train.train(config, show_progress=False)
        metrics, rows = result.metrics, result.history
        assert result.data.num_channels == channels
    # 110 rows: test = int(0.2 * 110) = 22 rows -> 22 - 8 + 1 windows
    assert metrics["test_windows"] == 15 and np.isfinite(metrics["mse"]) and metrics["epochs_run"] == 1
    assert np.isfinite(rows[0]["test_mse"]) and np.isfinite(rows[0]["test_mae_batch_mean"])


def test_large_preset_refuses_a_csv_of_the_wrong_width_and_names_a_missing_file(tmp_path):
    path = _write_csv(tmp_path / "weather.csv", 300, 7)
    config = apply_overrides(EXPERIMENT.presets["weather_96"], [f"dataset={path}", "seq_len=48", "pred_len=8"])
    with pytest.raises(BadInputError, match="7 variables; the weather-8 preset expects 21"):
        train.train(config, show_progress=False)
    config = apply_overrides(EXPERIMENT.presets["traffic_720"], [f"dataset={tmp_path / 'traffic.csv'}"])
    with pytest.raises(MissingInputError, match="--set dataset=/path/to/traffic.csv"):
        train.train(config, show_progress=False)


def test_mean_of_batch_means_by_hand():
    assert losses.mean_of_batch_means(np.array([1.0, 2, 3, 4, 5]), 2) == pytest.approx((1.5 + 3.5 + 5) / 3)
    assert losses.mean_of_batch_means(np.array([1.0, 2, 3, 4]), 2) == pytest.approx(2.5)


def test_epoch_test_is_logged_and_leaves_selection_unchanged(tmp_path, compile_cache):
    # the tiny model on a small generated file (73 test windows, batch 64: a partial last batch)
    path = _write_csv(tmp_path / "series.csv", 400, 3)
    base = dataclasses.replace(EXPERIMENT.presets["tiny"], dataset=str(path), seq_len=48, pred_len=8, epochs=3,
                               patience=3, plot=False, data_parallel=False)
    logged = train.train(dataclasses.replace(base, epoch_test=True), show_progress=False)
    plain = train.train(dataclasses.replace(base, epoch_test=False), show_progress=False)
    rows = logged.history
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert all("test_mse" not in r for r in plain.history)
    for r in rows:
        assert all(np.isfinite(r[k]) for k in ("test_mse", "test_mae", "test_mse_batch_mean", "test_mae_batch_mean"))
    # the test scores change from epoch to epoch (they are of each epoch's weights, not of one checkpoint)
    assert len({r["test_mse"] for r in rows}) == 3
    # the last row is the last epoch's weights: equal to the metrics' last-epoch score
    assert rows[-1]["test_mse"] == pytest.approx(logged.metrics["mse_last"], rel=1e-6)
    # selection, stopping and the chosen weights are those of the run without per-epoch testing
    for key in ("best_epoch", "epochs_run", "val_mse", "val_loss"):
        assert logged.metrics[key] == plain.metrics[key], key
    for key in ("mse", "mae", "mse_last"):  # the test set scored by a second compiled function (per-window outputs)
        assert logged.metrics[key] == pytest.approx(plain.metrics[key], rel=1e-6), key
    assert [r["val_loss"] for r in rows] == [r["val_loss"] for r in plain.history]
    jax.tree.map(np.testing.assert_array_equal, logged.params, plain.params)
    # the window-weighted and the released (per-batch mean) forms differ only through the last partial batch
    n = logged.data.num_windows("test")
    assert n % base.batch_size != 0
    assert rows[-1]["test_mse_batch_mean"] != rows[-1]["test_mse"]
    assert rows[-1]["test_mse_batch_mean"] == pytest.approx(rows[-1]["test_mse"], rel=0.05)
