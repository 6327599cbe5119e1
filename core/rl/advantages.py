"""Advantages and returns for policy-gradient RL on token sequences: GRPO / Dr.GRPO / RLOO group baselines,
token-level process rewards with turn-level normalisation, return-to-go and GAE over policy tokens only.

Every function is pure, has static shapes and runs under `jax.jit` (the string options are static). Group
statistics use `jax.ops.segment_sum` over integer group ids in [0, num_groups), so groups may have any size
(a singleton included) and rows may come in any order. Sequences are right-padded (N, L) rows whose
`policy_mask` marks the tokens the policy generated; observation (tool output) and padding tokens are
skipped by the recursions, never reset them (verl's multi-turn GAE; the bug fixed in verl PR #6376).

Conventions (see core/rl/README.md for the mapping to TRL / verl / OpenRLHF / tunix option names):
every library divides by (std + eps) with the unbiased std (ddof 1); they differ in eps and in what a group
of one gets. `CONVENTIONS` holds each library's values; the default is verl's.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Convention(NamedTuple):
    """ddof and eps of the group std in (r - mean) / (std + eps); singleton: what a group of one row gets
    ("keep": mean 0 and std 1, so the reward itself (verl); "zero": advantage 0)."""

    ddof: int
    eps: float
    singleton: str


CONVENTIONS: dict[str, Convention] = {
    # verl core_algos.compute_grpo_outcome_advantage: torch.std (unbiased), epsilon=1e-6, a group of one gets
    # mean 0 and std 1; compute_rloo_outcome_advantage leaves a lone reward unchanged.
    "verl": Convention(ddof=1, eps=1e-6, singleton="keep"),
    # TRL GRPOTrainer: nanstd (Bessel-corrected), `+ 1e-4`; num_generations == 1 gives std 0 and
    # advantage r - r = 0 (RLOOTrainer: nan_to_num of 0/0 = 0).
    "trl": Convention(ddof=1, eps=1e-4, singleton="zero"),
    # OpenRLHF experience_maker "group_norm": torch.std (unbiased) + 1e-9. A group of one is NaN there
    # (std of one sample); we give it 0.
    "openrlhf": Convention(ddof=1, eps=1e-9, singleton="zero"),
    # tunix algo_core.compute_advantages: numpy std(ddof=1) + 1e-6 (NaN for one sample; we give 0);
    # compute_rloo_advantages returns zeros when num_generations < 2.
    "tunix": Convention(ddof=1, eps=1e-6, singleton="zero"),
}

MODES = ("grpo", "dr_grpo", "rloo")
SCALES = ("group", "batch", "none")
SINGLETONS = ("keep", "zero")


def _resolve(convention: str, ddof: int | None, eps: float | None, singleton: str | None) -> Convention:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention={convention!r}: expected one of {sorted(CONVENTIONS)}")
    c = CONVENTIONS[convention]
    c = Convention(ddof=c.ddof if ddof is None else ddof, eps=c.eps if eps is None else eps,
                   singleton=c.singleton if singleton is None else singleton)
    if c.ddof not in (0, 1):
        raise ValueError(f"ddof={c.ddof}: expected 0 or 1")
    if not c.eps >= 0:
        raise ValueError(f"eps={c.eps}: expected >= 0")
    if c.singleton not in SINGLETONS:
        raise ValueError(f"singleton={c.singleton!r}: expected one of {SINGLETONS}")
    return c


def _check_groups(group, n: int, num_groups: int) -> None:
    if group.shape != (n,):
        raise ValueError(f"group shape {group.shape}: expected ({n},), one id per row")
    if num_groups < 1:
        raise ValueError(f"num_groups={num_groups}: expected >= 1")
    if not isinstance(group, jax.core.Tracer):  # ids can be range-checked only when concrete
        g = np.asarray(group)
        if g.size and (g.min() < 0 or g.max() >= num_groups):
            raise ValueError(f"group ids in [{g.min()}, {g.max()}]: expected ids in [0, num_groups={num_groups})")


def _segment_stats(x: jax.Array, group: jax.Array, valid: jax.Array, num_groups: int, ddof: int):
    """Per-row (count, mean, std) of the row's group over valid rows, each (N,)."""
    w = valid.astype(jnp.float32)
    count = jax.ops.segment_sum(w, group, num_groups)
    mean = jax.ops.segment_sum(x * w, group, num_groups) / jnp.maximum(count, 1.0)
    dev = (x - mean[group]) * w
    var = jax.ops.segment_sum(dev * dev, group, num_groups) / jnp.maximum(count - ddof, 1.0)
    return count[group], mean[group], jnp.sqrt(var)[group]


