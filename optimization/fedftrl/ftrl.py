"""The FTRL step of FedFTRL: argmin over the simplex of <x, L> + F(x), F the hybrid regulariser.

F(x) = -2/eta * sum_k sqrt(x_k) + 1/gamma * sum_k x_k (log x_k - 1)     (1/2-Tsallis + negative entropy)

The minimiser is interior, and the KKT conditions read, with a multiplier lam shared by all arms,

    L_k + grad F(x)_k + lam = 0,   grad F(x)_k = -a / sqrt(x_k) + b log x_k,   a = 1/eta, b = 1/gamma,

so u_k = log x_k solves h(u_k) = L_k + lam with h(u) = a exp(-u/2) - b u, strictly decreasing and convex.
The solver works in log space throughout (u, never x, is iterated), which keeps arms near the boundary of
the simplex (x_k ~ 1e-30) exact.  It is jittable with fixed iteration counts:

* outer: bisection on lam in a bracket that provably holds the root (after shifting L so min L = 0:
  lam in [a, a sqrt(K) + b log K]); the sum sum_k exp(u_k(lam)) is decreasing in lam;
* inner: Newton on u_k from a starting point left of the root, max(u_T, u_E), where u_T, u_E solve the
  Tsallis and entropy halves alone; h is convex and decreasing, so Newton from the left increases
  monotonically to the root and never overshoots;
* finish: a few Newton steps on lam started from the bisection's lower end (sum x >= 1 there; the sum is
  convex and decreasing in lam, so these steps stay on the safe side too), then x = exp(u) / sum exp(u).

Either regulariser may be switched off (a = 0 or b = 0), which gives Exp3-style (entropy) or
Tsallis-INF (a only) solutions from the same code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def regulariser(x: jax.Array, inv_eta: jax.typing.ArrayLike, inv_gamma: jax.typing.ArrayLike) -> jax.Array:
    """F(x) = -2 inv_eta sum sqrt(x) + inv_gamma sum x (log x - 1), over the last axis."""
    x = jnp.asarray(x)
    return -2.0 * inv_eta * jnp.sum(jnp.sqrt(x), -1) + inv_gamma * jnp.sum(x * (jnp.log(x) - 1.0), -1)


def regulariser_grad(x: jax.Array, inv_eta: jax.typing.ArrayLike, inv_gamma: jax.typing.ArrayLike) -> jax.Array:
    """Closed-form gradient of `regulariser` in x: -inv_eta / sqrt(x) + inv_gamma log x."""
    x = jnp.asarray(x)
    return -inv_eta / jnp.sqrt(x) + inv_gamma * jnp.log(x)


def _inner_solve(c, a, b, newton_iters):
    """u solving a exp(-u/2) - b u = c (c >= a, so the root is <= 0), by Newton from the left.

    With a > 0 every iterate stays >= u_T = -2 log(c / a), so exp(-u/2) <= c / a cannot overflow; with
    a = 0 the start u_E = -c / b is already the root (no floor on u: log-probabilities far below the
    smallest float stay exact).
    """
    tiny = jnp.finfo(c.dtype).tiny
    # Tsallis half alone: a exp(-u/2) = c -> u = -2 log(c / a); entropy half alone: -b u = c -> u = -c / b.
    u_t = jnp.where(a > 0, -2.0 * (jnp.log(jnp.maximum(c, tiny)) - jnp.log(jnp.maximum(a, tiny))), -jnp.inf)
    u_e = jnp.where(b > 0, -c / jnp.where(b > 0, b, 1.0), -jnp.inf)
    u = jnp.minimum(jnp.maximum(u_t, u_e), 0.0)

    def newton(_, u):
        t = jnp.where(a > 0, a * jnp.exp(-0.5 * jnp.where(a > 0, u, 0.0)), 0.0)
        r = t - b * u - c                      # >= 0 left of the root
        d = -0.5 * t - b                       # h'(u) < 0
        return u - r / d

    return jax.lax.fori_loop(0, newton_iters, newton, u, unroll=True)


def ftrl_log_argmin(
    L: jax.Array,
    inv_eta: jax.typing.ArrayLike,
    inv_gamma: jax.typing.ArrayLike,
    *,
    method: str = "bisection",
    bisect_iters: int = 40,
    newton_iters: int = 5,
    lam_newton_iters: int = 3,
    joint_iters: int = 8,
) -> jax.Array:
    """log x, x = argmin_{x in simplex} <x, L> + F(x) with F the hybrid regulariser.

    L: (..., K) cumulative loss estimates; inv_eta, inv_gamma: scalars or arrays of shape L.shape[:-1]
    (both >= 0, not both 0).  Returns log x of L's shape and dtype (each row's logsumexp is 0).

    method="bisection" (the reference: bisect_iters outer bisections with newton_iters inner Newton steps
    each, then lam_newton_iters Newton steps on lam); method="newton" (about 10x cheaper, used by the
    experiments): Newton on the joint KKT system in (u, lam) for joint_iters steps, started at the largest
    closed-form lower bound of lam (entropy-only or Tsallis-only normaliser) and kept inside proven
    bounds on u.  Both are checked against the KKT conditions in the tests.
    """
    if method not in ("bisection", "newton"):
        raise ValueError(f"unknown FTRL solver method {method!r}, expected 'bisection' or 'newton'")
    L = jnp.asarray(L)
    dtype = L.dtype if jnp.issubdtype(L.dtype, jnp.floating) else jnp.float32
    L = L.astype(dtype)
    K = L.shape[-1]
    a = jnp.asarray(inv_eta, dtype)[..., None]
    b = jnp.asarray(inv_gamma, dtype)[..., None]
    Ls = L - jnp.min(L, axis=-1, keepdims=True)          # argmin is shift-invariant; now min = 0

    if method == "newton":
        return _joint_newton(Ls, a, b, joint_iters)

    def log_mass(lam):
        u = _inner_solve(Ls + lam, a, b, newton_iters)
        return u, jax.nn.logsumexp(u, axis=-1, keepdims=True)

    lo = jnp.broadcast_to(a, L.shape[:-1] + (1,)).astype(dtype)                  # x_best = 1 here: mass >= 1
    hi = (a * jnp.sqrt(jnp.asarray(K, dtype)) + b * jnp.log(jnp.asarray(K, dtype))) * jnp.ones_like(lo)
    # at hi every x_k <= 1/K: mass <= 1

    def bisect(_, carry):
        lo, hi = carry
        mid = 0.5 * (lo + hi)
        _, lm = log_mass(mid)
        too_much = lm > 0
        return jnp.where(too_much, mid, lo), jnp.where(too_much, hi, mid)

    lo, hi = jax.lax.fori_loop(0, bisect_iters, bisect, (lo, hi))

    def lam_newton(_, lam):
        u, lm = log_mass(lam)
        x = jnp.exp(u)
        # d mass / d lam = sum_k x_k du_k/dlam = sum_k x_k / h'(u_k)
        dh = -0.5 * jnp.where(a > 0, a * jnp.exp(-0.5 * jnp.where(a > 0, u, 0.0)), 0.0) - b
        dmass = jnp.sum(x / dh, -1, keepdims=True)
        step = -(jnp.exp(lm) - 1.0) / jnp.minimum(dmass, -jnp.finfo(dtype).tiny)
        return jnp.clip(lam + step, lo, hi)

    lam = jax.lax.fori_loop(0, lam_newton_iters, lam_newton, lo)
    u, lm = log_mass(lam)
    return u - lm


def _tsallis_term(u, a):
    """a exp(-u/2), 0 where a == 0 (u may then be far below the float range)."""
    return jnp.where(a > 0, a * jnp.exp(-0.5 * jnp.where(a > 0, u, 0.0)), 0.0)


def _joint_newton(Ls, a, b, iters):
    """Newton on h(u_k) = Ls_k + lam, sum exp(u) = 1 jointly; Ls >= 0 with min 0 (see ftrl_log_argmin)."""
    dtype = Ls.dtype
    K = Ls.shape[-1]
    tiny = jnp.finfo(dtype).tiny
    b_safe = jnp.where(b > 0, b, 1.0)
    a_safe = jnp.where(a > 0, a, 1.0)
    # lam* >= the entropy-only normaliser b logsumexp(-Ls / b) and the Tsallis-only one (x >= each half's x).
    lam_e = jnp.where(b > 0, b * jax.nn.logsumexp(-Ls / b_safe, -1, keepdims=True), 0.0)

    def tsallis_newton(_, lam):
        q = a_safe / (Ls + lam)
        f = jnp.sum(q * q, -1, keepdims=True) - 1.0
        df = -2.0 * jnp.sum(q * q / (Ls + lam), -1, keepdims=True)
        return lam - f / df

    lam_t = jnp.where(a > 0, jax.lax.fori_loop(0, 8, tsallis_newton, a_safe * jnp.ones_like(lam_e)), 0.0)
    lam = jnp.maximum(jnp.maximum(lam_e, lam_t), a)
    hi = a * jnp.sqrt(jnp.asarray(K, dtype)) + b * jnp.log(jnp.asarray(K, dtype))

    def start(c):   # max(u_T, u_E) <= root of h(u) = c, for c >= a
        u_t = jnp.where(a > 0, -2.0 * (jnp.log(jnp.maximum(c, tiny)) - jnp.log(a_safe)), -jnp.inf)
        u_e = jnp.where(b > 0, -c / b_safe, -jnp.inf)
        return jnp.minimum(jnp.maximum(u_t, u_e), 0.0)

    u_lo = start(Ls + hi)          # the root at lam* <= hi lies above this
    u = start(Ls + lam)

    def step(_, carry):
        u, lam = carry
        t = _tsallis_term(u, a)
        x = jnp.exp(u)
        r = t - b * u - (Ls + lam)
        d = -0.5 * t - b
        dlam = (1.0 - jnp.sum(x, -1, keepdims=True) + jnp.sum(x * r / d, -1, keepdims=True)) / jnp.sum(
            x / d, -1, keepdims=True)
        u = jnp.clip(u + (dlam - r) / d, u_lo, 0.0)
        return u, jnp.clip(lam + dlam, a, hi)

    u, lam = jax.lax.fori_loop(0, iters, step, (u, lam))
    return u - jax.nn.logsumexp(u, -1, keepdims=True)


def ftrl_argmin(L: jax.Array, inv_eta, inv_gamma, **solver_kw) -> jax.Array:
    """x = argmin_{x in simplex} <x, L> + F(x) (Algorithm 1's FTRL step): exp of `ftrl_log_argmin`."""
    return jnp.exp(ftrl_log_argmin(L, inv_eta, inv_gamma, **solver_kw))


def kkt_residual(log_x: jax.Array, L: jax.Array, inv_eta, inv_gamma) -> tuple[jax.Array, jax.Array]:
    """(|sum x - 1|, spread of L + grad F(x) across arms): both are 0 exactly at the argmin.

    Evaluated from log x, so arms whose probability underflows still count.  The spread is relative to
    the scale max(1, max_k |L_k|, |lam|) of the terms that cancel.  inv_eta, inv_gamma: scalars or (...,).
    """
    a = jnp.asarray(inv_eta)[..., None]
    b = jnp.asarray(inv_gamma)[..., None]
    g = L - jnp.where(a > 0, a * jnp.exp(-0.5 * jnp.where(a > 0, log_x, 0.0)), 0.0) + b * log_x
    scale = jnp.maximum(jnp.maximum(1.0, jnp.max(jnp.abs(L), -1)), jnp.max(jnp.abs(g), -1))
    spread = (jnp.max(g, -1) - jnp.min(g, -1)) / scale
    return jnp.abs(jnp.exp(jax.nn.logsumexp(log_x, -1)) - 1.0), spread
