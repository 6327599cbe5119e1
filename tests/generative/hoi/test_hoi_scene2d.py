"""The pure-JAX 2D scene against hand-integrated steps, contacts, grasps and the box's resting state."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from generative.hoi import scene2d as sc

STEP = jax.jit(sc.step, static_argnames=("dt", "substeps"))


def state(**kw):
    z = jnp.zeros(2)
    base = dict(torso_p=jnp.array([-1.5, -1.5]), torso_v=z, q=jnp.array([-2.4, 0.0]), qd=z,
                box_p=jnp.array([1.0, -1.0]), box_v=z, box_up=jnp.float32(0), door=jnp.float32(0),
                door_v=jnp.float32(0), grip_box=jnp.float32(0), grip_handle=jnp.float32(0))
    base.update({k: jnp.asarray(v, jnp.float32) for k, v in kw.items()})
    return sc.Phys(**base)


def test_kinematics():
    q = jnp.array([0.3, -0.7])
    np.testing.assert_allclose(sc.jacobian(q), jax.jacfwd(sc.fk)(q), atol=1e-6)
    np.testing.assert_allclose(sc.fk(jnp.zeros(2)), [sc.L1 + sc.L2, 0.0], atol=1e-6)
    assert float(sc.table_sdf(jnp.asarray(sc.TABLE_C))) == pytest.approx(-min(sc.TABLE_H))
    far = jnp.asarray(sc.TABLE_C) + jnp.array([sc.TABLE_H[0] + 0.3, 0.0])
    assert float(sc.table_sdf(far)) == pytest.approx(0.3, abs=1e-5)


def test_free_motion_matches_hand_integrated_semi_implicit_euler():
    dt, n = 0.05, 4
    h = dt / n
    action = jnp.array([0.5, -0.25, 0.3, -0.1, -1.0])
    s = state(box_v=jnp.array([1.0, 0.5]), torso_v=jnp.array([0.2, 0.0]))
    out = STEP(s, action, dt=dt, substeps=n)
    # hand integration (numpy): no contact is active in this pose
    tp, tv = np.array([-1.5, -1.5]), np.array([0.2, 0.0])
    q, qd = np.array([-2.4, 0.0]), np.zeros(2)
    bp, bv = np.array([1.0, -1.0]), np.array([1.0, 0.5])
    a = np.asarray(action)
    for _ in range(n):
        tv = tv + h * (sc.F_TORSO * a[:2] / sc.M_TORSO - sc.DAMP_TORSO * tv)
        tp = tp + h * tv
        qd = qd + h * (sc.TAU_JOINT * a[2:4] / sc.I_JOINT - sc.DAMP_JOINT * qd)
        q = q + h * qd
        bv = bv + h * (-sc.DAMP_FLOOR * bv)
        bp = bp + h * bv
    for got, want in ((out.torso_p, tp), (out.torso_v, tv), (out.q, q), (out.qd, qd), (out.box_p, bp),
                      (out.box_v, bv)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert float(out.door) == 0.0 and float(out.grip_box) == 0.0


def test_penalty_contact_one_substep_by_hand():
    pen, h = 0.02, 0.01
    reach = sc.L1 + sc.L2
    s = state(torso_p=jnp.zeros(2), q=jnp.zeros(2), box_p=jnp.array([reach + sc.R_HAND + sc.R_BOX - pen, 0.0]))
    out = STEP(s, jnp.array([0.0, 0.0, 0.0, 0.0, -1.0]), dt=h, substeps=1)
    force = sc.K_CONTACT * pen  # on the box along +x, at rest (no damping term)
    np.testing.assert_allclose(out.box_v, [h * force / sc.M_BOX, 0.0], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(out.torso_v, [-h * force / sc.M_TORSO, 0.0], rtol=1e-4, atol=1e-7)
    # the reaction along a straight arm gives no joint torque (J^T f = 0 at q = 0 for f along the arm)
    np.testing.assert_allclose(out.qd, [0.0, 0.0], atol=1e-6)


def test_grasp_carry_release_and_table():
    reach = sc.L1 + sc.L2
    torso = jnp.asarray(sc.TABLE_C) - jnp.array([reach + sc.R_HAND + sc.R_BOX + 0.3, 0.0])
    box = torso + jnp.array([reach + sc.R_HAND + sc.R_BOX + 0.02, 0.0])  # within grip range, not touching
    s = state(torso_p=torso, q=jnp.zeros(2), box_p=box)
    grip = jnp.array([0.0, 0.0, 0.0, 0.0, 1.0])
    s1 = STEP(s, grip)
    assert float(s1.grip_box) == 1.0 and float(s1.box_up) == 1.0
    # walk towards the table: a lifted box passes over the table edge
    walk = jnp.array([1.0, 0.0, 0.0, 0.0, 1.0])
    for _ in range(40):
        s1 = STEP(s1, walk)
    assert float(sc.table_sdf(s1.box_p)) < 0.0, s1.box_p
    placed = STEP(s1, jnp.zeros(5).at[4].set(-1.0))
    assert float(placed.grip_box) == 0.0 and float(placed.box_up) == 1.0  # released over the table: stays up
    off = STEP(placed._replace(box_p=jnp.array([0.0, -1.0])), jnp.zeros(5).at[4].set(-1.0))
    assert float(off.box_up) == 0.0  # not over the table: back on the floor
    # on the floor, the table is a wall: a box pushed into it is pushed back out
    wall = state(box_p=jnp.asarray(sc.TABLE_C) - jnp.array([sc.TABLE_H[0] + sc.R_BOX - 0.05, 0.0]))
    assert float(STEP(wall, jnp.zeros(5).at[4].set(-1.0)).box_v[0]) < 0.0


def test_gripped_handle_opens_the_door():
    hp, _ = sc.handle(jnp.float32(0), jnp.float32(0))
    torso = hp - sc.fk(jnp.array([0.6, 0.6]))
    s = state(torso_p=torso, q=jnp.array([0.6, 0.6]))
    pull = jnp.array([0.0, 1.0, 0.0, 0.0, 1.0])  # grip and walk towards +y (the door opens towards +y)
    for _ in range(10):
        s = STEP(s, pull)
    assert float(s.grip_handle) == 1.0 and float(s.door) > 0.1


def test_vmapped_random_rollout_stays_finite_and_in_the_room():
    keys = jax.random.split(jax.random.key(0), 32)
    s = jax.vmap(sc.reset)(keys)

    @jax.jit
    def roll(s, key):
        def body(s, k):
            a = jax.random.uniform(k, (32, sc.ACTION_DIM), minval=-1, maxval=1)
            return jax.vmap(functools.partial(sc.step))(s, a), None
        return jax.lax.scan(body, s, jax.random.split(key, 60))[0]

    out = roll(s, jax.random.key(1))
    for leaf in jax.tree.leaves(out):
        assert np.all(np.isfinite(leaf))
    assert float(jnp.max(jnp.abs(out.box_p))) < sc.ROOM and float(jnp.max(jnp.abs(out.torso_p))) < sc.ROOM
    assert float(jnp.max(out.door)) <= sc.DOOR_MAX + 0.1
