"""The DEDUCE trainer end to end on the tiny preset (digits): smoke run through `run`, resume mid-stream,
a run-sharded stream on 8 fake devices, hyper-parameters of the arms, and config errors."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from core.config import ConfigError, apply_overrides
from core.sharding import make_mesh
from optimization.deduce import PRESETS, make_runs, run, run_stream
from optimization.deduce.data import make_stream

TINY = PRESETS["tiny"]


@pytest.fixture(scope="module")
def uninterrupted():
    return run_stream(TINY, progress=False)


def _matrices(result):
    return np.array([r["acc_matrix_class"] for r in result["runs"]]), \
        np.array([r["acc_matrix_task"] for r in result["runs"]])


def test_tiny_stream_learns_and_logs_the_detector(uninterrupted):
    rows = uninterrupted["runs"]
    assert len(rows) == 8 and {r["arm"] for r in rows} == {"er", "derpp_deduce"}
    for r in rows:
        m = np.array(r["acc_matrix_class"])
        assert m.shape == (5, 5) and np.isfinite(m).all()
        assert np.diag(m).min() > 60           # each new 2-class task is learnt
        assert r["task_avg_acc"] > r["class_avg_acc"] > 20   # better than chance over 10 classes
        if r["arm"] == "er":
            assert r["lum_rate"] == 0 and r["gum_resets"] == 0
        else:
            assert 0 < r["lum_rate"] <= 1 and r["lum_rate"] <= r["conflict_rate"] + 1e-9
            assert r["gum_resets"] > 0


def test_run_writes_metrics_and_plots(tmp_path, uninterrupted):
    metrics = run(TINY, tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["dataset"] == "digits" and len(saved["table"]) == 2
    assert (tmp_path / "class_il_accuracy.png").stat().st_size > 0
    assert (tmp_path / "accuracy_over_tasks.png").stat().st_size > 0
    # the run folder the README promises: metrics.jsonl (a record per chunk and per task) and checkpoints by default
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    tasks = [r for r in records if "task_done" in r]
    assert [r["task_done"] for r in tasks] == list(range(saved["num_tasks"]))
    assert all(np.isfinite(r["loss"]) for r in records if "loss" in r)
    assert any((tmp_path / "checkpoints").iterdir())
    # the same config gives the same numbers as the uninterrupted fixture (determinism)
    ref = {(r["arm"], r["seed"]): r["class_avg_acc"] for r in uninterrupted["runs"]}
    for r in metrics["runs"]:
        assert r["class_avg_acc"] == pytest.approx(ref[(r["arm"], r["seed"])], abs=1e-9)


def test_resume_mid_stream_equals_uninterrupted(tmp_path, uninterrupted):
    cfg = dataclasses.replace(TINY, train=dataclasses.replace(TINY.train, checkpoint=True))
    stopped = run_stream(cfg, tmp_path, stop_after_chunks=3, progress=False)   # stops inside task 1
    assert stopped["stopped"] and stopped["data_state"]["task"] == 1 and stopped["data_state"]["pos"] == 15
    resumed = run_stream(cfg, tmp_path, progress=False)
    # metrics.jsonl after the resume: no record of the stopped run repeated, one record per chunk in order
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == sorted(set(steps)) and len(steps) == len(resumed["history"]) + 3
    for a, b in zip(_matrices(resumed), _matrices(uninterrupted)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    for x, y in zip(jax.tree.leaves(resumed["final_params"]), jax.tree.leaves(uninterrupted["final_params"])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_runs_sharded_over_8_devices_equal_single_device(devices):
    # into task 1 (3 chunks, so LUM and GUM act): the run axis over 8 devices gives the single-device states
    single = run_stream(TINY, stop_after_chunks=3, progress=False)
    sharded = run_stream(TINY, mesh=make_mesh(data=8), stop_after_chunks=3, progress=False)
    leaf = jax.tree.leaves(sharded["final_params"])[0]
    assert len(leaf.sharding.device_set) == 8
    for name in ("params", "buffer", "gum", "conflicts", "fired"):
        a, b = getattr(sharded["final_states"], name), getattr(single["final_states"], name)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    # task 0 (steps_per_task steps, chunks of 15 and the rest) + one 15-step chunk of task 1, 10 examples a step
    n_max = max(len(t.train_y) for t in make_stream(TINY.data).tasks)
    steps_per_task = -(-n_max // TINY.train.batch_size)
    expected = (steps_per_task + TINY.train.chunk_steps) * TINY.train.batch_size
    np.testing.assert_array_equal(np.asarray(sharded["final_states"].buffer.n_seen), expected)
    assert np.asarray(single["final_states"].fired).sum() > 0   # LUM acted in task 1


def test_arm_hyper_parameters():
    cfg = apply_overrides(PRESETS["demo"], ["seeds=1"])
    cfg = dataclasses.replace(cfg, arms=("er", "derpp", "ewc", "derpp_lum", "derpp_gum", "derpp_deduce_b"))
    runs, hp = make_runs(cfg, variants=[{"delta": 0.5}, {"epsilon": -0.3}])
    assert len(runs) == 12 and runs[1]["epsilon"] == -0.3
    by = {(r["arm"], r["variant"]): i for i, r in enumerate(runs)}
    er, derpp, ewc = by[("er", 0)], by[("derpp", 0)], by[("ewc", 0)]
    assert (hp["alpha"][er], hp["beta"][er]) == (0.0, 1.0)
    assert (hp["alpha"][derpp], hp["beta"][derpp]) == pytest.approx((0.3, 0.5))
    assert (hp["beta"][ewc], hp["ewc_lambda"][ewc]) == (0.0, 10.0)
    assert (hp["use_lum"][by[("derpp_lum", 0)]], hp["use_gum"][by[("derpp_lum", 0)]]) == (1.0, 0.0)
    assert (hp["use_lum"][by[("derpp_gum", 0)]], hp["use_gum"][by[("derpp_gum", 0)]]) == (0.0, 1.0)
    assert hp["detector_b"][by[("derpp_deduce_b", 0)]] == 1.0
    assert hp["delta"][by[("er", 0)]] == 0.5
    with pytest.raises(ValueError, match="variant keys"):
        make_runs(cfg, variants=[{"not_a_field": 1.0}])


def test_bad_configs_raise_naming_the_field():
    with pytest.raises(ConfigError, match="arms"):
        dataclasses.replace(TINY, arms=("sgd",))
    with pytest.raises(ConfigError, match="epsilon"):
        apply_overrides(TINY, ["deduce.epsilon=0.5"])
    with pytest.raises(ConfigError, match="dataset"):
        apply_overrides(TINY, ["data.dataset=imagenet"])
    with pytest.raises(ConfigError, match="lum_form"):
        apply_overrides(TINY, ["deduce.lum_form=both"])
    with pytest.raises(ValueError, match="num_tasks"):
        run_stream(apply_overrides(TINY, ["data.num_tasks=3"]), progress=False)
    with pytest.raises(ValueError, match="divide"):
        run_stream(apply_overrides(TINY, ["seeds=3"]), mesh=make_mesh(data=8), progress=False)
