"""The pure-JAX 2D scene (top-down): a torso (a driven disc) with a 2-link arm ending in a gripper hand, a box
(a disc that slides on the floor), a table (a static rectangle) and a hinged door (articulated), with penalty
contacts and semi-implicit Euler integration. Every function is pure and vmaps over environments.

Dynamics (all SI units; constants below):
- torso: m_t a = F_act + F_contacts + F_hand (the arm passes the hand's contact forces to the torso), minus
  linear ground damping; arm joints: I_j qdd = tau_act + J^T F_hand - c_j qd (massless links, joint inertia);
- box: m_b a = F, damped by the floor (on the floor), by air (grasped: a grasped box is lifted clear of the table)
  or by the table top (resting on the table); on the floor the table is a wall (penalty contact on its signed
  distance), so a box reaches the table top only by being carried;
- door: I_d thdd = (handle - hinge) x F_handle - c_d thd, with penalty joint limits [0, DOOR_MAX];
- contacts: hand-box, torso-box, hand-handle, torso-table, box-table, room walls: force
  max(0, k pen - c v_n) n; a grasp (action[4] > 0 within GRIP_RANGE) is a spring-damper from the hand to the
  box surface or to the handle, held until the grip is released.
Per environment step: `substeps` steps of h = dt / substeps of v += h a(x, v); x += h v.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

# geometry (m)
ROOM = 2.4  # walls at +-ROOM
R_TORSO, R_HAND, R_BOX, R_HANDLE = 0.25, 0.06, 0.2, 0.05
L1, L2 = 0.45, 0.4
TABLE_C, TABLE_H = (0.9, 0.9), (0.45, 0.3)  # centre, half sizes
HINGE, DOOR_LEN, HANDLE_AT, DOOR_MAX = (-1.4, 0.5), 0.9, 0.8, 1.6  # door closed along +x, opens towards +y
GRIP_RANGE = 0.08
# dynamics
M_TORSO, M_BOX, I_JOINT, I_DOOR = 5.0, 2.0, 0.2, 0.3
F_TORSO, TAU_JOINT = 20.0, 4.0  # action scales (N, N m)
DAMP_TORSO, DAMP_JOINT, DAMP_DOOR = 2.0, 2.0, 1.0
DAMP_FLOOR, DAMP_AIR, DAMP_TABLE = 2.0, 0.5, 8.0
K_CONTACT, C_CONTACT, K_GRIP, C_GRIP, K_LIMIT = 400.0, 20.0, 300.0, 20.0, 60.0
ACTION_DIM = 5  # torso force (2), joint torques (2), grip


class Phys(NamedTuple):
    torso_p: jax.Array  # (2,)
    torso_v: jax.Array
    q: jax.Array  # (2,) shoulder angle (world), elbow angle (relative)
    qd: jax.Array
    box_p: jax.Array
    box_v: jax.Array
    box_up: jax.Array  # () 1: grasped or resting on the table
    door: jax.Array  # () opening angle
    door_v: jax.Array
    grip_box: jax.Array  # () 1 while the hand grasps the box
    grip_handle: jax.Array


class Features(NamedTuple):
    """What the reward compiler reads, from any scene (scene2d or scene_mjx). Parts: human (hand, torso),
    object (box, handle); gap[i, j] = surface distance between human part i and object part j (>= 0)."""

    human_p: jax.Array  # (2, 2)
    human_v: jax.Array
    obj_p: jax.Array  # (2, 2)
    obj_v: jax.Array
    gap: jax.Array  # (2, 2)
    grip: jax.Array  # (2,) gripper engaged on (box, handle)
    box_up: jax.Array  # ()
    table_gap: jax.Array  # () signed distance of the box centre to the table top (<= 0: over the table)
    door: jax.Array  # ()


def fk(q: jax.Array) -> jax.Array:
    """Hand offset from the shoulder (= torso centre) for joint angles q (2,)."""
    a1, a12 = q[0], q[0] + q[1]
    return jnp.stack([L1 * jnp.cos(a1) + L2 * jnp.cos(a12), L1 * jnp.sin(a1) + L2 * jnp.sin(a12)])


def jacobian(q: jax.Array) -> jax.Array:
    """d fk / d q (2, 2)."""
    a1, a12 = q[0], q[0] + q[1]
    return jnp.array([[-L1 * jnp.sin(a1) - L2 * jnp.sin(a12), -L2 * jnp.sin(a12)],
                      [L1 * jnp.cos(a1) + L2 * jnp.cos(a12), L2 * jnp.cos(a12)]])


def door_dir(theta: jax.Array) -> jax.Array:
    return jnp.stack([jnp.cos(theta), jnp.sin(theta)])


def handle(theta: jax.Array, theta_v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Handle position and velocity for door angle theta."""
    d = door_dir(theta)
    p = jnp.asarray(HINGE) + HANDLE_AT * d
    v = HANDLE_AT * theta_v * jnp.stack([-d[1], d[0]])
    return p, v