def group_advantages(rewards: jax.typing.ArrayLike, group: jax.typing.ArrayLike, *, num_groups: int,
                     mode: str = "grpo", scale: str | None = None, convention: str = "verl",
                     ddof: int | None = None, eps: float | None = None, singleton: str | None = None,
                     valid: jax.typing.ArrayLike | None = None) -> jax.Array:
    """Sequence advantages (N,) from rewards (N,) with a per-group baseline; rows sharing an id in `group`
    (N,) int in [0, num_groups) are one prompt's samples.

    mode "grpo": (r - mean_g) / (std + eps), std of the group (scale "group", the default), of the whole batch
    (scale "batch": TRL's scale_rewards="batch") or no division (scale "none"). mode "dr_grpo": r - mean_g
    (Dr.GRPO, arXiv 2503.20783; = grpo with scale "none"). mode "rloo": r minus the mean of the group's other
    rows, = (r - mean_g) * n / (n - 1). ddof / eps / singleton default to `CONVENTIONS[convention]`.
    valid (N,) bool: rows that count (others get advantage 0 and are left out of every statistic, e.g. a
    row every reward function failed on, as TRL does with NaN rewards).
    """
    c = _resolve(convention, ddof, eps, singleton)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")
    if scale is None:
        scale = "group" if mode == "grpo" else "none"
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}: expected one of {SCALES}")
    if mode != "grpo" and scale != "none":
        raise ValueError(f"scale={scale!r} with mode={mode!r}: expected scale 'none' (only grpo divides by a std)")
    r = jnp.asarray(rewards, jnp.float32)
    if r.ndim != 1:
        raise ValueError(f"rewards shape {r.shape}: expected (N,)")
    group = jnp.asarray(group)
    _check_groups(group, r.shape[0], num_groups)
    valid = jnp.ones(r.shape, bool) if valid is None else jnp.asarray(valid).astype(bool)
    if valid.shape != r.shape:
        raise ValueError(f"valid shape {valid.shape}: expected {r.shape}")
    return _group_advantages(r, group.astype(jnp.int32), valid, num_groups=num_groups, mode=mode, scale=scale,
                             c=c)


@functools.partial(jax.jit, static_argnames=("num_groups", "mode", "scale", "c"))
def _group_advantages(r: jax.Array, group: jax.Array, valid: jax.Array, *, num_groups: int, mode: str,
                      scale: str, c: Convention) -> jax.Array:
    count, mean, std = _segment_stats(r, group, valid, num_groups, c.ddof)
    lone = count <= 1
    if c.singleton == "keep":  # verl: a group of one has mean 0 and std 1
        mean = jnp.where(lone, 0.0, mean)
        std = jnp.where(lone, 1.0, std)
    centred = r - mean
    if mode == "rloo":
        adv = jnp.where(lone, centred, centred * count / jnp.maximum(count - 1.0, 1.0))
    elif scale == "group":
        adv = centred / (std + c.eps)
    elif scale == "batch":
        n = valid.sum()
        batch_mean = jnp.sum(jnp.where(valid, r, 0.0)) / jnp.maximum(n, 1)
        batch_var = jnp.sum(jnp.where(valid, (r - batch_mean) ** 2, 0.0)) / jnp.maximum(n - c.ddof, 1)
        adv = centred / (jnp.sqrt(batch_var) + c.eps)
    else:
        adv = centred
    if c.singleton == "zero":
        adv = jnp.where(lone, 0.0, adv)
    return jnp.where(valid, adv, 0.0)


