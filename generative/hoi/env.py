"""The goal-conditioned environment over a scene (`Scene`: the pure-JAX 2D scene, or the MJX scene of
scene_mjx.py): a task (a plan compiled to arrays, its chain-of-contacts reading, the hand reward's task index) is
data, not code, so one compiled step serves every task and every reward arm (`arm`: 0 RMD, 1 hand-engineered,
2 chain-of-contacts).

The observation is the same for every arm: the scene state, hand-relative object positions, the current
sub-task's goal and the RMD phase (one-hot) from the plan's completion tracker (a completed plan shows its last
sub-task), and the episode's time fraction.
The tracker also gives the evaluation metrics (completion in order, time to completion, relation stability),
whatever reward trained the policy. Observation, rewards and metrics read a scene through its 2D view
(`Scene.view`: a scene2d.Phys of the same quantities), so both scenes share them unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from core.config import BadInputError
from generative.hoi import plan as plan_lib
from generative.hoi import rewards, scene2d
from generative.hoi.planner import TemplatePlanner

ARMS = ("rmd", "hand", "coc")
PUSH_GOAL = (0.7, -0.8)
TASKS = {  # name -> (command, hand-reward task index)
    "push": (f"push box to {PUSH_GOAL}", 0),
    "carry": ("carry box to table", 1),
    "open": ("open door", 2),
    "open_push": (f"open door then push box to {PUSH_GOAL}", 3),
}
OBS_DIM = 53


class Scene(NamedTuple):
    """A physics backend: reset(key) -> state; step(state, action (5,), dt, substeps) -> state; view(state) ->
    scene2d.Phys (positions, velocities, grips in the 2D scene's coordinates)."""

    name: str
    reset: Callable[[jax.Array], Any]
    step: Callable[..., Any]
    view: Callable[[Any], scene2d.Phys]


SCENE_2D = Scene("2d", scene2d.reset, lambda s, a, dt, substeps: scene2d.step(s, a, dt=dt, substeps=substeps),
                 lambda s: s)
SCENES = ("2d", "mjx")


def make_scene(name: str) -> Scene:
    """The scene called `name` (SCENES); "mjx" needs the optional extra `hoi` (mujoco, mujoco-mjx)."""
    if name == "2d":
        return SCENE_2D
    if name == "mjx":
        import importlib.util

        if importlib.util.find_spec("mujoco") is None:
            raise BadInputError("scene='mjx': expected mujoco and mujoco-mjx installed (the optional extra: "
                                "pip install -e '.[hoi]')")
        from generative.hoi import scene_mjx
        return scene_mjx.make_scene()
    raise BadInputError(f"scene={name!r}: expected one of {SCENES}")


class Task(NamedTuple):
    plan: rewards.CompiledPlan
    chain: rewards.CompiledChain
    hand_task: jax.Array  # () int32
    goal_xy: jax.Array  # (2,) the push target of the hand reward
    arm: jax.Array  # () int32


class EnvState(NamedTuple):
    phys: Any  # the scene's state (scene2d.Phys, or scene_mjx.MJXState)
    tracker: rewards.Tracker
    coc: jax.Array  # () chain index
    t: jax.Array  # () int32
    done_t: jax.Array  # () int32: step at which the plan completed (-1: not yet)
    stable: jax.Array  # (2,) frames in move_with phases where every move_with edge held, and all such frames


def make_task(name: str, arm: str, plan: plan_lib.Plan | None = None) -> Task:
    """Task `name` (TASKS) trained with reward `arm` (ARMS); plan defaults to the template planner's. Any other
    name is a custom command (planned by the template planner unless `plan` is given), which has no
    hand-engineered reward."""
    if arm not in ARMS:
        raise BadInputError(f"arm={arm!r}: expected one of {ARMS}")
    if name in TASKS:
        command, hand = TASKS[name]
    elif arm == "hand":
        raise BadInputError(f"arm='hand' for the custom command {name!r}: expected rmd or coc (hand-engineered "
                            f"rewards exist only for {tuple(TASKS)})")
    else:
        command, hand = name, 0
    plan = plan or TemplatePlanner()(command)
    return Task(rewards.compile_plan(plan), rewards.compile_chain(plan), jnp.asarray(hand, jnp.int32),
                jnp.asarray(PUSH_GOAL, jnp.float32), jnp.asarray(ARMS.index(arm), jnp.int32))


def stack_tasks(tasks: list[Task]) -> Task:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)