def table_sdf(p: jax.Array) -> jax.Array:
    """Signed distance of point p to the table rectangle (< 0 inside)."""
    d = jnp.abs(p - jnp.asarray(TABLE_C)) - jnp.asarray(TABLE_H)
    outside = jnp.linalg.norm(jnp.maximum(d, 0.0) + 1e-12)
    return outside + jnp.minimum(jnp.max(d), 0.0)


_table_normal = jax.grad(table_sdf)


def _pair_penalty(pa, va, pb, vb, radius):
    """Penalty force on b from a contact between discs a and b (radius = r_a + r_b)."""
    delta = pb - pa
    dist = jnp.sqrt(jnp.sum(delta * delta) + 1e-12)
    n = delta / dist
    pen = radius - dist
    vn = jnp.dot(vb - va, n)
    mag = jnp.where(pen > 0, jnp.maximum(0.0, K_CONTACT * pen - C_CONTACT * vn), 0.0)
    return mag * n


def _wall_penalty(p, v, radius):
    """Room walls on a disc at p."""
    over_hi = p + radius - ROOM
    over_lo = -ROOM - (p - radius)
    f_hi = jnp.where(over_hi > 0, -jnp.maximum(0.0, K_CONTACT * over_hi + C_CONTACT * v), 0.0)
    f_lo = jnp.where(over_lo > 0, jnp.maximum(0.0, K_CONTACT * over_lo - C_CONTACT * v), 0.0)
    return f_hi + f_lo


def _table_penalty(p, v, radius):
    sdf = table_sdf(p)
    n = _table_normal(p)
    pen = radius - sdf
    mag = jnp.where(pen > 0, jnp.maximum(0.0, K_CONTACT * pen - C_CONTACT * jnp.dot(v, n)), 0.0)
    return mag * n


def grip_spring(hand_p, hand_v, p, v, rest):
    """Spring-damper force on the held point (rest length `rest`) from the hand."""
    delta = p - hand_p
    dist = jnp.sqrt(jnp.sum(delta * delta) + 1e-12)
    return -K_GRIP * (dist - rest) * delta / dist - C_GRIP * (v - hand_v)


def _substep(s: Phys, action: jax.Array, h: float) -> Phys:
    hand_off, J = fk(s.q), jacobian(s.q)
    hand_p = s.torso_p + hand_off
    hand_v = s.torso_v + J @ s.qd
    hp, hv = handle(s.door, s.door_v)
    # box: grasp spring or hand penalty, torso penalty, walls, the table wall while on the floor
    f_hand_box = jnp.where(s.grip_box > 0, grip_spring(hand_p, hand_v, s.box_p, s.box_v, R_BOX),
                           _pair_penalty(hand_p, hand_v, s.box_p, s.box_v, R_HAND + R_BOX))
    f_torso_box = _pair_penalty(s.torso_p, s.torso_v, s.box_p, s.box_v, R_TORSO + R_BOX)
    f_box = f_hand_box + f_torso_box + _wall_penalty(s.box_p, s.box_v, R_BOX)
    f_box = f_box + jnp.where(s.box_up > 0, 0.0, 1.0) * _table_penalty(s.box_p, s.box_v, R_BOX)
    on_table = (s.box_up > 0) & (s.grip_box <= 0)
    damp_box = jnp.where(s.grip_box > 0, DAMP_AIR, jnp.where(on_table, DAMP_TABLE, DAMP_FLOOR))
    # door handle: grasp spring (rest 0) or hand penalty
    f_handle = jnp.where(s.grip_handle > 0, grip_spring(hand_p, hand_v, hp, hv, 0.0),
                         _pair_penalty(hand_p, hand_v, hp, hv, R_HAND + R_HANDLE))
    lever = hp - jnp.asarray(HINGE)
    tau_door = lever[0] * f_handle[1] - lever[1] * f_handle[0]
    tau_door = tau_door - K_LIMIT * jnp.minimum(s.door, 0.0) - K_LIMIT * jnp.maximum(s.door - DOOR_MAX, 0.0)
    # the human: reactions on the hand go through the arm to the joints and the torso
    f_on_hand = -f_hand_box - f_handle
    f_torso = (F_TORSO * action[:2] - f_torso_box + f_on_hand + _wall_penalty(s.torso_p, s.torso_v, R_TORSO)
               + _table_penalty(s.torso_p, s.torso_v, R_TORSO))
    tau = TAU_JOINT * action[2:4] + J.T @ f_on_hand
    # semi-implicit Euler
    torso_v = s.torso_v + h * (f_torso / M_TORSO - DAMP_TORSO * s.torso_v)
    qd = s.qd + h * (tau / I_JOINT - DAMP_JOINT * s.qd)
    box_v = s.box_v + h * (f_box / M_BOX - damp_box * s.box_v)
    door_v = s.door_v + h * (tau_door / I_DOOR - DAMP_DOOR * s.door_v)
    return s._replace(torso_p=s.torso_p + h * torso_v, torso_v=torso_v, q=s.q + h * qd, qd=qd,
                      box_p=s.box_p + h * box_v, box_v=box_v, door=s.door + h * door_v, door_v=door_v)


