import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import example
from core.checkpoint import Checkpointer
from core.data import ArrayLoader
from core.optim import OptimizerConfig, make_optimizer
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
    with pytest.raises(FloatingPointError, match=r"non-finite .*loss.* from step \d+ \(logged steps 1-10: "):
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


# ---- fine-tuning: frozen state, accumulation, bf16 compute, lr and throughput (issue #28 part 4) ----

def _loss_with_base(params, batch, key, frozen):
    """The prediction uses trained weights plus frozen base weights (LoRA-like: w_eff = base + w)."""
    err = batch["x"] @ (frozen["base"] + params["w"]) - batch["y"]
    return jnp.mean(err**2), {}


def test_frozen_state_is_read_by_the_loss_never_updated_and_survives_donation():
    tx = optax.sgd(0.1)
    batch = jax.tree.map(jnp.asarray, _linear_problem())
    base = np.array([0.5, -1.0, 0.25], np.float32)
    state = init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0), frozen={"base": jnp.asarray(base)})
    frozen_before = state.frozen["base"]
    step = make_train_step(_loss_with_base, tx)  # donating
    w = np.zeros(3, np.float32)
    x, y = np.asarray(batch["x"]), np.asarray(batch["y"])
    for _ in range(2):
        old_params = state.params["w"]
        state, _ = step(state, batch)
        w = w - 0.1 * 2 * x.T @ (x @ (base + w) - y) / 64  # the hand-written update; base never moves
        assert old_params.is_deleted(), "the trained state is donated"
    assert state.frozen["base"] is frozen_before and not frozen_before.is_deleted()
    np.testing.assert_array_equal(np.asarray(state.frozen["base"]), base)
    np.testing.assert_allclose(np.asarray(state.params["w"]), w, rtol=1e-5)


def test_a_frozen_leaf_that_is_a_params_leaf_is_copied_so_donation_cannot_delete_it():
    params = {"w": jnp.ones(3)}
    state = init_train_state(params, optax.sgd(0.1), jax.random.key(0), frozen=params)  # a reference policy
    assert state.frozen["w"] is not state.params["w"]
    state, _ = make_train_step(lambda p, b, k, f: (jnp.sum((p["w"] - f["w"] - b) ** 2), {}), optax.sgd(0.1))(
        state, jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(state.frozen["w"]), np.ones(3))


def test_accumulating_four_microbatches_equals_one_full_batch():
    tx = optax.adam(1e-2)
    batch = jax.tree.map(jnp.asarray, _linear_problem())
    state = init_train_state({"w": jnp.asarray([0.3, 0.1, -0.2])}, tx, jax.random.key(0))
    loss = lambda p, b, k: (jnp.mean((b["x"] @ p["w"] - b["y"]) ** 2), {"mean_y": jnp.mean(b["y"])})  # noqa: E731
    one, m1 = make_train_step(loss, tx, donate=False)(state, batch)
    four, m4 = make_train_step(loss, tx, donate=False, accumulate=4)(state, batch)
    np.testing.assert_allclose(np.asarray(four.params["w"]), np.asarray(one.params["w"]), rtol=1e-6)
    for k in ("loss", "grad_norm", "mean_y"):
        np.testing.assert_allclose(float(m4[k]), float(m1[k]), rtol=1e-5, atol=1e-6)
    two = make_train_step(loss, tx, donate=False, accumulate=2)(state, batch)[0]
    np.testing.assert_allclose(np.asarray(two.params["w"]), np.asarray(one.params["w"]), rtol=1e-6)
    with pytest.raises(ValueError, match=r"batch leaf of shape \(64, 3\): accumulate=5 needs a leading axis"):
        make_train_step(loss, tx, accumulate=5)(state, batch)


def test_a_sharded_step_with_frozen_state_and_accumulation_equals_one_device(devices):
    from core import sharding as sharding_lib
    tx = optax.adam(1e-2)
    batch = jax.tree.map(jnp.asarray, _linear_problem())
    state = init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0), frozen={"base": jnp.asarray([0.5, -1., 0.2])})
    single, m1 = make_train_step(_loss_with_base, tx, donate=False)(state, batch)
    mesh = sharding_lib.make_mesh(devices=devices)
    placed = sharding_lib.replicate(state, mesh)
    step = make_train_step(_loss_with_base, tx, accumulate=2, state_sharding=jax.tree.map(lambda x: x.sharding, placed),
                           batch_sharding=sharding_lib.batch_sharding(mesh))
    sharded, m8 = step(placed, sharding_lib.shard_batch(_linear_problem(), mesh))
    np.testing.assert_allclose(np.asarray(sharded.params["w"]), np.asarray(single.params["w"]), rtol=1e-5)
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5)
    assert len(sharded.params["w"].sharding.device_set) == 8 and sharded.frozen is placed.frozen

