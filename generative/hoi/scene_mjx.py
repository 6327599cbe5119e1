"""The MJX scene (optional extra `hoi`: mujoco, mujoco-mjx): the 2D scene's layout in MuJoCo, top-down with
gravity off: a torso (a sphere) on two slide joints with a 2-link arm (shoulder and elbow hinges about z, a
sphere hand), a box on two slide joints (dynamic), a table (a static box), a door on a hinge with joint limits
(articulated) and four room walls that hold the torso and the box (as in the 2D scene); joint damping stands in
for floor friction. Four motors (torso x / y force, two joint torques); MuJoCo's soft contacts replace the 2D
scene's penalty contacts.

The gripper (the fifth action) is the 2D scene's rule and spring: it engages within GRIP_RANGE
(`scene2d.update_grip`), and while engaged a spring-damper from the hand to the box or the handle (rest length:
touching) is applied every physics step as generalised forces (`grip_forces`: the box's slides, the door's hinge,
and the reaction through the arm's Jacobian to the torso and the joints). A grasped box is not lifted (the scene
is top-down with no z), so carry (over the table) is a 2D-scene task only.

`make_scene()` is the `env.Scene` PPO trains on (`HOIConfig.scene="mjx"`); `view(state)` gives the 2D view
(scene2d.Phys) that the reward compiler, the observation and the metrics read. `make_step(model)` is the bare
vmapped, jitted physics step of the speed benchmark; `data.time` is promoted to a strongly typed float32 so the
step compiles once, not twice (mujoco#2306), and `core.compilation.enable_persistent_cache()` turns on JAX's
persistent cache (a second process compiles in seconds).

    python -m generative.hoi.scene_mjx --envs 256 --steps 50     # prints one JSON line: steps/s, compile time
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from core.compilation import enable_persistent_cache
from generative.hoi import scene2d as s2

TIMESTEP = 0.01  # physics step (s); an env step of dt seconds is dt / TIMESTEP of them
_WALL = 0.1  # half thickness of the room walls
XML = f"""
<mujoco model="hoi_rmd_lite">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" gravity="0 0 0" iterations="4" ls_iterations="8"/>
  <default>
    <geom contype="1" conaffinity="1" friction="0.5 0.01 0.001" solref="0.02 1"/>
    <default class="wall">  <!-- contacts only geoms with contype bit 2: the torso and the box -->
      <geom type="box" contype="0" conaffinity="2"/>
    </default>
  </default>
  <worldbody>
    <geom name="table" type="box" pos="{s2.TABLE_C[0]} {s2.TABLE_C[1]} 0" size="{s2.TABLE_H[0]} {s2.TABLE_H[1]} 0.1"/>
    <geom name="wall_e" class="wall" pos="{s2.ROOM + _WALL} 0 0" size="{_WALL} {s2.ROOM + 2 * _WALL} 0.1"/>
    <geom name="wall_w" class="wall" pos="{-s2.ROOM - _WALL} 0 0" size="{_WALL} {s2.ROOM + 2 * _WALL} 0.1"/>
    <geom name="wall_n" class="wall" pos="0 {s2.ROOM + _WALL} 0" size="{s2.ROOM + 2 * _WALL} {_WALL} 0.1"/>
    <geom name="wall_s" class="wall" pos="0 {-s2.ROOM - _WALL} 0" size="{s2.ROOM + 2 * _WALL} {_WALL} 0.1"/>
    <body name="torso" pos="0 0 0">
      <joint name="tx" type="slide" axis="1 0 0" damping="{s2.DAMP_TORSO * s2.M_TORSO}"/>
      <joint name="ty" type="slide" axis="0 1 0" damping="{s2.DAMP_TORSO * s2.M_TORSO}"/>
      <geom name="torso" type="sphere" size="{s2.R_TORSO}" mass="{s2.M_TORSO}" contype="3"/>
      <body name="upper" pos="0 0 0">
        <joint name="shoulder" type="hinge" axis="0 0 1" damping="{s2.DAMP_JOINT * s2.I_JOINT}"
               armature="{s2.I_JOINT}"/>
        <geom type="capsule" fromto="0 0 0.15 {s2.L1} 0 0.15" size="0.03" mass="0.1" contype="0" conaffinity="0"/>
        <body name="fore" pos="{s2.L1} 0 0">
          <joint name="elbow" type="hinge" axis="0 0 1" damping="{s2.DAMP_JOINT * s2.I_JOINT}" armature="{s2.I_JOINT}"/>
          <geom type="capsule" fromto="0 0 0.15 {s2.L2} 0 0.15" size="0.03" mass="0.1" contype="0" conaffinity="0"/>
          <geom name="hand" type="sphere" pos="{s2.L2} 0 0" size="{s2.R_HAND}" mass="0.1"/>
          <site name="hand" pos="{s2.L2} 0 0"/>
        </body>
      </body>
    </body>
    <body name="box" pos="0 0 0">
      <joint name="bx" type="slide" axis="1 0 0" damping="{s2.DAMP_FLOOR * s2.M_BOX}"/>
      <joint name="by" type="slide" axis="0 1 0" damping="{s2.DAMP_FLOOR * s2.M_BOX}"/>
      <geom name="box" type="box" size="{s2.R_BOX} {s2.R_BOX} 0.1" mass="{s2.M_BOX}" contype="3"/>
    </body>
    <body name="door" pos="{s2.HINGE[0]} {s2.HINGE[1]} 0">
      <joint name="hinge" type="hinge" axis="0 0 1" range="0 {s2.DOOR_MAX}" limited="true"
             damping="{s2.DAMP_DOOR}"/>
      <geom name="panel" type="box" pos="{s2.DOOR_LEN / 2} 0 0" size="{s2.DOOR_LEN / 2} 0.02 0.1" mass="1"/>
      <geom name="handle" type="sphere" pos="{s2.HANDLE_AT} 0 0" size="{s2.R_HANDLE}" mass="0.05"/>
    </body>
  </worldbody>
  <contact>
    <exclude body1="torso" body2="fore"/>
  </contact>
  <actuator>
    <motor joint="tx" gear="{s2.F_TORSO}" ctrlrange="-1 1"/>
    <motor joint="ty" gear="{s2.F_TORSO}" ctrlrange="-1 1"/>
    <motor joint="shoulder" gear="{s2.TAU_JOINT}" ctrlrange="-1 1"/>
    <motor joint="elbow" gear="{s2.TAU_JOINT}" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""
