import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import example
from core.data import ArrayLoader
from core.train import fit, init_train_state, make_train_step


def _linear_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    return {"x": x, "y": x @ np.array([1.0, -2.0, 0.5], np.float32)}


def _loss(params, batch, key):
    err = batch["x"] @ params["w"] - batch["y"]
    return jnp.mean(err**2), {"max_err": jnp.max(jnp.abs(err))}


def test_step_matches_a_hand_written_sgd_update():
    tx = optax.sgd(0.1)
    params = {"w": jnp.ones(3)}
    batch = jax.tree.map(jnp.asarray, _linear_problem())
    state = init_train_state(params, tx, jax.random.key(0))
    new_state, metrics = make_train_step(_loss, tx, donate=False)(state, batch)
    grad = 2 * batch["x"].T @ (batch["x"] @ params["w"] - batch["y"]) / 64
    np.testing.assert_allclose(new_state.params["w"], params["w"] - 0.1 * grad, rtol=1e-5)
    assert int(new_state.step) == 1 and set(metrics) == {"loss", "max_err", "grad_norm"}


def test_fit_raises_on_nan_naming_the_steps(tmp_path):
    tx = optax.sgd(1e6)  # diverges to inf within a few steps
    state = init_train_state({"w": jnp.ones(3)}, tx, jax.random.key(0))
    with pytest.raises(FloatingPointError, match=r"non-finite .*loss.* between steps \d+ and \d+"):
        fit(state, make_train_step(_loss, tx), ArrayLoader(_linear_problem(), 16), num_steps=200,
            workdir=tmp_path, log_every=10, progress_bar=False)


def test_fit_resumes_in_process_to_the_same_parameters(tmp_path):
    tx = optax.adam(1e-2)
    step = make_train_step(_loss, tx)
    fresh = lambda: init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0))  # noqa: E731
    full, _ = fit(fresh(), step, ArrayLoader(_linear_problem(), 16), num_steps=40, workdir=tmp_path / "a",
                  ckpt_every=10, log_every=5, progress_bar=False)
    fit(fresh(), step, ArrayLoader(_linear_problem(), 16), num_steps=25, workdir=tmp_path / "b",
        ckpt_every=10, log_every=5, progress_bar=False)  # "killed" after step 25, last checkpoint at 20
    resumed, history = fit(fresh(), step, ArrayLoader(_linear_problem(), 16), num_steps=40,
                           workdir=tmp_path / "b", ckpt_every=10, log_every=5, progress_bar=False)
    np.testing.assert_array_equal(np.asarray(resumed.params["w"]), np.asarray(full.params["w"]))
    assert [r["step"] for r in history] == list(range(5, 45, 5))


def _loss_curve(workdir):
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return np.array([json.loads(line)["loss"] for line in lines if '"loss"' in line])


def test_one_device_and_eight_devices_give_the_same_loss_curve(tmp_path, devices):
    config = example.PRESETS["tiny"]
    one = example.run(config, tmp_path / "one", devices=devices[:1])
    eight = example.run(config, tmp_path / "eight", devices=devices)
    assert eight["devices"] == 8
    curve_one, curve_eight = _loss_curve(tmp_path / "one"), _loss_curve(tmp_path / "eight")
    assert len(curve_one) == config.steps // config.log_every
    np.testing.assert_allclose(curve_eight, curve_one, rtol=1e-5, atol=1e-5)
    assert abs(one["eval_mse"] - eight["eval_mse"]) < 1e-5
    assert one["eval_mse"] < 0.1, "the tiny preset should learn (target variance is about 0.5)"
