"""The reward compiler: an RMD plan -> arrays (`compile_plan`) that one jitted function turns into per-step
rewards, completion tests and the phase tracker; and the two comparison rewards, chain-of-contacts
(`compile_chain`, UniHSI-style) and the hand-engineered per-task rewards (`hand_reward`).

Because a plan is compiled to padded arrays (MAX_SUBTASKS x MAX_EDGES), every task's RMD reward is the same
compiled XLA function with different data: there is nothing per task to tune. The constants below (the
tolerances and the kernel scales) are shared by all plans.

Per edge of the current sub-task (gap = surface distance between the human part and the object part,
dv = |v_human - v_object|), with k(x, s) = exp(-x / s):
  approach(d*):      k(max(0, gap - d*), SIGMA_D);                 holds when gap <= d* + CONTACT_TOL
  contact:           k(max(0, gap - CONTACT_TOL), SIGMA_D) (x (1 + grip) / 2 with grasp); gap <= CONTACT_TOL
  move_with:         contact term x k(dv, SIGMA_V);                 contact holds and dv <= VEL_TOL
  release(d):        (1 - grip) x k(max(0, d - gap), SIGMA_D);      grip off and gap >= d
  keep_distance(d):  k(max(0, d - gap), SIGMA_D);                   gap >= d
  hold_still:        k(|v_object|, SIGMA_V);                        |v_object| <= VEL_TOL
Goal terms: box position k(|p - p*|, SIGMA_D) (holds within GOAL_POS_TOL), box on the table
k(max(0, table_gap), SIGMA_D) (holds when over the table top and lifted / resting there), door k(max(0, a* - a),
SIGMA_A) (holds within GOAL_ANGLE_TOL). A sub-task completes when every edge and its goal hold for
`hold_steps` consecutive steps; the phase then advances (in order). Reward with n sub-tasks and phase p:
  r = (min(p, n - 1) + mean of the current sub-task's terms) / n + [kept] / n + ADVANCE_BONUS x [advanced],
where kept = (p == n) and the last sub-task's test still holds: a completed plan's goal state is to be kept, not
passed through (a push that completes and then carries the box on past its target loses the 1 / n).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from generative.hoi import plan as plan_lib
from generative.hoi.scene2d import Features

CONTACT_TOL, VEL_TOL, GOAL_POS_TOL, GOAL_ANGLE_TOL = 0.05, 0.25, 0.15, 0.1
SIGMA_D, SIGMA_V, SIGMA_A = 0.5, 0.5, 0.5
ADVANCE_BONUS = 1.0
REL = {name: i for i, name in enumerate(plan_lib.RELATIONS)}
GOAL_NONE, GOAL_POSITION, GOAL_TABLE, GOAL_DOOR = 0, 1, 2, 3
S, E = plan_lib.MAX_SUBTASKS, plan_lib.MAX_EDGES
CHAIN = S * (E + 1)


class CompiledPlan(NamedTuple):
    n_sub: jax.Array  # () int32
    rel: jax.Array  # (S, E) int32, -1 = no edge
    hum: jax.Array  # (S, E) int32
    obj: jax.Array  # (S, E) int32
    dist: jax.Array  # (S, E) float32
    grasp: jax.Array  # (S, E) float32
    goal_kind: jax.Array  # (S,) int32
    goal_val: jax.Array  # (S, 2) float32
    hold: jax.Array  # (S,) int32


class CompiledChain(NamedTuple):
    """Chain-of-contacts: a list of contacts, each dropped once met. kind 0: none, 1: human-object contact,
    2: the object at its goal (the sub-task's goal as a contact target)."""

    n: jax.Array  # () int32
    kind: jax.Array  # (CHAIN,) int32
    hum: jax.Array
    obj: jax.Array
    goal_kind: jax.Array
    goal_val: jax.Array  # (CHAIN, 2)


def compile_plan(plan: plan_lib.Plan) -> CompiledPlan:
    """A validated Plan -> padded arrays (static shapes, so all plans share one compiled reward)."""
    rel = np.full((S, E), -1, np.int32)
    hum, obj = np.zeros((S, E), np.int32), np.zeros((S, E), np.int32)
    dist, grasp = np.zeros((S, E), np.float32), np.zeros((S, E), np.float32)
    goal_kind, goal_val, hold = np.zeros(S, np.int32), np.zeros((S, 2), np.float32), np.ones(S, np.int32)
    for i, sub in enumerate(plan.subtasks):
        for j, e in enumerate(sub.edges):
            rel[i, j] = REL[e.relation]
            hum[i, j] = plan_lib.HUMAN_PARTS.index(e.human)
            obj[i, j] = plan_lib.OBJECT_PARTS.index(e.object)
            dist[i, j], grasp[i, j] = e.distance, float(e.grasp)
        goal_kind[i], goal_val[i] = _goal_code(sub.goal)
        hold[i] = sub.hold_steps
    return CompiledPlan(jnp.asarray(len(plan.subtasks), jnp.int32), *(jnp.asarray(a) for a in
                        (rel, hum, obj, dist, grasp, goal_kind, goal_val, hold)))


def _goal_code(goal: plan_lib.Goal | None) -> tuple[int, tuple[float, float]]:
    if goal is None:
        return GOAL_NONE, (0.0, 0.0)
    if goal.object == "door":
        return GOAL_DOOR, (goal.angle, 0.0)
    if goal.on_table:
        return GOAL_TABLE, (0.0, 0.0)
    return GOAL_POSITION, goal.position


def compile_chain(plan: plan_lib.Plan) -> CompiledChain:
    """The chain-of-contacts reading of the same plan: each sub-task's approach / contact / move_with edges as
    point contacts, then its goal as a contact of the object with its target; no velocity terms, no holding,
    no release, and each contact is discarded the step it is met."""
    kind, hum, obj = np.zeros(CHAIN, np.int32), np.zeros(CHAIN, np.int32), np.zeros(CHAIN, np.int32)
    goal_kind, goal_val = np.zeros(CHAIN, np.int32), np.zeros((CHAIN, 2), np.float32)
    n, seen = 0, set()
    for sub in plan.subtasks:
        for e in sub.edges:
            key = (e.human, e.object)
            if e.relation in ("approach", "contact", "move_with") and key not in seen:
                kind[n], hum[n], obj[n] = 1, plan_lib.HUMAN_PARTS.index(e.human), plan_lib.OBJECT_PARTS.index(e.object)
                seen.add(key)
                n += 1
        if sub.goal is not None:
            kind[n] = 2
            goal_kind[n], goal_val[n] = _goal_code(sub.goal)
            n += 1
            seen = set()  # a later sub-task may touch the same part again
    return CompiledChain(jnp.asarray(max(n, 1), jnp.int32), *(jnp.asarray(a) for a in
                         (kind, hum, obj, goal_kind, goal_val)))


def _k(x, s):
    return jnp.exp(-x / s)


def goal_eval(f: Features, kind: jax.Array, val: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(term, holds, error) of a goal (kind, val) at features f; error in m (box) or rad (door); kind 0:
    (1, True, 0)."""
    pos_err = jnp.linalg.norm(f.obj_p[0] - val)
    table_err = jnp.maximum(f.table_gap, 0.0)
    door_err = jnp.maximum(val[0] - f.door, 0.0)
    err = jnp.select([kind == GOAL_POSITION, kind == GOAL_TABLE, kind == GOAL_DOOR], [pos_err, table_err, door_err],
                     0.0)
    term = jnp.select([kind == GOAL_POSITION, kind == GOAL_TABLE, kind == GOAL_DOOR],
                      [_k(pos_err, SIGMA_D), _k(table_err, SIGMA_D), _k(door_err, SIGMA_A)], 1.0)
    holds = jnp.select([kind == GOAL_POSITION, kind == GOAL_TABLE, kind == GOAL_DOOR],
                       [pos_err <= GOAL_POS_TOL, (f.table_gap <= 0.0) & (f.box_up > 0), door_err <= GOAL_ANGLE_TOL],
                       True)
    return term, holds, err


def edge_eval(f: Features, rel, hum, obj, dist, grasp) -> tuple[jax.Array, jax.Array]:
    """(term, holds) of one edge; elementwise over any leading shape of the edge arrays."""
    gap = f.gap[hum, obj]
    dv = jnp.linalg.norm(f.human_v[hum] - f.obj_v[obj], axis=-1)
    speed = jnp.linalg.norm(f.obj_v[obj], axis=-1)
    grip = f.grip[obj]
    contact_term = _k(jnp.maximum(gap - CONTACT_TOL, 0.0), SIGMA_D) * jnp.where(grasp > 0, 0.5 + 0.5 * grip, 1.0)
    contact_ok = (gap <= CONTACT_TOL) & ((grasp <= 0) | (grip > 0))
    terms = [_k(jnp.maximum(gap - dist, 0.0), SIGMA_D), contact_term, contact_term * _k(dv, SIGMA_V),
             (1.0 - grip) * _k(jnp.maximum(dist - gap, 0.0), SIGMA_D), _k(jnp.maximum(dist - gap, 0.0), SIGMA_D),
             _k(speed, SIGMA_V)]
    holds = [gap <= dist + CONTACT_TOL, contact_ok, contact_ok & (dv <= VEL_TOL), (grip <= 0) & (gap >= dist),
             gap >= dist, speed <= VEL_TOL]
    conds = [rel == i for i in range(len(plan_lib.RELATIONS))]
    return jnp.select(conds, terms, 0.0), jnp.select(conds, holds, True)


def subtask_eval(f: Features, p: CompiledPlan) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """For every sub-task (S,): the mean term of its edges and goal, whether all hold, the goal error, and
    (S, E) the per-edge holds."""
    term, holds = edge_eval(f, p.rel, p.hum, p.obj, p.dist, p.grasp)
    real = p.rel >= 0
    g_term, g_holds, g_err = jax.vmap(lambda k, v: goal_eval(f, k, v))(p.goal_kind, p.goal_val)
    has_goal = p.goal_kind != GOAL_NONE
    count = real.sum(-1) + has_goal
    mean = (jnp.where(real, term, 0.0).sum(-1) + jnp.where(has_goal, g_term, 0.0)) / jnp.maximum(count, 1)
    ok = jnp.all(holds | ~real, axis=-1) & g_holds
    return mean, ok, g_err, holds


class Tracker(NamedTuple):
    phase: jax.Array  # () int32: sub-tasks completed, in order
    hold: jax.Array  # () int32: consecutive steps the current sub-task's test has held


def tracker_init() -> Tracker:
    return Tracker(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def rmd_step(f: Features, p: CompiledPlan, tr: Tracker) -> tuple[jax.Array, Tracker, jax.Array]:
    """The compiled RMD reward at the post-step features f: (reward, new tracker, advanced)."""
    mean, ok, _, _ = subtask_eval(f, p)
    active = tr.phase < p.n_sub
    cur = jnp.minimum(tr.phase, S - 1)
    hold = jnp.where(active & ok[cur], tr.hold + 1, 0)
    advanced = active & (hold >= p.hold[cur])
    phase = tr.phase + advanced.astype(jnp.int32)
    hold = jnp.where(advanced, 0, hold)
    n = p.n_sub.astype(jnp.float32)
    shown = jnp.minimum(phase, p.n_sub - 1)
    kept = (phase >= p.n_sub) & ok[shown]  # the completed plan's goal state still holds
    reward = (shown + mean[shown]) / n + kept / n + ADVANCE_BONUS * advanced
    return reward, Tracker(phase, hold), advanced


def coc_step(f: Features, c: CompiledChain, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Chain-of-contacts reward (reward, new index): the current contact's distance kernel, progress idx / n,
    the contact dropped (idx + 1) the step it is met; 1 once the chain is done."""
    i = jnp.minimum(idx, CHAIN - 1)
    gap = f.gap[c.hum[i], c.obj[i]]
    g_term, g_holds, _ = goal_eval(f, c.goal_kind[i], c.goal_val[i])
    term = jnp.where(c.kind[i] == 1, _k(jnp.maximum(gap - CONTACT_TOL, 0.0), SIGMA_D), g_term)
    met = jnp.where(c.kind[i] == 1, gap <= CONTACT_TOL, g_holds) & (idx < c.n)
    n = c.n.astype(jnp.float32)
    new = idx + met.astype(jnp.int32)
    reward = jnp.where(idx >= c.n, 1.0, (idx + term) / n) + ADVANCE_BONUS * met
    return reward, new


HAND_TASKS = ("push", "carry", "open", "open_push")


def hand_reward(f: Features, task: jax.Array, goal_xy: jax.Array, door_target: float = 1.0) -> jax.Array:
    """Hand-engineered rewards, one per task (HAND_TASKS index `task`), written the way a practitioner would:
    weighted distances, grasp and success bonuses, a staged switch for the sequence. Their weights were set by
    hand for these tasks (and not tuned further)."""
    hand_box, hand_handle = f.gap[0, 0], f.gap[0, 1]
    box_err = jnp.linalg.norm(f.obj_p[0] - goal_xy)
    push = -0.5 * hand_box - 1.0 * box_err + 1.0 * (box_err < GOAL_POS_TOL)
    on_table = (f.table_gap <= 0) & (f.box_up > 0)
    carry = (-0.5 * hand_box * (1 - f.grip[0]) + 0.3 * f.grip[0] - 1.0 * jnp.maximum(f.table_gap, 0.0)
             + 1.0 * on_table + 0.5 * on_table * (1 - f.grip[0]))
    opened = f.door >= door_target - GOAL_ANGLE_TOL
    open_ = -0.5 * hand_handle + 0.3 * f.grip[1] + jnp.minimum(f.door, door_target) / door_target + 1.0 * opened
    seq = jnp.where(opened, 5.0 + push, open_)
    return jnp.stack([push, carry, open_, seq])[task]