@jax.jit
def broadcast_to_tokens(advantages: jax.typing.ArrayLike, policy_mask: jax.typing.ArrayLike) -> jax.Array:
    """Sequence advantages (N,) -> (N, L): each row's value on its policy tokens, 0 on prompt, observation
    and padding tokens."""
    a = jnp.asarray(advantages, jnp.float32)
    m = jnp.asarray(policy_mask).astype(bool)
    if a.ndim != 1 or m.ndim != 2 or m.shape[0] != a.shape[0]:
        raise ValueError(f"advantages {a.shape} and policy_mask {m.shape}: expected (N,) and (N, L)")
    return jnp.where(m, a[:, None], 0.0)


@functools.partial(jax.jit, static_argnames=("length",))
def token_rewards(step_rewards: jax.typing.ArrayLike, step_positions: jax.typing.ArrayLike,
                  length: int) -> jax.Array:
    """Process rewards (N, T) placed at their columns step_positions (N, T) (-1: no step) -> (N, length);
    steps at the same column add up."""
    r = jnp.asarray(step_rewards, jnp.float32)
    p = jnp.asarray(step_positions, jnp.int32)
    if r.ndim != 2 or p.shape != r.shape:
        raise ValueError(f"step_rewards {r.shape} and step_positions {p.shape}: expected the same (N, T)")
    hit = p[:, :, None] == jnp.arange(length)[None, None, :]  # (N, T, L); -1 hits nothing
    return jnp.sum(jnp.where(hit, r[:, :, None], 0.0), axis=1)


def normalize_step_rewards(step_rewards: jax.typing.ArrayLike, step_positions: jax.typing.ArrayLike,
                           group: jax.typing.ArrayLike, *, num_groups: int, level: str = "turn",
                           convention: str = "verl", ddof: int | None = None, eps: float | None = None,
                           singleton: str | None = None, step_mask: jax.typing.ArrayLike | None = None
                           ) -> jax.Array:
    """z-score process rewards (N, T) within each prompt's group; steps not taken (position -1, or
    False in step_mask (N, T)) are left out and come back 0.

    level "turn": the i-th step's reward is normalised over the group's rows that took an i-th step (TRM's
    turn-level GRPO; a turn only one row reached gets the singleton rule: "keep" gives mean 0, std 1, the
    project's choice in methods/trm.md). level "group": all steps of the group's rows together (DeepSeekMath
    process supervision). To normalise tool calls and the final answer separately, call twice with
    complementary step_masks and add.
    """
    if level not in ("turn", "group"):
        raise ValueError(f"level={level!r}: expected 'turn' or 'group'")
    r = jnp.asarray(step_rewards, jnp.float32)
    p = jnp.asarray(step_positions)
    if r.ndim != 2 or p.shape != r.shape:
        raise ValueError(f"step_rewards {r.shape} and step_positions {p.shape}: expected the same (N, T)")
    N, T = r.shape
    taken = p >= 0
    if step_mask is not None:
        step_mask = jnp.asarray(step_mask).astype(bool)
        if step_mask.shape != r.shape:
            raise ValueError(f"step_mask shape {step_mask.shape}: expected {r.shape}")
        taken = taken & step_mask
    group = jnp.asarray(group)
    _check_groups(group, N, num_groups)
    g = group.astype(jnp.int32)[:, None]
    ids = g * T + jnp.arange(T)[None, :] if level == "turn" else jnp.broadcast_to(g, (N, T))
    out = _group_advantages(r.reshape(-1), ids.reshape(-1), taken.reshape(-1),
                            num_groups=num_groups * T if level == "turn" else num_groups, mode="grpo",
                            scale="group", c=_resolve(convention, ddof, eps, singleton))
    return out.reshape(N, T)


def _reverse_scan(step, init, *columns):
    """lax.scan from the last column to the first over (N, L) arrays; returns the (N, L) outputs."""
    _, out = jax.lax.scan(step, init, tuple(c.T for c in columns), reverse=True)
    return out.T