# qpos layout: torso x, y, shoulder, elbow, box x, y, door hinge
Q_TORSO, Q_ARM, Q_BOX, Q_DOOR = slice(0, 2), slice(2, 4), slice(4, 6), 6


def load_model():
    """(mujoco.MjModel, mjx.Model) of the scene."""
    import mujoco
    from mujoco import mjx

    mj = mujoco.MjModel.from_xml_string(XML)
    return mj, mjx.put_model(mj)


def promote_time(data):
    """`data.time` as a strongly typed float32 (a weak-typed scalar makes the first step compile twice)."""
    return data.replace(time=jnp.asarray(data.time, jnp.float32))


def reset(model, key: jax.Array):
    """One start state like scene2d.reset: torso, box and arm pose drawn the same way."""
    from mujoco import mjx

    p = s2.reset(key)
    qpos = jnp.concatenate([p.torso_p, p.q, p.box_p, jnp.zeros(1)])
    data = mjx.make_data(model)
    return promote_time(data.replace(qpos=qpos.astype(data.qpos.dtype)))


def make_step(model, *, frame_skip: int = 5):
    """jit(vmap(step)): (batched data, actions (N, 4)) -> data after frame_skip physics steps (0.05 s)."""
    from mujoco import mjx

    def one(data, action):
        data = data.replace(ctrl=jnp.clip(action, -1.0, 1.0).astype(data.ctrl.dtype))
        return jax.lax.fori_loop(0, frame_skip, lambda _, d: mjx.step(model, d), data)

    return jax.jit(jax.vmap(one))


class MJXState(NamedTuple):
    data: Any  # mjx.Data
    grip_box: jax.Array  # () 1 while the hand grasps the box
    grip_handle: jax.Array


def view(state: MJXState) -> s2.Phys:
    """The 2D view of an MJX state: the scene2d.Phys with the same positions, velocities and grips (a box is never
    lifted here)."""
    q, v = state.data.qpos, state.data.qvel
    return s2.Phys(torso_p=q[Q_TORSO], torso_v=v[Q_TORSO], q=q[Q_ARM], qd=v[Q_ARM], box_p=q[Q_BOX], box_v=v[Q_BOX],
                   box_up=jnp.zeros(()), door=q[Q_DOOR], door_v=v[Q_DOOR], grip_box=state.grip_box,
                   grip_handle=state.grip_handle)