def test_bf16_compute_keeps_fp32_master_weights():
    tx = optax.sgd(0.1)
    batch = jax.tree.map(jnp.asarray, _linear_problem())
    state = init_train_state({"w": jnp.asarray([0.3, 0.1, -0.2])}, tx, jax.random.key(0))

    def loss(params, batch, key):
        err = batch["x"] @ params["w"].astype(jnp.float32) - batch["y"]
        return jnp.mean(err**2), {"saw_bf16": jnp.asarray(params["w"].dtype == jnp.bfloat16, jnp.float32)}

    ref, m32 = make_train_step(loss, tx, donate=False)(state, batch)
    new, m16 = make_train_step(loss, tx, donate=False, compute_dtype="bfloat16")(state, batch)
    assert float(m16["saw_bf16"]) == 1.0 and float(m32["saw_bf16"]) == 0.0
    assert new.params["w"].dtype == jnp.float32
    # the update lands on the fp32 weights: w - lr * grad, the grad taken at the bf16-rounded weights and
    # returned in bf16 (the cotangent of the cast), then applied in fp32
    w16 = state.params["w"].astype(jnp.bfloat16).astype(jnp.float32)
    grad = jax.grad(lambda w: loss({"w": w}, batch, None)[0])(w16).astype(jnp.bfloat16).astype(jnp.float32)
    expected = np.asarray(state.params["w"]) - 0.1 * np.asarray(grad)
    np.testing.assert_allclose(np.asarray(new.params["w"]), expected, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(new.params["w"]), np.asarray(ref.params["w"]), rtol=2e-2)
    with pytest.raises(ValueError, match="compute_dtype='int8': expected a floating dtype"):
        make_train_step(loss, tx, compute_dtype="int8")


def _token_problem():
    data = _linear_problem()
    mask = np.zeros((64, 5), np.float32)
    mask[:, :3] = 1.0  # 3 supervised tokens per row: 48 per batch of 16
    return {**data, "loss_mask": mask}


def test_fit_logs_the_learning_rate_and_throughput(tmp_path):
    tx, schedule = make_optimizer(OptimizerConfig(name="adam", lr=1e-2, schedule="linear", decay_steps=20,
                                                  end_lr=1e-3))
    state = init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0))
    _, history = fit(state, make_train_step(_loss, tx, schedule=schedule), ArrayLoader(_token_problem(), 16),
                     num_steps=20, workdir=tmp_path, log_every=5, progress_bar=False)
    assert [r["step"] for r in history] == [5, 10, 15, 20]
    for r in history:
        assert r["lr"] == pytest.approx(float(schedule(r["step"] - 1)), rel=1e-6)  # the rate step s applied
        assert r["tokens"] == 48 and r["steps_per_s"] > 0
        assert r["tokens_per_s"] == pytest.approx(48 * r["steps_per_s"], rel=1e-6)