@functools.partial(jax.jit, static_argnames=("gamma",))
def reward_to_go(rewards: jax.typing.ArrayLike, policy_mask: jax.typing.ArrayLike, *,
                 gamma: float = 1.0) -> jax.Array:
    """G_j = r_j + gamma * G_j' with j' the row's next policy token (N, L): discounting counts policy tokens
    only and runs across observation gaps. Rewards on non-policy columns are ignored; 0 off policy tokens."""
    r = jnp.asarray(rewards, jnp.float32)
    m = jnp.asarray(policy_mask).astype(bool)
    if r.ndim != 2 or m.shape != r.shape:
        raise ValueError(f"rewards {r.shape} and policy_mask {m.shape}: expected the same (N, L)")

    def step(g_next, xs):
        r_t, m_t = xs
        g = jnp.where(m_t, r_t + gamma * g_next, g_next)
        return g, g

    return jnp.where(m, _reverse_scan(step, jnp.zeros(r.shape[0]), r, m), 0.0)


@functools.partial(jax.jit, static_argnames=("gamma", "lam"))
def gae(rewards: jax.typing.ArrayLike, values: jax.typing.ArrayLike, policy_mask: jax.typing.ArrayLike, *,
        gamma: float = 1.0, lam: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16) over each row's policy tokens.

    rewards, values, policy_mask: (N, L). With j' the next policy token after j (none: V = 0, terminal),
    delta_j = r_j + gamma V_j' - V_j and A_j = delta_j + gamma lam A_j'. Observation and padding columns are
    skipped: their values and rewards are not used and the recursion passes over them unchanged (verl's
    compute_gae_advantage_return with the response mask). Returns (advantages, returns = A + V), each (N, L),
    0 off policy tokens. Not whitened: the libraries whiten afterwards (`masked_whiten`).
    """
    r = jnp.asarray(rewards, jnp.float32)
    v = jnp.asarray(values, jnp.float32)
    m = jnp.asarray(policy_mask).astype(bool)
    if r.ndim != 2 or v.shape != r.shape or m.shape != r.shape:
        raise ValueError(f"rewards {r.shape}, values {v.shape}, policy_mask {m.shape}: expected the same (N, L)")

    def step(carry, xs):
        adv_next, v_next = carry
        r_t, v_t, m_t = xs
        adv = r_t + gamma * v_next - v_t + gamma * lam * adv_next
        adv = jnp.where(m_t, adv, adv_next)
        v_next = jnp.where(m_t, v_t, v_next)
        return (adv, v_next), adv

    zeros = jnp.zeros(r.shape[0])
    adv = _reverse_scan(step, (zeros, zeros), r, v, m)
    return jnp.where(m, adv, 0.0), jnp.where(m, adv + v, 0.0)


@functools.partial(jax.jit, static_argnames=("ddof", "eps", "shift_mean"))
def masked_whiten(x: jax.typing.ArrayLike, mask: jax.typing.ArrayLike, *, ddof: int = 1, eps: float = 1e-8,
                  shift_mean: bool = True) -> jax.Array:
    """(x - mean) / sqrt(var + eps) with mean and var over the masked entries of x (any shape); 0 off the
    mask. shift_mean=False adds the mean back. ddof 1 and eps 1e-8 are verl's / tunix's / TRL PPO's
    masked_whiten (OpenRLHF: ddof 0 and rsqrt(max(var, 1e-8)))."""
    x = jnp.asarray(x, jnp.float32)
    m = jnp.asarray(mask).astype(bool)
    if m.shape != x.shape:
        raise ValueError(f"mask shape {m.shape}: expected {x.shape}")
    n = m.sum()
    mean = jnp.sum(jnp.where(m, x, 0.0)) / jnp.maximum(n, 1)
    var = jnp.sum(jnp.where(m, (x - mean) ** 2, 0.0)) / jnp.maximum(n - ddof, 1)
    out = (x - mean) * jax.lax.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return jnp.where(m, out, 0.0)
