"""The MJX scene (optional extra `hoi`): skipped cleanly without mujoco; the model loads, time is promoted,
features match the 2D scene's geometry; the grip springs (generalised forces against the 2D scene's formula, a
gripped box follows the hand, a gripped handle opens the door); the vmapped step runs finite and compiles once;
PPO trains on it through run_grid (a smoke run)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("mujoco.mjx")

from generative.hoi import env as env_lib  # noqa: E402
from generative.hoi import scene2d, scene_mjx, train  # noqa: E402
from generative.hoi.configs import presets  # noqa: E402

SCENE = env_lib.make_scene("mjx")
STEP = jax.jit(lambda s, a: SCENE.step(s, a, 0.05, 4))


def state(torso, q, box, door=0.0):
    s = SCENE.reset(jax.random.key(0))
    return s._replace(data=s.data.replace(qpos=jnp.concatenate([jnp.asarray(torso), jnp.asarray(q),
                                                                 jnp.asarray(box), jnp.array([door])])))


def test_model_loads_with_the_2d_layout():
    mj, model = scene_mjx.load_model()
    assert (mj.nq, mj.nv, mj.nu) == (7, 7, 4) and mj.opt.timestep == scene_mjx.TIMESTEP
    assert mj.jnt_range[mj.joint("hinge").id][1] == pytest.approx(scene2d.DOOR_MAX)
    data = scene_mjx.reset(model, jax.random.key(0))
    assert data.time.dtype == jnp.float32 and not data.time.weak_type
    f = scene_mjx.features(data)
    p = scene2d.reset(jax.random.key(0))
    np.testing.assert_allclose(f.gap, scene2d.features(p).gap, atol=1e-5)  # same start state and geometry
    assert float(f.grip.sum()) == 0.0


@pytest.mark.slow
def test_vmapped_mjx_step_runs_finite_and_compiles_once():
    out = scene_mjx.benchmark(8, 4, cache=False)
    assert out["finite"] and out["compiles"] == 1 and out["env_steps_per_second"] > 0


def test_grip_forces_against_the_2d_formula():
    # a straight arm along +x grips the box 0.1 m beyond touching: the spring pulls the box back along -x with
    # K_GRIP * 0.1, the hand (and so the torso, J^T f with no joint torque along a straight arm) the other way
    reach = scene2d.L1 + scene2d.L2
    touch = scene2d.R_HAND + scene2d.R_BOX
    p = scene_mjx.view(state([0.0, 0.0], [0.0, 0.0], [reach + touch + 0.1, 0.0]))._replace(grip_box=jnp.float32(1))
    f = np.asarray(scene_mjx.grip_forces(p))
    np.testing.assert_allclose(f[4:6], [-scene2d.K_GRIP * 0.1, 0.0], rtol=1e-5)
    np.testing.assert_allclose(f[0:2], [scene2d.K_GRIP * 0.1, 0.0], rtol=1e-5)
    np.testing.assert_allclose(f[2:4], [0.0, 0.0], atol=1e-5)
    assert f[6] == 0.0
    assert np.all(np.asarray(scene_mjx.grip_forces(p._replace(grip_box=jnp.float32(0)))) == 0.0)


def test_a_gripped_box_follows_the_hand_and_a_gripped_handle_opens_the_door():
    reach = scene2d.L1 + scene2d.L2
    torso = jnp.array([-1.0, -1.0])
    box = torso + jnp.array([reach + scene2d.R_HAND + scene2d.R_BOX + 0.02, 0.0])  # within grip range
    moved = {}
    for grip in (1.0, -1.0):  # walk away from the box, gripping or not
        s = state(torso, [0.0, 0.0], box)
        for _ in range(20):
            s = STEP(s, jnp.array([-1.0, 0.0, 0.0, 0.0, grip]))
        moved[grip] = float(scene_mjx.view(s).box_p[0] - box[0])
        assert float(s.grip_box) == max(grip, 0.0)
    assert moved[1.0] < -0.3 and abs(moved[-1.0]) < 1e-3, moved
    q = jnp.array([0.6, 0.6])
    hp, _ = scene2d.handle(jnp.float32(0), jnp.float32(0))
    s = state(hp - scene2d.fk(q), q, [0.0, -1.0])
    for _ in range(10):
        s = STEP(s, jnp.array([0.0, 1.0, 0.0, 0.0, 1.0]))  # grip and walk towards +y
    assert float(s.grip_handle) == 1.0 and float(scene_mjx.view(s).door) > 0.3
    assert bool(jnp.all(jnp.isfinite(s.data.qpos)))


@pytest.mark.slow
def test_ppo_trains_on_the_mjx_scene():
    config = dataclasses.replace(presets()["tiny"], scene="mjx", tasks=("push",), arms=("rmd", "hand"), n_envs=8,
                                 horizon=10, updates=2, chunk=1, eval_envs=4)
    grid = train.run_grid(config, progress_bar=False)
    assert [r[:2] for r in grid.runs] == [("push", "rmd"), ("push", "hand")]
    assert grid.curves["loss"].shape == (2, 2) and np.all(np.isfinite(grid.curves["loss"]))
    assert all(0.0 <= ev["completion"] <= 1.0 and np.isfinite(ev["final_object_error"]) for ev in grid.evals)
    assert np.asarray(grid.strips[0].box_p).shape == (10, 2)  # the frame strip's 2D view of the MJX episode


def test_the_walls_stop_the_torso_and_the_box_not_the_hand():
    # as in the 2D scene, the room walls hold the torso and the box; the arm and the door do not touch them
    mj, _ = scene_mjx.load_model()
    wall = mj.geom("wall_e").id
    for name, collides in (("torso", True), ("box", True), ("hand", False), ("panel", False), ("handle", False)):
        g = mj.geom(name).id
        hit = bool(mj.geom_contype[g] & mj.geom_conaffinity[wall] or mj.geom_contype[wall] & mj.geom_conaffinity[g])
        assert hit == collides, name
    edge = scene2d.ROOM - scene2d.R_TORSO
    s = state([edge - 0.3, -1.5], [np.pi / 2, 0.0], [0.0, 1.5])  # the arm points away from the wall
    for _ in range(40):
        s = STEP(s, jnp.array([1.0, 0.0, 0.0, 0.0, -1.0]))  # walk into the east wall
    x = float(scene_mjx.view(s).torso_p[0])
    assert edge - 0.05 < x < edge + 0.03, x
