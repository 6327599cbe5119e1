"""The simulated-oracle experiment: a smoke run of the real `train_and_evaluate` on the tiny preset, the same
runs sharded over 8 fake CPU devices, and config validation."""

import dataclasses
import json

import numpy as np
import pytest

from core.config import ConfigError, apply_overrides
from core.sharding import make_mesh
from optimization.lgbo import EXPERIMENT, configs, train
from optimization.lgbo.data import get_problem


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("lgbo_tiny")
    metrics = train.train_and_evaluate(configs.tiny(), workdir)
    return workdir, metrics


def test_tiny_smoke_run_writes_metrics_and_plots(tiny_run):
    workdir, metrics = tiny_run
    assert json.loads((workdir / "metrics.json").read_text()) == pytest.approx(metrics)
    assert ((workdir / "lgbo_lnp3.png").stat().st_size > 1000
            and (workdir / "lgbo_lnp3_regret.png").stat().st_size > 1000)
    assert set(metrics) == {f"lnp3/{a}/{k}" for a in ("none", "aligned")
                            for k in ("iters_to_target_mean", "final_regret_mean")}
    detail = json.loads((workdir / "lgbo_curves.json").read_text())["lnp3"]
    for arm in ("none", "aligned"):
        curve = np.asarray(detail[arm]["curve_mean"])
        assert curve.shape == (4,) and np.all(np.diff(curve) >= 0) and 0 < curve[-1] <= 1.0 + 1e-12
        assert 0 <= metrics[f"lnp3/{arm}/iters_to_target_mean"] <= 4
        assert metrics[f"lnp3/{arm}/final_regret_mean"] >= 0
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert [r["progress/lnp3/aligned"] for r in records] == pytest.approx(detail["aligned"]["curve_mean"])


def test_seeds_sharded_over_8_devices_equal_single_device(tiny_run, devices):
    workdir, _ = tiny_run
    config = configs.tiny()
    sharded = train.run_problem(get_problem("lnp3"), config, mesh=make_mesh())
    problem = get_problem("lnp3")
    progress = (sharded - problem.floor) / (problem.optimum - problem.floor)
    detail = json.loads((workdir / "lgbo_curves.json").read_text())["lnp3"]
    for i, arm in enumerate(config.arms):
        np.testing.assert_allclose(progress[i].mean(0), detail[arm]["curve_mean"], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="multiple of the mesh"):
        train.run_problem(problem, dataclasses.replace(config, seeds=3), mesh=make_mesh())


def test_config_validation_and_presets():
    assert set(EXPERIMENT.presets) == {"tiny", "demo", "paper"} and EXPERIMENT.paper == 7
    assert configs.paper().seeds == 20 and configs.paper().iterations == 30 and configs.paper().n_grid == 512
    with pytest.raises(ConfigError, match="confidence"):
        configs.Config(confidence=1.0)
    with pytest.raises(ConfigError, match="problems"):
        configs.Config(problems=("rosenbrock",))
    assert apply_overrides(configs.tiny(), ["seeds=4"]).seeds == 4
    with pytest.raises(ValueError, match="Olympus dataset|problem"):
        get_problem("concrete")


def test_a_rerun_restores_the_finished_problems_without_running_them(tiny_run, monkeypatch):
    workdir, metrics = tiny_run

    def not_again(*args, **kwargs):
        raise AssertionError("a finished problem was run again")

    monkeypatch.setattr(train, "run_problem", not_again)
    assert train.train_and_evaluate(configs.tiny(), workdir) == metrics
