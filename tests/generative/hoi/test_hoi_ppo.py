"""PPO on a trivial task learns (and the real run() writes its files), a sharded env step on 8 fake devices,
config validation."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from core.config import BadInputError, ConfigError, apply_overrides
from core.sharding import make_mesh
from generative.hoi import env as env_lib
from generative.hoi import train
from generative.hoi.configs import presets

# reach the door handle (about 1 m away: the torso must move): a one-edge RMD plan through the template grammar
TRIVIAL = dataclasses.replace(presets()["tiny"], command="reach handle", arms=("rmd",), n_envs=32, horizon=25,
                              updates=30, chunk=10, epochs=4, minibatches=4, eval_envs=32, lr=1e-3)


def test_ppo_learns_a_trivial_task_through_run(tmp_path):
    metrics = train.run(TRIVIAL, tmp_path)
    curve = np.asarray(json.loads((tmp_path / "curves.json").read_text())["completion"][0])
    assert curve.shape == (30,)
    assert curve[:5].mean() < 0.25, curve  # the untrained policy rarely reaches the handle in 1.25 s
    assert curve[-10:].mean() > curve[:5].mean() + 0.2, curve
    assert metrics["reach handle/rmd/completion"] > 0.3
    for name in ("metrics.json", "runs.json", "completion.png", "completion_command0.png", "frames_command_rmd.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert np.isfinite(metrics["env_steps_per_second"])


def test_sharded_env_step_matches_unsharded(devices):
    mesh = make_mesh(data=8)
    task = env_lib.make_task("carry", "rmd")
    n = 16
    s, _ = jax.vmap(lambda k: env_lib.reset(k, task, 50))(jax.random.split(jax.random.key(0), n))
    actions = jax.random.uniform(jax.random.key(1), (n, 5), minval=-1, maxval=1)
    step = jax.vmap(lambda s, a: env_lib.step(s, a, task, 50))
    want = jax.jit(step)(s, actions)
    shard = NamedSharding(mesh, P("data"))
    s_sh = jax.device_put(s, shard)
    got = jax.jit(step, in_shardings=(shard, shard), out_shardings=shard)(s_sh, jax.device_put(actions, shard))
    assert got[1].sharding.spec == P("data") and len(got[1].sharding.device_set) == 8
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_a_completed_plan_shows_its_last_sub_task_in_the_observation():
    # the last sub-task's state is the one to keep once the plan is done: its goal and phase stay in view
    task = env_lib.make_task("push", "rmd")
    s, obs0 = env_lib.reset(jax.random.key(0), task, 50)
    assert obs0.shape == (env_lib.OBS_DIM,)
    n = int(task.plan.n_sub)
    at = lambda phase: np.asarray(env_lib.observe(s._replace(tracker=s.tracker._replace(phase=jnp.int32(phase))),
                                                  task, 50))
    np.testing.assert_array_equal(at(n), at(n - 1))
    # before completion the phase shows: push and settle share their goal, so only the one-hot differs
    changed = np.flatnonzero(at(n - 1) != at(n - 2))
    assert len(changed) == 2 and sorted(at(n - 1)[changed]) == [0.0, 1.0] and sorted(at(n - 2)[changed]) == [0.0, 1.0]
    goal = np.asarray(env_lib.PUSH_GOAL, np.float32)
    assert any(np.allclose(at(n)[i:i + 2], goal) for i in range(env_lib.OBS_DIM - 1))


def test_config_and_task_validation():
    with pytest.raises(ConfigError, match="tasks="):
        apply_overrides(presets()["tiny"], ["tasks=sit"])
    with pytest.raises(ConfigError, match="minibatches="):
        dataclasses.replace(presets()["tiny"], minibatches=7)
    with pytest.raises(ConfigError, match="substeps="):
        dataclasses.replace(presets()["tiny"], substeps=1)
    with pytest.raises(ConfigError, match="arms="):
        dataclasses.replace(presets()["tiny"], command="open door")  # tiny has the hand arm
    with pytest.raises(BadInputError, match="'dance'"):
        dataclasses.replace(presets()["tiny"], command="dance", arms=("rmd",))
    with pytest.raises(BadInputError, match="arm='hand'"):
        env_lib.make_task("reach box", "hand")
    with pytest.raises(ConfigError, match="scene="):
        dataclasses.replace(presets()["tiny"], scene="isaac")
    with pytest.raises(ConfigError, match="tasks=.*no carry with scene='mjx'"):
        dataclasses.replace(presets()["tiny"], scene="mjx", tasks=("push", "carry"))
    with pytest.raises(ConfigError, match="dt=0.025: expected a multiple of the MJX physics step"):
        dataclasses.replace(presets()["tiny"], scene="mjx", dt=0.025)
    with pytest.raises(BadInputError, match="scene='isaac'"):
        env_lib.make_scene("isaac")
    paper = presets()["paper"]
    assert paper.n_envs == 4096 and paper.env_steps_per_run >= 100_000_000 and paper.scene == "mjx"


def test_the_mjx_scene_without_mujoco_is_one_clear_error(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mujoco" else real(name, *a))
    with pytest.raises(BadInputError, match=r"scene='mjx': expected mujoco and mujoco-mjx installed .*\[hoi\]"):
        env_lib.make_scene("mjx")


def test_a_stopped_run_resumes_to_the_uninterrupted_result(tmp_path, compile_cache):
    """Checkpoint per chunk: stopped after one chunk and rerun, the grid ends where an uninterrupted one ends, and
    metrics.jsonl holds one record per chunk without repeats."""
    cfg = dataclasses.replace(TRIVIAL, n_envs=8, horizon=10, updates=20, chunk=10, eval_envs=8, minibatches=2)
    whole = train.run_grid(cfg, progress_bar=False, workdir=tmp_path / "whole")
    assert train.run_grid(cfg, progress_bar=False, workdir=tmp_path / "killed", stop_after_chunks=1) is None
    resumed = train.run_grid(cfg, progress_bar=False, workdir=tmp_path / "killed")
    for k in whole.curves:
        np.testing.assert_allclose(resumed.curves[k], whole.curves[k], rtol=1e-6, atol=1e-7, err_msg=k)
    for a, b in zip(resumed.evals, whole.evals):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7, nan_ok=True)
    steps = [json.loads(line)["step"] for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20]