def observe(s: EnvState, task: Task, horizon: int, scene: Scene = SCENE_2D) -> jax.Array:
    ph = scene.view(s.phys)
    f = scene2d.features(ph)
    p = task.plan
    # once the plan is complete the policy sees its last sub-task, goal and phase: that sub-task's state is the
    # one to keep (the reward still scores its terms), so completion does not switch the policy's input to a
    # phase it has rarely seen
    cur = jnp.minimum(s.tracker.phase, p.n_sub - 1)
    kind = jax.nn.one_hot(p.goal_kind[cur], 4)
    goal = p.goal_val[cur]
    phase = jax.nn.one_hot(cur, rewards.S)
    parts = [f.human_p.reshape(-1), f.human_v.reshape(-1), f.obj_p.reshape(-1), f.obj_v.reshape(-1),
             f.gap.reshape(-1), f.grip, f.box_up[None], f.table_gap[None], f.door[None], ph.door_v[None],
             f.obj_p[0] - f.human_p[0], f.obj_p[1] - f.human_p[0], kind, goal,
             jnp.where(p.goal_kind[cur] == rewards.GOAL_POSITION, goal - f.obj_p[0], 0.0),
             jnp.asarray(scene2d.TABLE_C) - f.obj_p[0], phase,
             jnp.sin(ph.q), jnp.cos(ph.q), ph.qd, (s.t / horizon)[None]]
    return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in parts])


def reset(key: jax.Array, task: Task, horizon: int, scene: Scene = SCENE_2D) -> tuple[EnvState, jax.Array]:
    s = EnvState(scene.reset(key), rewards.tracker_init(), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
                 jnp.full((), -1, jnp.int32), jnp.zeros(2))
    return s, observe(s, task, horizon, scene)


def step(s: EnvState, action: jax.Array, task: Task, horizon: int, *, dt: float = 0.05, substeps: int = 4,
         scene: Scene = SCENE_2D) -> tuple[EnvState, jax.Array, jax.Array]:
    """(state, obs, reward) after one step; the reward of the task's arm."""
    phys = scene.step(s.phys, action, dt, substeps)
    f = scene2d.features(scene.view(phys))
    p = task.plan
    # relation stability in move_with phases, measured before the tracker moves on
    cur = jnp.minimum(s.tracker.phase, rewards.S - 1)
    _, _, _, edge_holds = rewards.subtask_eval(f, p)
    mw = p.rel[cur] == rewards.REL["move_with"]
    in_mw = jnp.any(mw) & (s.tracker.phase < p.n_sub)
    kept = jnp.all(edge_holds[cur] | ~mw)
    stable = s.stable + in_mw * jnp.stack([kept.astype(jnp.float32), 1.0])
    r_rmd, tracker, _ = rewards.rmd_step(f, p, s.tracker)
    r_coc, coc = rewards.coc_step(f, task.chain, s.coc)
    r_hand = rewards.hand_reward(f, task.hand_task, task.goal_xy)
    reward = jnp.stack([r_rmd, r_hand, r_coc])[task.arm]
    t = s.t + 1
    done_t = jnp.where((s.done_t < 0) & (tracker.phase >= p.n_sub), t, s.done_t)
    new = EnvState(phys, tracker, coc, t, done_t, stable)
    return new, observe(new, task, horizon, scene), reward
