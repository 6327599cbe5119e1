"""FedFTRL and its baselines as pure init/step pairs (each agent's policy; the whole network at once).

    state = init(V, K, B)                                              # B: ring size for delayed records
    state, x, aux = step(state, t, key, feedback, net, hp)             # t = 1, 2, ...

feedback: (V, K) losses of round t (a step reads only the pulled arm's entry per agent);
net: {"P": (V, V) doubly stochastic gossip, "sigma2": sigma_2(P), "D": diameter (int32)};
hp: traced hyperparameters ({"eps": scale of the topology delay C^P_t, optionally "lr_scale": the constant c in
1/gamma_t = c V sqrt(C^P_t t / log K), overriding AlgoConfig.lr_scale so one program sweeps it}); x: (V, K) the
distributions the agents played (one-hot for the deterministic Gossip UCB); aux: scalar diagnostic (fraction of agents
whose estimate was truncated this round, FedFTRL only).  Static options live in `AlgoConfig`.

Algorithms: "fedftrl" (Algorithm 1 of the paper, see README for the reading of each step), "fedexp3"
(Yi & Vojnovic 2023, anytime theory rates), "fedexp3_default" (FedExp3 at its authors' public default: constant
learning rate 0.1, exploration 0.01 / t^(1/3)), "gucb" (gossip UCB, Zhu et al. 2021), "ind_ftrl" (Tsallis-INF per
agent, no communication).  FedFTRL-eps is "fedftrl" with hp["eps"] != 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .ftrl import ftrl_log_argmin

ALGORITHMS = ("fedftrl", "fedexp3", "fedexp3_default", "gucb", "ind_ftrl")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlgoConfig:
    """Static algorithm options (changing one recompiles)."""

    rates: str = "experimental"     # FedFTRL learning rates: "experimental" (leading terms) or "theory"
    eta_scale: float = 0.1          # experimental 1/eta_t = eta_scale sqrt(V t)
    lr_scale: float = 8.0           # the constant c of 1/gamma_t = c V sqrt(C t / log K) (8 in the notes; both rates)
    tsallis_weight: float = 1.0     # weight of the 1/2-Tsallis half of F (0 switches it off)
    entropy_weight: float = 1.0     # weight of the negative-entropy half of F (0 switches it off)
    solver: str = "newton"          # FTRL solver method ("newton" fast, "bisection" reference)
    solver_iters: int = 6           # joint Newton iterations (method="newton")
    fedexp3_eta0: float = 1.0       # FedExp3 eta_t = eta0 (log K)^(2/3) / (K^(1/3) t^(2/3))
    fedexp3_gamma0: float = 1.0     # FedExp3 gamma_t = min(1/2, gamma0 (K log K / t)^(1/3))
    fedexp3_lr: float = 0.1         # fedexp3_default: constant learning rate (the authors' public default)
    fedexp3_explore: float = 0.01   # fedexp3_default: exploration gamma_t = fedexp3_explore / t^(1/3)
    gucb_c: float = 2.0             # Gossip UCB bonus sqrt(c log(V t) / (V n))

    def __post_init__(self):
        if self.rates not in ("experimental", "theory"):
            raise ValueError(f"rates must be 'experimental' or 'theory', got {self.rates!r}")
        if self.solver not in ("newton", "bisection"):
            raise ValueError(f"solver must be 'newton' or 'bisection', got {self.solver!r}")
        for f in ("eta_scale", "lr_scale", "fedexp3_eta0", "fedexp3_gamma0", "fedexp3_lr"):
            if not getattr(self, f) > 0:
                raise ValueError(f"{f} must be > 0, got {getattr(self, f)}")
        for f in ("tsallis_weight", "entropy_weight"):
            if not getattr(self, f) >= 0:
                raise ValueError(f"{f} must be >= 0, got {getattr(self, f)}")
        if self.tsallis_weight == 0 and self.entropy_weight == 0:
            raise ValueError("tsallis_weight and entropy_weight are both 0: the FTRL step needs a regulariser")
        if not 0 <= self.fedexp3_explore <= 1:
            raise ValueError(f"fedexp3_explore must be in [0, 1], got {self.fedexp3_explore}")
        if not self.gucb_c >= 0:
            raise ValueError(f"gucb_c must be >= 0, got {self.gucb_c}")


class Algorithm(NamedTuple):
    name: str
    init: Callable[[int, int, int], Any]
    step: Callable[..., tuple[Any, jax.Array, jax.Array]]


def _sample(key: jax.Array, x: jax.Array) -> jax.Array:
    """One arm per agent from the rows of x (V, K), by inverse CDF with one uniform per agent."""
    u = jax.random.uniform(key, x.shape[:-1] + (1,), dtype=x.dtype)
    k = jnp.sum(jnp.cumsum(x, -1) < u * jnp.sum(x, -1, keepdims=True), -1)
    return jnp.minimum(k, x.shape[-1] - 1)


def topology_delay(t: jax.Array, V: int, net: dict, eps: jax.Array) -> jax.Array:
    """C^P_t = eps (min(log(V t), sqrt V) / (1 - sigma_2(P)) + 2 + D)."""
    base = jnp.minimum(jnp.log(V * t), math.sqrt(V)) / (1.0 - net["sigma2"]) + 2.0 + net["D"]
    return eps * base


def fedftrl_rates(t, V: int, K: int, net: dict, eps, cfg: AlgoConfig, lr_scale=None):
    """(1/eta_t, 1/gamma_t, C^P_t) of FedFTRL, with c = lr_scale (default cfg.lr_scale; may be traced).

    experimental: 1/eta = eta_scale sqrt(V t), 1/gamma = c V sqrt(C t / log K);
    theory:       1/eta = 4 sqrt(V t + 169 V^2 D), 1/gamma = c V sqrt(C t / log K + 36 D^2 (K-1)^(2/3) + 4 C^2).
    The notes give c = 8 for both.  gamma_t also sets the truncation threshold 12 V C gamma_t (Eq. 4);
    the regulariser weights (tsallis_weight, entropy_weight) scale only the FTRL step's regulariser.
    """
    C = topology_delay(t, V, net, eps)
    D = net["D"].astype(t.dtype)
    logK = math.log(K)
    c = cfg.lr_scale if lr_scale is None else lr_scale
    if cfg.rates == "experimental":
        inv_eta = cfg.eta_scale * jnp.sqrt(V * t)
        inv_gamma = c * V * jnp.sqrt(C * t / logK)
    else:
        inv_eta = 4.0 * jnp.sqrt(V * t + 169.0 * V * V * D)
        inv_gamma = c * V * jnp.sqrt(C * t / logK + 36.0 * D * D * (K - 1) ** (2.0 / 3.0) + 4.0 * C * C)
    return inv_eta, inv_gamma, C


def make_algorithm(name: str, cfg: AlgoConfig = AlgoConfig()) -> Algorithm:
    if name == "fedftrl":
        return _fedftrl(cfg)
    if name == "fedexp3":
        return _fedexp3(cfg)
    if name == "fedexp3_default":
        return _fedexp3(cfg, schedule="default")
    if name == "gucb":
        return _gucb(cfg)
    if name == "ind_ftrl":
        return _ind_ftrl(cfg)
    raise ValueError(f"unknown algorithm {name!r}, expected one of {ALGORITHMS}")


def _fedftrl(cfg: AlgoConfig) -> Algorithm:
    def init(V, K, B):
        # L: the gossiped cumulative estimates L^obs_v; pending[i]: bias records (summed over agents) that
        # become due at the round t with t % B == i.
        return {"L": jnp.zeros((V, K)), "pending": jnp.zeros((B, K))}

    def step(state, t, key, feedback, net, hp):
        V, K = feedback.shape
        B = state["pending"].shape[0]
        tf = t.astype(feedback.dtype)
        inv_eta, inv_gamma, C = fedftrl_rates(tf, V, K, net, hp["eps"], cfg, hp.get("lr_scale"))
        # 1. FTRL step per agent (the hybrid 1/2-Tsallis + negative-entropy regulariser, each half weighted).
        x = jnp.exp(ftrl_log_argmin(state["L"], cfg.tsallis_weight * inv_eta, cfg.entropy_weight * inv_gamma,
                                    method=cfg.solver, joint_iters=cfg.solver_iters))
        # 2-3. sample and observe.
        k = _sample(key, x)
        onehot = jax.nn.one_hot(k, K, dtype=x.dtype)
        loss = jnp.sum(feedback * onehot, -1)
        xk = jnp.sum(x * onehot, -1)
        # 4. truncated importance weighting (Eq. 4): divide by max{x_k, 12 V C_t gamma_t}.
        threshold = 12.0 * V * C / inv_gamma
        est_trunc = loss / jnp.maximum(xk, threshold)
        est_full = loss / xk
        # 5. bias record w = l_hat - l_tilde (zero when not truncated).
        w = est_full - est_trunc
        # 7. gossip of the cumulative estimates (Eq. 5): L_v <- sum_u P_uv L_u + V l_tilde_v.
        L = net["P"].T @ state["L"] + V * est_trunc[:, None] * onehot
        # 8. records older than D rounds are known to every agent: add each once, unscaled, everywhere.
        slot = t % B
        L = L + state["pending"][slot][None, :]
        due = (t + net["D"] + 1) % B
        pending = state["pending"].at[slot].set(0.0).at[due].add(jnp.sum(w[:, None] * onehot, 0))
        truncated = jnp.mean((xk < threshold).astype(x.dtype))
        return {"L": L, "pending": pending}, x, truncated

    return Algorithm("fedftrl", init, step)


def _ind_ftrl(cfg: AlgoConfig) -> Algorithm:
    """Tsallis-INF (Zimmert & Seldin 2021) run by every agent on its own losses: 1/eta_t = sqrt(t)."""

    def init(V, K, B):
        return {"L": jnp.zeros((V, K))}

    def step(state, t, key, feedback, net, hp):
        V, K = feedback.shape
        tf = t.astype(feedback.dtype)
        x = jnp.exp(ftrl_log_argmin(state["L"], jnp.sqrt(tf), 0.0, method=cfg.solver, joint_iters=cfg.solver_iters))
        k = _sample(key, x)
        onehot = jax.nn.one_hot(k, K, dtype=x.dtype)
        loss = jnp.sum(feedback * onehot, -1)
        xk = jnp.sum(x * onehot, -1)
        return {"L": state["L"] + (loss / xk)[:, None] * onehot}, x, jnp.zeros((), x.dtype)

    return Algorithm("ind_ftrl", init, step)


def _fedexp3(cfg: AlgoConfig, schedule: str = "theory") -> Algorithm:
    """FedExp3: x_v = (1 - g_t) softmax(-eta_t z_v) + g_t / K; z <- P z + importance-weighted loss.

    schedule "theory": anytime rates of the O(T^(2/3)) analysis, g_t = min(1/2, g0 (K log K / t)^(1/3)),
    eta_t = eta0 (log K)^(2/3) / (K^(1/3) t^(2/3)) (reconstructed; see README).
    schedule "default": the authors' public default, eta_t = fedexp3_lr (constant), g_t = fedexp3_explore / t^(1/3).
    """
    if schedule not in ("theory", "default"):
        raise ValueError(f"unknown FedExp3 schedule {schedule!r}, expected 'theory' or 'default'")

    def init(V, K, B):
        return {"z": jnp.zeros((V, K))}

    def step(state, t, key, feedback, net, hp):
        V, K = feedback.shape
        tf = t.astype(feedback.dtype)
        logK = math.log(K)
        if schedule == "theory":
            g = jnp.minimum(0.5, cfg.fedexp3_gamma0 * (K * logK / tf) ** (1.0 / 3.0))
            eta = cfg.fedexp3_eta0 * logK ** (2.0 / 3.0) / (K ** (1.0 / 3.0) * tf ** (2.0 / 3.0))
        else:
            g = cfg.fedexp3_explore / tf ** (1.0 / 3.0)
            eta = jnp.asarray(cfg.fedexp3_lr, tf.dtype)
        x = (1.0 - g) * jax.nn.softmax(-eta * state["z"], -1) + g / K
        k = _sample(key, x)
        onehot = jax.nn.one_hot(k, K, dtype=x.dtype)
        loss = jnp.sum(feedback * onehot, -1)
        xk = jnp.sum(x * onehot, -1)
        z = net["P"] @ state["z"] + (loss / xk)[:, None] * onehot
        return {"z": z}, x, jnp.zeros((), x.dtype)

    return Algorithm("fedexp3" if schedule == "theory" else "fedexp3_default", init, step)


def _gucb(cfg: AlgoConfig) -> Algorithm:
    """Gossip UCB (lower confidence bound on losses): gossip of per-agent loss sums s and counts n.

    s <- P s + loss onehot, n <- P n + onehot estimate the network averages; agent v pulls
    argmin_k s/n - sqrt(c log(V t) / (V n)) (an arm with n = 0 first).
    """

    def init(V, K, B):
        return {"s": jnp.zeros((V, K)), "n": jnp.zeros((V, K))}

    def step(state, t, key, feedback, net, hp):
        V, K = feedback.shape
        tf = t.astype(feedback.dtype)
        n = state["n"]
        seen = n > 1e-12
        n_safe = jnp.where(seen, n, 1.0)
        index = state["s"] / n_safe - jnp.sqrt(cfg.gucb_c * jnp.log(V * tf) / (V * n_safe))
        # unseen arms first, ties broken at random
        u = jax.random.uniform(key, (V, K), dtype=feedback.dtype)
        index = jnp.where(seen, index + 1e-6 * u, -1e9 * (1.0 + u))
        k = jnp.argmin(index, -1)
        onehot = jax.nn.one_hot(k, K, dtype=feedback.dtype)
        loss = jnp.sum(feedback * onehot, -1)
        s = net["P"] @ state["s"] + loss[:, None] * onehot
        n = net["P"] @ state["n"] + onehot
        return {"s": s, "n": n}, onehot, jnp.zeros((), feedback.dtype)

    return Algorithm("gucb", init, step)