def features(data) -> s2.Features:
    """The reward compiler's Features of one MJX data with nothing grasped (the same geometry as scene2d)."""
    return s2.features(view(MJXState(data, jnp.zeros(()), jnp.zeros(()))))


def grip_forces(p: s2.Phys) -> jax.Array:
    """Generalised forces (nv = 7, qpos order) of the engaged grip springs in 2D view p: the box's slides get
    the hand's pull, the door's hinge the pull's moment at the handle, the torso and the arm joints the reaction
    (J^T f at the hand), as in scene2d's dynamics."""
    J = s2.jacobian(p.q)
    hand_p, hand_v = p.torso_p + s2.fk(p.q), p.torso_v + J @ p.qd
    hp, hv = s2.handle(p.door, p.door_v)
    f_box = p.grip_box * s2.grip_spring(hand_p, hand_v, p.box_p, p.box_v, s2.R_BOX + s2.R_HAND)
    f_handle = p.grip_handle * s2.grip_spring(hand_p, hand_v, hp, hv, s2.R_HANDLE + s2.R_HAND)
    lever = hp - jnp.asarray(s2.HINGE)
    tau_door = lever[0] * f_handle[1] - lever[1] * f_handle[0]
    f_hand = -(f_box + f_handle)
    return jnp.concatenate([f_hand, J.T @ f_hand, f_box, tau_door[None]])


@functools.cache
def make_scene():
    """The MJX scene as an env.Scene (one model per process)."""
    from mujoco import mjx

    from generative.hoi.env import Scene

    _, model = load_model()

    def reset_state(key: jax.Array) -> MJXState:
        return MJXState(reset(model, key), jnp.zeros(()), jnp.zeros(()))

    def step(state: MJXState, action: jax.Array, dt: float, substeps: int) -> MJXState:
        del substeps  # MuJoCo's own step, TIMESTEP
        action = jnp.clip(action, -1.0, 1.0)
        grips = s2.update_grip(view(state), action[4])
        g_box, g_handle = grips.grip_box, grips.grip_handle

        def physics(_, d):
            qfrc = grip_forces(view(MJXState(d, g_box, g_handle)))
            return mjx.step(model, d.replace(qfrc_applied=qfrc.astype(d.qfrc_applied.dtype)))

        data = state.data.replace(ctrl=action[:4].astype(state.data.ctrl.dtype))
        data = jax.lax.fori_loop(0, round(dt / TIMESTEP), physics, data)
        return MJXState(data, g_box, g_handle)

    return Scene("mjx", reset_state, step, view)


def benchmark(n_envs: int, steps: int, *, cache: bool = True) -> dict:
    """Compile time and env steps/s of the vmapped step over random actions."""
    if cache:
        enable_persistent_cache(min_compile_seconds=1.0)
    _, model = load_model()
    keys = jax.random.split(jax.random.key(0), n_envs)
    data = jax.jit(jax.vmap(lambda k: reset(model, k)))(keys)
    step = make_step(model)
    actions = jax.random.uniform(jax.random.key(1), (steps, n_envs, 4), minval=-1, maxval=1)
    t0 = time.perf_counter()
    data = jax.block_until_ready(step(data, actions[0]))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = jax.block_until_ready(step(data, actions[1]))
    second = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(2, steps):
        data = step(data, actions[i])
    jax.block_until_ready(data)
    run_s = time.perf_counter() - t0
    feats = jax.vmap(features)(data)
    finite = bool(np.all(np.isfinite(np.asarray(data.qpos))) and np.all(np.isfinite(np.asarray(feats.gap))))
    return {"n_envs": n_envs, "steps": steps, "compile_seconds": compile_s, "second_call_seconds": second,
            "env_steps_per_second": n_envs * (steps - 2) / run_s, "physics_dt": 0.01, "frame_skip": 5,
            "compiles": int(step._cache_size()), "finite": finite,
            "load": " ".join(f"{x:.1f}" for x in os.getloadavg())}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--no-cache", action="store_true")
    a = ap.parse_args()
    print(json.dumps(benchmark(a.envs, a.steps, cache=not a.no_cache)), flush=True)
