"""PPO, purejaxrl-style: the whole update (rollout, GAE, epochs of minibatch steps) in one jit, `vmap` over
runs (seed x task x reward arm: a task is data, so every run shares one compile). GAE and the clipped losses are
core.rl's (`core.rl.advantages.gae`, `core.rl.losses.clipped_surrogate` / `value_loss`) on (envs, steps)
arrays: each rollout is one whole episode of `horizon` steps (episodes reset every update), so the end of a
row is the end of the episode and no bootstrap value is needed; the observation carries the time fraction.

Policy: a Gaussian with a state-independent log std over 5 actions in [-1, 1] (the env clips), tanh MLPs
(nnx, split once into a pure graphdef + params).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from core.rl.advantages import gae, masked_whiten
from core.rl.losses import clipped_surrogate, value_loss
from generative.hoi import env as env_lib
from generative.hoi import metrics as metrics_lib
from generative.hoi.configs import HOIConfig
from generative.hoi.scene2d import ACTION_DIM


class ActorCritic(nnx.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden: int, *, rngs: nnx.Rngs):
        orth = nnx.initializers.orthogonal
        self.pi1 = nnx.Linear(obs_dim, hidden, kernel_init=orth(math.sqrt(2)), rngs=rngs)
        self.pi2 = nnx.Linear(hidden, hidden, kernel_init=orth(math.sqrt(2)), rngs=rngs)
        self.pi_out = nnx.Linear(hidden, act_dim, kernel_init=orth(0.01), rngs=rngs)
        self.v1 = nnx.Linear(obs_dim, hidden, kernel_init=orth(math.sqrt(2)), rngs=rngs)
        self.v2 = nnx.Linear(hidden, hidden, kernel_init=orth(math.sqrt(2)), rngs=rngs)
        self.v_out = nnx.Linear(hidden, 1, kernel_init=orth(1.0), rngs=rngs)
        self.log_std = nnx.Param(jnp.zeros(act_dim))

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """obs (..., obs_dim) -> (action mean, log std (act_dim,), value (...))."""
        h = jnp.tanh(self.pi2(jnp.tanh(self.pi1(obs))))
        v = jnp.tanh(self.v2(jnp.tanh(self.v1(obs))))
        return self.pi_out(h), self.log_std[...], self.v_out(v)[..., 0]


def gaussian_logp(x: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """Sum over the last axis of the diagonal Gaussian log density."""
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


class RunState(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array
    update: jax.Array  # () int32


class Rollout(NamedTuple):
    obs: jax.Array  # (T, N, obs_dim)
    action: jax.Array
    logp: jax.Array  # (T, N)
    value: jax.Array
    reward: jax.Array


def make_train(config: HOIConfig):
    """(init(key, task) -> RunState, chunk(RunState, task) -> (RunState, metrics (chunk,)), evaluate(params, task,
    key) -> (final EnvState, rewards (T, N), first episode's states), apply(params, obs)), each a pure function
    of one run; vmap them over runs."""
    c = config
    scene = env_lib.make_scene(c.scene)
    model = ActorCritic(env_lib.OBS_DIM, ACTION_DIM, c.hidden, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(model)
    total_steps = c.n_updates * c.epochs * c.minibatches
    lr = optax.linear_schedule(c.lr, 0.0, total_steps) if c.anneal_lr else c.lr
    tx = optax.chain(optax.clip_by_global_norm(c.max_grad_norm), optax.adam(lr, eps=1e-5))
    T, N = c.horizon, c.n_envs
    batch = T * N
    mb = batch // c.minibatches

    def apply(params, obs):
        return nnx.merge(graphdef, params)(obs)

    def init(key: jax.Array, task: env_lib.Task) -> RunState:
        del task
        k_model, key = jax.random.split(key)
        params = nnx.state(ActorCritic(env_lib.OBS_DIM, ACTION_DIM, c.hidden, rngs=nnx.Rngs(k_model)))
        return RunState(params, tx.init(params), key, jnp.zeros((), jnp.int32))

    def rollout(params, task, key, n_envs, deterministic):
        k_reset, k_act = jax.random.split(key)
        s, obs = jax.vmap(lambda k: env_lib.reset(k, task, T, scene))(jax.random.split(k_reset, n_envs))

        def body(carry, k):
            s, obs = carry
            mean, log_std, value = apply(params, obs)
            noise = jax.random.normal(k, mean.shape)
            action = mean if deterministic else mean + jnp.exp(log_std) * noise
            logp = gaussian_logp(action, mean, log_std)
            s, obs2, reward = jax.vmap(lambda s, a: env_lib.step(s, a, task, T, dt=c.dt, substeps=c.substeps,
                                                                 scene=scene))(s, action)
            first = scene.view(jax.tree.map(lambda x: x[0], s.phys))  # the first episode, for the frame strip
            return (s, obs2), (Rollout(obs, action, logp, value, reward), first)

        (s, _), (traj, phys0) = jax.lax.scan(body, (s, obs), jax.random.split(k_act, T))
        return s, traj, phys0

    def loss_fn(params, mb_data):
        obs, action, old_logp, old_value, adv, ret = mb_data
        mean, log_std, value = apply(params, obs)
        logp = gaussian_logp(action, mean, log_std)
        ones = jnp.ones((1, obs.shape[0]), bool)
        adv = masked_whiten(adv[None], ones)
        pg, clip_frac = clipped_surrogate(logp[None], old_logp[None], adv, ones, clip_low=c.clip)
        pg = pg.mean()
        vf = value_loss(value[None], old_value[None], ret[None], ones, clip=c.clip)
        entropy = jnp.sum(log_std + 0.5 * math.log(2 * math.pi * math.e))
        return pg + c.vf_coef * vf - c.ent_coef * entropy, {"pg_loss": pg, "v_loss": vf, "clip_frac": clip_frac,
                                                            "entropy": entropy}

    def update(rs: RunState, task: env_lib.Task) -> tuple[RunState, dict[str, jax.Array]]:
        key, k_roll, k_perm = jax.random.split(jax.random.fold_in(rs.key, rs.update), 3)
        final, traj, _ = rollout(rs.params, task, k_roll, N, False)
        # core.rl.gae over (envs, steps) rows: each row is one episode, terminal at its end
        adv, ret = gae(traj.reward.T, traj.value.T, jnp.ones((N, T), bool), gamma=c.gamma, lam=c.lam)
        flat = (traj.obs.reshape(batch, -1), traj.action.reshape(batch, -1), traj.logp.reshape(batch),
                traj.value.reshape(batch), adv.T.reshape(batch), ret.T.reshape(batch))

        def epoch(carry, k):
            params, opt_state = carry
            perm = jax.random.permutation(k, batch)
            shuffled = jax.tree.map(lambda x: x[perm].reshape(c.minibatches, mb, *x.shape[1:]), flat)

            def minibatch(carry, data):
                params, opt_state = carry
                (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, data)
                updates, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), {"loss": loss, **aux}

            return jax.lax.scan(minibatch, (params, opt_state), shuffled)

        (params, opt_state), aux = jax.lax.scan(epoch, (rs.params, rs.opt_state), jax.random.split(k_perm, c.epochs))
        metrics = {k: v.mean() for k, v in aux.items()}
        metrics["reward"] = traj.reward.sum(0).mean()  # undiscounted episode return of this arm's reward
        metrics.update(metrics_lib.episode_metrics(final, task, c.dt, scene))
        return RunState(params, opt_state, key, rs.update + 1), metrics

    def chunk(rs: RunState, task: env_lib.Task):
        return jax.lax.scan(lambda r, _: update(r, task), rs, None, length=c.chunk)

    def evaluate(params, task: env_lib.Task, key: jax.Array):
        """Mean-action episodes on eval_envs fresh starts: (final EnvState, rewards (T, N), the first episode's
        scene states (T, ...) for the frame strip)."""
        final, traj, phys0 = rollout(params, task, key, c.eval_envs, True)
        return final, traj.reward, phys0

    return init, chunk, evaluate, apply