def test_fit_resumes_bitwise_with_accumulation_a_schedule_and_frozen_weights(tmp_path):
    tx, schedule = make_optimizer(OptimizerConfig(lr=1e-2, schedule="warmup_cosine", warmup_steps=5,
                                                  decay_steps=30, weight_decay=0.1, clip_norm=1.0))
    step = make_train_step(_loss_with_base, tx, accumulate=2, schedule=schedule)

    def fresh():
        return init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0),
                                frozen={"base": jnp.asarray([0.5, -1.0, 0.25])})

    run = lambda n, d: fit(fresh(), step, ArrayLoader(_linear_problem(), 16), num_steps=n,  # noqa: E731
                           workdir=tmp_path / d, ckpt_every=10, log_every=5, progress_bar=False)
    full, full_history = run(40, "a")
    run(25, "b")  # "killed" after step 25, last checkpoint at 20
    resumed, history = run(40, "b")
    for a, b in zip(jax.tree.leaves((full.params, full.opt_state)), jax.tree.leaves((resumed.params,
                                                                                      resumed.opt_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(resumed.frozen["base"]), [0.5, -1.0, 0.25])
    assert [r["lr"] for r in history] == [r["lr"] for r in full_history]
    assert [r["loss"] for r in history][4:] == [r["loss"] for r in full_history][4:]


# ---- issue #49: no checkpoint ever holds a non-finite value ----

def _diverging_at_step_16():
    """SGD whose learning rate jumps to 1e30 for the 16th update: the loss of step 17 is inf."""
    return optax.sgd(optax.piecewise_constant_schedule(1e-2, {15: 1e32}))


def test_checkpoints_more_frequent_than_logging_stay_finite_and_a_rerun_resumes_from_the_last_finite(tmp_path):
    tx = _diverging_at_step_16()
    step = make_train_step(_loss, tx)
    fresh = lambda: init_train_state({"w": jnp.zeros(3)}, tx, jax.random.key(0))  # noqa: E731
    evaluate = lambda s: {"mse": _loss(s.params, jax.tree.map(jnp.asarray, _linear_problem()), None)[0]}  # noqa
    kwargs = dict(num_steps=40, workdir=tmp_path, ckpt_every=10, log_every=100, eval_fn=evaluate,
                  eval_every=10, best_metric="mse", progress_bar=False)
    message = (r"^non-finite loss at step 17 \(checked steps 11-20 before writing a checkpoint\); the last finite "
               r"checkpoint is step 10 \(.*checkpoints\), which a rerun resumes from; lower the learning rate")
    with pytest.raises(FloatingPointError, match=message) as err:
        fit(fresh(), step, ArrayLoader(_linear_problem(), 16), **kwargs)
    assert "\n" not in str(err.value)
    checkpointer = Checkpointer(tmp_path / "checkpoints", best_metric="mse")
    assert checkpointer.latest_step() == 10 and checkpointer.best_step() == 10
    for best in (False, True):
        restored, _ = checkpointer.restore(fresh(), best=best)
        assert int(restored.step) == 10 and np.isfinite(np.asarray(restored.params["w"])).all()
    # the rerun resumes from step 10 (and diverges again at the same step, with the same message) ...
    with pytest.raises(FloatingPointError, match=message):
        fit(fresh(), step, ArrayLoader(_linear_problem(), 16), **kwargs)
    # ... and its state at step 10 is the uninterrupted run's state at step 10
    clean, _ = fit(fresh(), step, ArrayLoader(_linear_problem(), 16), num_steps=10, workdir=tmp_path / "clean",
                   log_every=10, progress_bar=False)
    resumed, _ = fit(fresh(), step, ArrayLoader(_linear_problem(), 16), **{**kwargs, "num_steps": 10})
    assert int(resumed.step) == 10
    np.testing.assert_array_equal(np.asarray(resumed.params["w"]), np.asarray(clean.params["w"]))


def test_finite_loss_but_non_finite_parameters_are_refused_before_the_checkpoint(tmp_path):
    def loss(params, batch, key):  # a finite loss that does not read the (infinite) parameters
        return jnp.mean(batch["y"] ** 2), {}

    tx = optax.sgd(1.0)
    state = init_train_state({"w": jnp.asarray([jnp.inf, 0.0, 1.0])}, tx, jax.random.key(0))
    with pytest.raises(FloatingPointError, match=r"^non-finite parameters \(global norm (inf|nan)\) after step 5 "
                                                 r"\(checked steps 1-5 before writing a checkpoint\); no finite "
                                                 r"checkpoint was written, so a rerun starts afresh"):
        fit(state, make_train_step(loss, tx), ArrayLoader(_linear_problem(), 16), num_steps=20,
            workdir=tmp_path, ckpt_every=5, log_every=100, progress_bar=False)
    assert Checkpointer(tmp_path / "checkpoints").latest_step() is None


@pytest.mark.parametrize("flat_limit", [0, 1 << 26])  # per-leaf reductions / one flat copy
def test_global_norm_matches_numpy_on_mixed_leaves(monkeypatch, flat_limit):
    from core import train as train_lib
    monkeypatch.setattr(train_lib, "_FLAT_NORM_LIMIT", flat_limit)
    rng = np.random.default_rng(0)
    tree = {"a": jnp.asarray(rng.standard_normal((3, 5)), jnp.float32), "b": jnp.asarray([1.5, -2.0], jnp.bfloat16),
            "c": [jnp.asarray(rng.standard_normal(7) * 1e3, jnp.float32)], "step": jnp.int32(7)}
    floats = [np.asarray(x, np.float64) for x in (tree["a"], tree["b"], tree["c"][0])]
    expected = np.sqrt(sum((x ** 2).sum() for x in floats))  # the int leaf is not a parameter
    assert float(train_lib._global_norm(tree)) == pytest.approx(expected, rel=1e-6)
    assert not np.isfinite(float(train_lib._global_norm({**tree, "b": jnp.asarray([1.0, np.nan], jnp.bfloat16)})))
    assert not np.isfinite(float(train_lib._global_norm({**tree, "a": tree["a"].at[0, 0].set(np.inf)})))


def test_huge_but_finite_parameters_have_a_finite_norm():
    from core.train import check_finite
    norm = check_finite({"loss": [jnp.float32(1.0), jnp.float32(2.0)]}, {"w": jnp.full((4,), 1e30)}, first=1,
                        last=2, checkpointer=None)
    assert norm == pytest.approx(2e30, rel=1e-6)
    with pytest.raises(FloatingPointError, match=r"^non-finite loss at step 2 \(checked steps 1-2 .* no checkpoint "
                                                 r"is written \(no run folder\)"):
        check_finite({"loss": [jnp.float32(1.0), jnp.float32(np.nan)]}, {"w": jnp.ones(2)}, first=1, last=2,
                     checkpointer=None)