def update_grip(s: Phys, grip_cmd: jax.Array) -> Phys:
    """Engage the gripper on the box or the handle when commanded within GRIP_RANGE; release when not commanded.
    A grasp already held stays on its object."""
    hand_p = s.torso_p + fk(s.q)
    hp, _ = handle(s.door, s.door_v)
    near_box = jnp.linalg.norm(hand_p - s.box_p) - R_BOX - R_HAND <= GRIP_RANGE
    near_handle = jnp.linalg.norm(hand_p - hp) - R_HANDLE - R_HAND <= GRIP_RANGE
    on = grip_cmd > 0
    holding = (s.grip_box > 0) | (s.grip_handle > 0)
    grip_box = on & ((s.grip_box > 0) | (~holding & near_box))
    grip_handle = on & ((s.grip_handle > 0) | (~holding & ~near_box & near_handle))
    return s._replace(grip_box=grip_box.astype(jnp.float32), grip_handle=grip_handle.astype(jnp.float32))


def step(s: Phys, action: jax.Array, *, dt: float = 0.05, substeps: int = 4) -> Phys:
    """One environment step: the grip update, `substeps` semi-implicit Euler steps under action (5,) in
    [-1, 1] (clipped here), then the box's resting state (lifted / on the table / on the floor)."""
    action = jnp.clip(action, -1.0, 1.0)
    s = update_grip(s, action[4])
    h = dt / substeps
    s = jax.lax.fori_loop(0, substeps, lambda _, x: _substep(x, action, h), s)
    up = (s.grip_box > 0) | ((s.box_up > 0) & (table_sdf(s.box_p) <= 0.0))
    return s._replace(box_up=up.astype(jnp.float32))


def reset(key: jax.Array, *, torso=(-0.6, -0.6), box=(0.0, -0.2), spread: float = 0.15) -> Phys:
    """A start state: torso and box placed uniformly within +-spread of their nominal positions, a random arm
    pose, the door closed, nothing grasped."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    z2 = jnp.zeros(2)
    q = jnp.stack([jax.random.uniform(k3, (), minval=-math.pi, maxval=math.pi),
                   jax.random.uniform(k4, (), minval=-1.0, maxval=1.0)])
    return Phys(torso_p=jnp.asarray(torso) + jax.random.uniform(k1, (2,), minval=-spread, maxval=spread),
                torso_v=z2, q=q, qd=z2,
                box_p=jnp.asarray(box) + jax.random.uniform(k2, (2,), minval=-spread, maxval=spread), box_v=z2,
                box_up=jnp.zeros(()), door=jnp.zeros(()), door_v=jnp.zeros(()), grip_box=jnp.zeros(()),
                grip_handle=jnp.zeros(()))


def features(s: Phys) -> Features:
    hand_p = s.torso_p + fk(s.q)
    hand_v = s.torso_v + jacobian(s.q) @ s.qd
    hp, hv = handle(s.door, s.door_v)
    human_p = jnp.stack([hand_p, s.torso_p])
    obj_p = jnp.stack([s.box_p, hp])
    radii_h = jnp.array([R_HAND, R_TORSO])
    radii_o = jnp.array([R_BOX, R_HANDLE])
    centre = jnp.sqrt(jnp.sum((human_p[:, None] - obj_p[None]) ** 2, -1) + 1e-12)
    gap = jnp.maximum(centre - radii_h[:, None] - radii_o[None], 0.0)
    return Features(human_p=human_p, human_v=jnp.stack([hand_v, s.torso_v]), obj_p=obj_p,
                    obj_v=jnp.stack([s.box_v, hv]), gap=gap, grip=jnp.stack([s.grip_box, s.grip_handle]),
                    box_up=s.box_up, table_gap=table_sdf(s.box_p), door=s.door)
