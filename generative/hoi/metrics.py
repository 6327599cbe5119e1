"""Evaluation metrics of finished episodes (a batch of final EnvStates from env.py), reward-arm independent: they
read the plan's completion tracker and the scene, never the reward that trained the policy.

- completion: the fraction of episodes whose plan completed (every sub-task's test held for its hold_steps,
  in order; for a multi-step plan this is the in-order completion rate);
- phases_done: the mean fraction of sub-tasks completed;
- stability: the relation-stability ratio, frames in move_with phases where every move_with edge held / all
  frames spent in move_with phases (pooled over episodes);
- final_object_error: the error of the plan's last object goal at the last step (m for the box, rad for the
  door), mean over episodes;
- time_to_completion: seconds to completion, mean over completed episodes (NaN when none completed).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from generative.hoi import env as env_lib
from generative.hoi import rewards, scene2d


def last_goal(task: env_lib.Task) -> tuple[jax.Array, jax.Array]:
    """(kind, value) of the plan's last sub-task that has an object goal (kind 0 when none does)."""
    p = task.plan
    idx = jnp.arange(rewards.S)
    has = (p.goal_kind != rewards.GOAL_NONE) & (idx < p.n_sub)
    last = jnp.max(jnp.where(has, idx, -1))
    i = jnp.maximum(last, 0)
    return jnp.where(last >= 0, p.goal_kind[i], rewards.GOAL_NONE), p.goal_val[i]


def episode_metrics(final: env_lib.EnvState, task: env_lib.Task, dt: float,
                    scene: env_lib.Scene = env_lib.SCENE_2D) -> dict[str, jax.Array]:
    """Metrics over the leading (envs) axis of `final` for one (unbatched) task; jit/vmap friendly."""
    p = task.plan
    done = final.tracker.phase >= p.n_sub
    num, den = final.stable[:, 0].sum(), final.stable[:, 1].sum()
    kind, val = last_goal(task)
    feats = jax.vmap(lambda s: scene2d.features(scene.view(s)))(final.phys)
    _, holds, err = jax.vmap(lambda f: rewards.goal_eval(f, kind, val))(feats)
    t_done = jnp.where(done, final.done_t, 0).sum() / jnp.maximum(done.sum(), 1) * dt
    return {"completion": done.mean(), "phases_done": final.tracker.phase.mean() / p.n_sub,
            "stability": jnp.where(den > 0, num / jnp.maximum(den, 1.0), jnp.nan),
            "final_object_error": err.mean(), "goal_held_at_end": holds.mean(),
            "time_to_completion": jnp.where(done.sum() > 0, t_done, jnp.nan)}


def to_floats(metrics: dict[str, jax.Array]) -> dict[str, float]:
    return {k: float(np.asarray(v)) for k, v in metrics.items()}
