"""LGBO's region lift: an LLM preference over a box becomes an exact shift of the GP posterior mean.

Tilting the GP by exp(lambda * a^T f(G)) over a fixed Sobol grid G with region weights a (sum a = 1) leaves
the covariance unchanged and shifts the mean by lambda * Sigma_n(x, G) a. With

    lambda = Phi^-1(c) / sqrt(a^T Sigma_n,GG a)

the region's average a^T f(G) rises by exactly Phi^-1(c) posterior standard deviations (0 at c = 0.5).
Region-size rules on E = |G| * vol(box): E < 2 -> a point at the box centre, turned into the box around it
with E ~ 2.05, soft-weighted; 2 <= E < 6 -> soft box (sigmoid edges, s = 0.08); E >= 6 -> hard box.
All functions are pure and jittable; regions live in unit parameter coordinates u.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtri

from optimization import gp

POINT_E = 2.05
SOFT_E = 2.0
HARD_E = 6.0
SOFTNESS = 0.08
C_EPS = 1e-3  # confidence clamped into [C_EPS, 1 - C_EPS], inside (0, 1)


class Region(NamedTuple):
    """A preference: box [lb, ub] in unit parameter coordinates (P,), confidence c; is_point marks a point
    answer (lb = ub = the point). c = 0.5 means no preference (zero lift)."""

    lb: jax.Array
    ub: jax.Array
    confidence: jax.Array
    is_point: jax.Array


def no_region(p: int, dtype=jnp.float64) -> Region:
    return Region(jnp.zeros(p, dtype), jnp.ones(p, dtype), jnp.asarray(0.5, dtype), jnp.asarray(False))


class Lift(NamedTuple):
    """shift(x) = lam * (k(x, G) a - k(x, X) w), with w = (K + noise I)^-1 k(X, G) a."""

    lam: jax.Array  # ()
    grid_x: jax.Array  # (G, D) encoded grid
    a: jax.Array  # (G,) region weights, sum 1
    w: jax.Array  # (n_max,)
    region_sd: jax.Array  # () sqrt(a^T Sigma_n,GG a): posterior sd of the region's average


def _volume(lb, ub):
    return jnp.prod(jnp.clip(jnp.minimum(ub, 1.0) - jnp.maximum(lb, 0.0), 0.0, None))


def point_box(centre: jax.Array, n_grid: int, target_e: float = POINT_E) -> tuple[jax.Array, jax.Array]:
    """The cube around `centre` (clipped to [0, 1]^P) whose expected grid count is target_e, by bisection."""
    target = target_e / n_grid

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        big = _volume(centre - mid / 2, centre + mid / 2) >= target
        return jnp.where(big, lo, mid), jnp.where(big, mid, hi)

    lo, hi = jax.lax.fori_loop(0, 60, body, (jnp.asarray(0.0, centre.dtype), jnp.asarray(2.0, centre.dtype)))
    return jnp.clip(centre - hi / 2, 0.0, 1.0), jnp.clip(centre + hi / 2, 0.0, 1.0)


REFERENCE_SOFTNESS = 0.06  # the reference code's smoothing, applied to every box (its "hard" box is never hard)


def region_weights(region: Region, grid_u: jax.Array, softness=SOFTNESS,
                   force_soft=False) -> tuple[jax.Array, jax.Array]:
    """Weights a (G,) on the grid (sum 1) after the region-size rules; also returns E of the final box.

    force_soft (may be traced): sigmoid edges whatever E (the reference code's soft box, with
    softness=REFERENCE_SOFTNESS)."""
    n_grid = grid_u.shape[0]
    lb, ub = jnp.minimum(region.lb, region.ub), jnp.maximum(region.lb, region.ub)
    e = n_grid * _volume(lb, ub)
    as_point = region.is_point | (e < SOFT_E)
    plb, pub = point_box(0.5 * (lb + ub), n_grid)
    lb, ub = jnp.where(as_point, plb, lb), jnp.where(as_point, pub, ub)
    e = jnp.where(as_point, n_grid * _volume(lb, ub), e)
    hard = jnp.all((grid_u >= lb) & (grid_u <= ub), axis=-1).astype(grid_u.dtype)
    soft = jnp.prod(jax.nn.sigmoid((grid_u - lb) / softness) * jax.nn.sigmoid((ub - grid_u) / softness), axis=-1)
    use_soft = force_soft | (e < HARD_E) | (jnp.sum(hard) < 1.0)
    a = jnp.where(use_soft, soft, hard)
    return a / jnp.maximum(jnp.sum(a), 1e-300), e


def make_lift(post: gp.GPPosterior, region: Region, grid_u: jax.Array, grid_x: jax.Array, *, softness=SOFTNESS,
              force_soft=False) -> Lift:
    """The exact posterior mean shift for one preference (LGBO step 3-4); softness / force_soft as in
    region_weights."""
    a, _ = region_weights(region, grid_u, softness, force_soft)
    ls = post.params.lengthscale
    kxg_a = (gp.matern52(post.x, grid_x, ls) * post.mask[:, None]) @ a  # k(X, G) a: (n_max,)
    w = jax.scipy.linalg.cho_solve((post.chol, True), kxg_a)
    quad = a @ (gp.matern52(grid_x, grid_x, ls) @ a) - kxg_a @ w  # a^T Sigma_n,GG a
    sd = jnp.sqrt(jnp.maximum(quad, 1e-300))
    c = jnp.clip(region.confidence, C_EPS, 1.0 - C_EPS)
    lam = ndtri(c) / sd
    return Lift(lam, grid_x, a, w, sd)


def shift(post: gp.GPPosterior, lift: Lift, xs: jax.Array) -> jax.Array:
    """lam * Sigma_n(xs, G) a: (m, D) -> (m,)."""
    ls = post.params.lengthscale
    kxg = gp.matern52(xs, lift.grid_x, ls) @ lift.a
    kxx = (gp.matern52(xs, post.x, ls) * post.mask[None, :]) @ lift.w
    return lift.lam * (kxg - kxx)


def lifted_predict(post: gp.GPPosterior, lift: Lift, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and variance of the tilted posterior at xs (variance unchanged by the tilt)."""
    mean, var = gp.predict(post, xs)
    return mean + shift(post, lift, xs), var


def lifted_predict_joint(post: gp.GPPosterior, lift: Lift, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    mean, cov = gp.predict_joint(post, xs)
    return mean + shift(post, lift, xs), cov
