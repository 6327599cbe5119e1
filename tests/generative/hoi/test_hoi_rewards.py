"""The reward compiler's terms, completion tests and phase tracker on hand-built states; chain-of-contacts."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from generative.hoi import plan as plan_lib
from generative.hoi import rewards
from generative.hoi.planner import TemplatePlanner
from generative.hoi.scene2d import Features

SD, SV = rewards.SIGMA_D, rewards.SIGMA_V
# jitted once: the hand-built states all have the same shapes, so each compiles one time
EDGE, GOAL, SUB = jax.jit(rewards.edge_eval), jax.jit(rewards.goal_eval), jax.jit(rewards.subtask_eval)
RMD, COC, HAND = jax.jit(rewards.rmd_step), jax.jit(rewards.coc_step), jax.jit(rewards.hand_reward)


def feats(*, gap_hand_box=1.0, gap_hand_handle=1.0, hand_v=(0.0, 0.0), box_v=(0.0, 0.0), box_p=(0.0, 0.0),
          grip=(0.0, 0.0), box_up=0.0, table_gap=1.0, door=0.0):
    return Features(human_p=jnp.zeros((2, 2)), human_v=jnp.array([hand_v, (0.0, 0.0)], jnp.float32),
                    obj_p=jnp.array([box_p, (0.0, 0.0)], jnp.float32),
                    obj_v=jnp.array([box_v, (0.0, 0.0)], jnp.float32),
                    gap=jnp.array([[gap_hand_box, gap_hand_handle], [2.0, 2.0]], jnp.float32),
                    grip=jnp.array(grip, jnp.float32), box_up=jnp.float32(box_up), table_gap=jnp.float32(table_gap),
                    door=jnp.float32(door))


def edge(f, relation, distance=0.0, grasp=0.0, obj=0):
    t, h = EDGE(f, jnp.int32(rewards.REL[relation]), jnp.int32(0), jnp.int32(obj),
                             jnp.float32(distance), jnp.float32(grasp))
    return float(t), bool(h)


def test_edge_terms_against_the_formulas():
    f = feats(gap_hand_box=0.7, hand_v=(0.3, 0.0), box_v=(0.0, 0.4))
    assert edge(f, "approach", 0.2) == (pytest.approx(math.exp(-0.5 / SD), 1e-5), False)
    assert edge(f, "approach", 0.66)[1]  # within the contact tolerance of d*
    contact = math.exp(-(0.7 - rewards.CONTACT_TOL) / SD)
    assert edge(f, "contact") == (pytest.approx(contact, 1e-5), False)
    assert edge(f, "contact", grasp=1.0)[0] == pytest.approx(0.5 * contact, 1e-5)  # no grip: half
    assert edge(f, "move_with")[0] == pytest.approx(contact * math.exp(-0.5 / SV), 1e-5)  # |dv| = 0.5
    assert edge(f, "keep_distance", 1.0) == (pytest.approx(math.exp(-0.3 / SD), 1e-5), False)
    assert edge(f, "release", 0.5) == (pytest.approx(1.0), True)
    assert edge(f, "hold_still") == (pytest.approx(math.exp(-0.4 / SV), 1e-5), False)
    touching = feats(gap_hand_box=0.01, hand_v=(0.5, 0.0), box_v=(0.45, 0.0), grip=(1.0, 0.0))
    assert edge(touching, "contact", grasp=1.0) == (pytest.approx(1.0), True)
    assert edge(touching, "move_with", grasp=1.0)[1]
    assert edge(touching, "release", 0.05) == (0.0, False)  # still gripping
    assert not edge(feats(gap_hand_box=0.01, hand_v=(1.0, 0.0)), "move_with")[1]  # contact, but sliding past


def test_goal_terms():
    kinds = rewards
    term, holds, err = GOAL(feats(box_p=(0.3, 0.4)), jnp.int32(kinds.GOAL_POSITION), jnp.zeros(2))
    assert (float(term), bool(holds), float(err)) == (pytest.approx(math.exp(-0.5 / SD), 1e-5), False,
                                                     pytest.approx(0.5))
    assert bool(GOAL(feats(box_p=(0.1, 0.0)), jnp.int32(kinds.GOAL_POSITION), jnp.zeros(2))[1])
    on = GOAL(feats(table_gap=-0.1, box_up=1.0), jnp.int32(kinds.GOAL_TABLE), jnp.zeros(2))
    assert float(on[0]) == pytest.approx(1.0) and bool(on[1])
    assert not bool(GOAL(feats(table_gap=-0.1, box_up=0.0), jnp.int32(kinds.GOAL_TABLE),
                                      jnp.zeros(2))[1])
    door = GOAL(feats(door=0.5), jnp.int32(kinds.GOAL_DOOR), jnp.array([1.0, 0.0]))
    assert float(door[0]) == pytest.approx(math.exp(-0.5 / rewards.SIGMA_A), 1e-5) and not bool(door[1])
    assert bool(GOAL(feats(door=0.95), jnp.int32(kinds.GOAL_DOOR), jnp.array([1.0, 0.0]))[1])


def test_compiled_plan_arrays_and_subtask_tests():
    p = rewards.compile_plan(TemplatePlanner()("carry box to table"))
    assert int(p.n_sub) == 3 and p.rel.shape == (plan_lib.MAX_SUBTASKS, plan_lib.MAX_EDGES)
    assert p.rel[0, 0] == rewards.REL["approach"] and p.rel[0, 1] == -1 and p.rel[3, 0] == -1
    assert list(np.asarray(p.goal_kind[:3])) == [rewards.GOAL_NONE, rewards.GOAL_TABLE, rewards.GOAL_TABLE]
    carrying = feats(gap_hand_box=0.0, hand_v=(0.2, 0.0), box_v=(0.2, 0.0), grip=(1.0, 0.0), box_up=1.0,
                     table_gap=-0.05)
    mean, ok, _, holds = SUB(carrying, p)
    assert list(np.asarray(ok[:3])) == [True, True, False]  # placing needs the grip released
    assert float(mean[1]) == pytest.approx(1.0, 1e-5)  # contact 1, move_with 1, goal 1
    placed = carrying._replace(grip=jnp.zeros(2), gap=carrying.gap.at[0, 0].set(0.1))
    assert bool(SUB(placed, p)[1][2])


def test_tracker_advances_in_order_after_hold_steps():
    plan = plan_lib.validate({"subtasks": [
        {"edges": [{"human": "hand", "object": "box", "relation": "approach"}], "hold_steps": 2},
        {"edges": [], "goal": {"object": "door", "angle": 1.0}, "hold_steps": 1}]})
    p = rewards.compile_plan(plan)
    tr = rewards.tracker_init()
    near = feats(gap_hand_box=0.0)
    r1, tr, adv = RMD(near, p, tr)
    assert (int(tr.phase), int(tr.hold), bool(adv)) == (0, 1, False)
    assert float(r1) == pytest.approx((0 + 1.0) / 2)
    # the door goal alone does not count while the first sub-task is current (in order)
    _, tr_skip, _ = RMD(feats(door=1.2), p, rewards.tracker_init())
    assert int(tr_skip.phase) == 0
    r2, tr, adv = RMD(near, p, tr)
    assert (int(tr.phase), int(tr.hold), bool(adv)) == (1, 0, True)
    door_term = math.exp(-1.0 / rewards.SIGMA_A)
    assert float(r2) == pytest.approx((1 + door_term) / 2 + rewards.ADVANCE_BONUS, 1e-5)
    r3, tr, _ = RMD(feats(door=1.0), p, tr)
    assert int(tr.phase) == 2 and float(r3) == pytest.approx((1 + 1.0) / 2 + 0.5 + rewards.ADVANCE_BONUS, 1e-5)
    r4, tr, adv = RMD(feats(door=1.0), p, tr)
    assert int(tr.phase) == 2 and not bool(adv) and float(r4) == pytest.approx(1.5, 1e-5)
    # the completed plan's goal state is not kept (the door swung back): the completion 1 / n is not paid
    r5, tr, _ = RMD(feats(door=0.5), p, tr)
    assert int(tr.phase) == 2 and float(r5) == pytest.approx((1 + math.exp(-0.5 / rewards.SIGMA_A)) / 2, 1e-5)


def test_chain_of_contacts_drops_each_contact_once_met():
    plan = TemplatePlanner()("push box to (0.5, 0.5)")  # reach, push (contact, move_with, goal), settle (goal)
    c = rewards.compile_chain(plan)
    assert int(c.n) == 3 and list(np.asarray(c.kind[:4])) == [1, 2, 2, 0]  # hand-box contact, the goal twice
    touching = feats(gap_hand_box=0.0, box_p=(0.0, 0.0))
    r, idx = COC(touching, c, jnp.int32(0))
    assert int(idx) == 1 and float(r) == pytest.approx(1 / 3 + rewards.ADVANCE_BONUS, 1e-5)
    # once dropped, losing contact costs nothing: only the goal contact is rewarded
    away = feats(gap_hand_box=2.0, box_p=(0.0, 0.0))
    far = math.exp(-math.sqrt(0.5) / SD)
    r, idx = COC(away, c, idx)
    assert int(idx) == 1 and float(r) == pytest.approx((1 + far) / 3, 1e-5)
    r, idx = COC(feats(box_p=(0.5, 0.45)), c, idx)
    assert int(idx) == 2
    r, idx = COC(away, c, idx)  # no holding: the box left its goal, only the next contact's kernel is paid
    assert int(idx) == 2 and float(r) == pytest.approx((2 + far) / 3, 1e-5)
    r, idx = COC(feats(box_p=(0.5, 0.5)), c, idx)
    r, idx = COC(away, c, idx)
    assert int(idx) == 3 and float(r) == 1.0


def test_hand_rewards_by_task():
    goal = jnp.array([0.7, -0.8])
    f = feats(gap_hand_box=0.4, box_p=(0.7, -0.5))
    assert float(HAND(f, jnp.int32(0), goal)) == pytest.approx(-0.2 - 0.3, 1e-5)
    opened = feats(gap_hand_handle=0.0, door=1.0, grip=(0.0, 1.0))
    assert float(HAND(opened, jnp.int32(2), goal)) == pytest.approx(0.3 + 1.0 + 1.0, 1e-5)
    # the sequence switches from the door reward to 5 + the push reward once the door is open
    assert float(HAND(opened, jnp.int32(3), goal)) == pytest.approx(
        5.0 + float(HAND(opened, jnp.int32(0), goal)), 1e-5)
