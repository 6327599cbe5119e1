"""Gaussian-process surrogate built with numpyro, shared by the Bayesian-optimisation methods of `optimization/`.

The model is the one BoTorch's `SingleTaskGP` uses by default since 0.12, with a Matern-5/2 kernel:
Matern-5/2 ARD kernel (unit output scale on standardised y), constant mean, Gaussian noise, and the
dimension-scaled priors

    lengthscale_j ~ LogNormal(sqrt(2) + log(d) / 2, sqrt(3)),      noise variance ~ LogNormal(-4, 1),

without which a MAP fit on few points often collapses to a high-noise optimum. The training set lives in
fixed-size padded buffers `x: (n_max, d)`, `y: (n_max,)`, `mask: (n_max,)`: masked rows are decoupled from
the rest by unit noise and zero covariance, so a BO loop whose data grows never recompiles.

Everything here expects float64: call it inside `with jax.enable_x64(True):` (the BO entry points do).
Public pieces:

- `gp_model`: the numpyro model (used for MAP and for NUTS);
- `fit_map`: MAP hyperparameters by fixed-step optax L-BFGS under `jit` from two starts;
- `fit_map_to_tol`: the same fit run to a gradient / relative-change tolerance (scipy's defaults), with its
  iteration count;
- `fit_nuts`: fully Bayesian hyperparameters by NUTS (SAASBO-style averaging downstream);
- `posterior`, `predict`, `predict_joint`, `posterior_cov`: the exact GP posterior from one Cholesky factor.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import optax
from numpyro.infer.util import log_density

NOISE_FLOOR = 1e-4  # BoTorch's GreaterThan(1e-4) noise constraint.


class GPParams(NamedTuple):
    """Hyperparameters on the standardised scale. A leading sample axis (NUTS) is allowed on every field."""

    lengthscale: jax.Array  # (d,)
    noise: jax.Array  # () noise variance
    mean: jax.Array  # () constant mean


class GPPosterior(NamedTuple):
    """The GP conditioned on padded data; all quantities on the standardised y scale."""

    params: GPParams
    x: jax.Array  # (n_max, d)
    mask: jax.Array  # (n_max,) 1.0 for a real row, 0.0 for padding
    chol: jax.Array  # (n_max, n_max) Cholesky factor of K + noise I (padding: identity block)
    alpha: jax.Array  # (n_max,) (K + noise I)^-1 (y - mean)


def lengthscale_prior(d: int) -> dist.Distribution:
    """BoTorch's dimension-scaled lengthscale prior (Hvarfner et al. 2024)."""
    return dist.LogNormal(math.sqrt(2.0) + 0.5 * math.log(d), math.sqrt(3.0))


def noise_prior() -> dist.Distribution:
    return dist.LogNormal(-4.0, 1.0)


def matern52(x1: jax.Array, x2: jax.Array, lengthscale: jax.Array) -> jax.Array:
    """Matern-5/2 ARD kernel with unit variance. x1: (n, d), x2: (m, d) -> (n, m)."""
    diff = (x1[:, None, :] - x2[None, :, :]) / lengthscale
    r2 = jnp.sum(diff * diff, axis=-1)
    r = jnp.sqrt(jnp.maximum(r2, 1e-30))
    r = jnp.where(r2 > 1e-30, r, 0.0)
    s5r = math.sqrt(5.0) * r
    return (1.0 + s5r + (5.0 / 3.0) * r2) * jnp.exp(-s5r)


def gram(params: GPParams, x: jax.Array, mask: jax.Array) -> jax.Array:
    """K + noise I on the real rows; the identity on padded rows (decoupled, unit noise)."""
    k = matern52(x, x, params.lengthscale) * (mask[:, None] * mask[None, :])
    diag = params.noise * mask + (1.0 - mask)
    return k + jnp.diag(diag)


def standardize(y: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Standardise the real entries of padded y (unbiased std, as BoTorch's Standardize); padding -> 0.

    Returns (y_std, mean, std)."""
    n = jnp.sum(mask)
    mean = jnp.sum(y * mask) / jnp.maximum(n, 1.0)
    var = jnp.sum(((y - mean) * mask) ** 2) / jnp.maximum(n - 1.0, 1.0)
    std = jnp.where((n > 1) & (var > 1e-24), jnp.sqrt(var), 1.0)
    return (y - mean) / std * mask, mean, std


def gp_model(x: jax.Array, y: jax.Array, mask: jax.Array) -> None:
    """numpyro model of standardised padded observations. x: (n_max, d), y: (n_max,), mask: (n_max,)."""
    n, d = x.shape
    lengthscale = numpyro.sample("lengthscale", lengthscale_prior(d).expand([d]).to_event(1))
    noise = numpyro.sample("noise", noise_prior())
    mean = numpyro.sample("mean", dist.Normal(0.0, 1.0))
    params = GPParams(lengthscale, NOISE_FLOOR + noise, mean)
    chol = jnp.linalg.cholesky(gram(params, x, mask))
    numpyro.sample("y", dist.MultivariateNormal(mean * mask, scale_tril=chol), obs=y * mask)
    # Each padded row adds log N(0; 0, 1); remove it so the density equals the unpadded one.
    numpyro.factor("padding", 0.5 * math.log(2.0 * math.pi) * (n - jnp.sum(mask)))


def log_joint(params: GPParams, x: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """Log prior + log marginal likelihood of the standardised data (no Jacobian: MAP as BoTorch does)."""
    sites = {"lengthscale": params.lengthscale, "noise": params.noise - NOISE_FLOOR, "mean": params.mean}
    return log_density(gp_model, (x, y, mask), {}, sites)[0]


def default_params(d: int, dtype=jnp.float64) -> GPParams:
    """Start of the MAP fit: the lengthscale prior's mode, noise 1e-2, mean 0."""
    mode = math.exp(math.sqrt(2.0) + 0.5 * math.log(d) - 3.0)
    return GPParams(jnp.full((d,), mode, dtype), jnp.asarray(1e-2, dtype), jnp.asarray(0.0, dtype))


def _to_raw(p: GPParams) -> dict:
    return {"log_ls": jnp.log(p.lengthscale), "log_noise": jnp.log(jnp.maximum(p.noise - NOISE_FLOOR, 1e-12)),
            "mean": p.mean}


def _from_raw(u: dict) -> GPParams:
    ls = jnp.exp(jnp.clip(u["log_ls"], -9.0, 9.0))
    noise = NOISE_FLOOR + jnp.exp(jnp.clip(u["log_noise"], -25.0, 3.0))
    return GPParams(ls, noise, u["mean"])


def _lbfgs(x, y, mask, init: GPParams, steps: int) -> tuple[GPParams, jax.Array]:
    def loss(u):
        return -log_joint(_from_raw(u), x, y, mask)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)
    u0 = _to_raw(init)

    def step(carry, _):
        u, state = carry
        value, grad = value_and_grad(u, state=state)
        updates, new_state = opt.update(grad, state, u, value=value, grad=grad, value_fn=loss)
        new_u = optax.apply_updates(u, updates)
        ok = jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(new_u)]))
        new_u = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_u, u)
        return (new_u, new_state), None

    (u, _), _ = jax.lax.scan(step, (u0, opt.init(u0)), None, length=steps)
    value = loss(u)
    return _from_raw(u), jnp.where(jnp.isfinite(value), value, jnp.inf)


def _starts(x: jax.Array, warm: GPParams | None) -> GPParams:
    """The fits' starting points, stacked on a leading axis: the prior mode, then `warm` if given."""
    start = default_params(x.shape[-1], x.dtype)
    if warm is None:
        return jax.tree.map(lambda a: a[None], start)
    return jax.tree.map(lambda a, b: jnp.stack([a, b]), start, warm)


def fit_map(x: jax.Array, y: jax.Array, mask: jax.Array, warm: GPParams | None = None, *,
            steps: int = 40) -> GPParams:
    """MAP hyperparameters of `gp_model` on standardised padded data, by `steps` L-BFGS steps.

    Starts: the prior-mode default and, if given, `warm` (e.g. last round's fit), one after the other
    (lax.map, one compiled body); the one with the higher log joint wins. Jittable: shapes depend on (n_max, d) only."""
    inits = _starts(x, warm)
    fits, losses = jax.lax.map(lambda p: _lbfgs(x, y, mask, p, steps), inits)
    best = jnp.argmin(losses)
    return jax.tree.map(lambda a: a[best], fits)


# scipy's L-BFGS-B defaults (factr 1e7 times machine epsilon; pgtol), which BoTorch's fit_gpytorch_mll uses
SCIPY_FTOL, SCIPY_GTOL = 1e7 * 2.220446049250313e-16, 1e-5


class FitInfo(NamedTuple):
    """How a fit to tolerance ended: L-BFGS iterations taken, whether a tolerance (not max_steps) stopped it,
    and the final objective -log joint / n (the per-observation scale on which the tolerances act)."""

    iterations: jax.Array
    converged: jax.Array
    loss: jax.Array


def _lbfgs_to_tol(x, y, mask, init: GPParams, max_steps: int, ftol: float, gtol: float) -> tuple[GPParams, FitInfo]:
    n = jnp.maximum(jnp.sum(mask), 1.0)

    def loss(u):  # per observation, as gpytorch's ExactMarginalLogLikelihood divides by n
        return -log_joint(_from_raw(u), x, y, mask) / n

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)
    u0 = _to_raw(init)

    def cond(carry):
        _, _, k, _, stop, _ = carry
        return (k < max_steps) & ~stop

    def body(carry):
        u, state, k, f_prev, _, _ = carry
        value, grad = value_and_grad(u, state=state)
        gmax = jnp.max(jnp.concatenate([jnp.abs(g).ravel() for g in jax.tree.leaves(grad)]))
        rel = (f_prev - value) / jnp.maximum(jnp.maximum(jnp.abs(f_prev), jnp.abs(value)), 1.0)
        done = (gmax <= gtol) | ((k > 0) & (rel <= ftol))
        updates, new_state = opt.update(grad, state, u, value=value, grad=grad, value_fn=loss)
        new_u = optax.apply_updates(u, updates)
        ok = jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(new_u)])) & ~done
        new_u = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_u, u)
        new_state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_state, state)
        bad = ~done & ~ok  # a non-finite step: stop at the last finite point, not converged
        return new_u, new_state, k + jnp.where(done | bad, 0, 1), value, done | bad, done

    f0 = jnp.asarray(jnp.inf, x.dtype)
    no = jnp.asarray(False)
    u, _, k, _, _, done = jax.lax.while_loop(cond, body, (u0, opt.init(u0), jnp.asarray(0), f0, no, no))
    value = loss(u)
    return _from_raw(u), FitInfo(k, done, jnp.where(jnp.isfinite(value), value, jnp.inf))


def fit_map_to_tol(x: jax.Array, y: jax.Array, mask: jax.Array, warm: GPParams | None = None, *,
                   max_steps: int = 1000, ftol: float = SCIPY_FTOL, gtol: float = SCIPY_GTOL
                   ) -> tuple[GPParams, FitInfo]:
    """MAP hyperparameters like `fit_map`, but L-BFGS runs until convergence rather than a fixed step count:
    it stops when the largest gradient entry of -log joint / n is at most `gtol`, or the relative decrease of
    that objective over one iteration is at most `ftol` (scipy L-BFGS-B's tests, with its defaults), or after
    `max_steps` iterations (then `converged` is False), or when a step goes non-finite.

    Starts as `fit_map` (prior mode, then `warm` if given; the better fit wins). Jittable (a while loop: one
    compile per (n_max, d)). Returns (params, FitInfo of the winning start)."""
    inits = _starts(x, warm)
    fits, infos = jax.lax.map(lambda p: _lbfgs_to_tol(x, y, mask, p, max_steps, ftol, gtol), inits)
    best = jnp.argmin(infos.loss)
    return jax.tree.map(lambda a: a[best], fits), jax.tree.map(lambda a: a[best], infos)


def fit_nuts(x: jax.Array, y: jax.Array, mask: jax.Array, key: jax.Array, *, num_warmup: int = 128,
             num_samples: int = 64, thinning: int = 4) -> GPParams:
    """Fully Bayesian hyperparameters by NUTS over `gp_model` (SAASBO-style).

    Returns GPParams with a leading axis of num_samples // thinning posterior samples."""
    from numpyro.infer import MCMC, NUTS

    mcmc = MCMC(NUTS(gp_model, max_tree_depth=6), num_warmup=num_warmup, num_samples=num_samples,
                thinning=thinning, progress_bar=False)
    mcmc.run(key, x, y, mask)
    s = mcmc.get_samples()
    return GPParams(s["lengthscale"], NOISE_FLOOR + s["noise"], s["mean"])


def posterior(params: GPParams, x: jax.Array, y: jax.Array, mask: jax.Array) -> GPPosterior:
    """Condition the GP on standardised padded data: one Cholesky factor serves mean, covariance and lift."""
    chol = jnp.linalg.cholesky(gram(params, x, mask))
    resid = (y - params.mean) * mask
    alpha = jax.scipy.linalg.cho_solve((chol, True), resid)
    return GPPosterior(params, x, mask, chol, alpha)


def _cross(post: GPPosterior, xs: jax.Array) -> jax.Array:
    return matern52(xs, post.x, post.params.lengthscale) * post.mask[None, :]


def predict(post: GPPosterior, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Posterior mean and variance of f (no noise) at xs: (m, d) -> (m,), (m,)."""
    ks = _cross(post, xs)
    mean = post.params.mean + ks @ post.alpha
    v = jax.scipy.linalg.solve_triangular(post.chol, ks.T, lower=True)
    var = 1.0 - jnp.sum(v * v, axis=0)
    return mean, jnp.maximum(var, 1e-12)


def posterior_cov(post: GPPosterior, a: jax.Array, b: jax.Array) -> jax.Array:
    """Posterior covariance Sigma_n(a, b) = k(a, b) - k(a, X)(K + noise I)^-1 k(X, b): (m, d), (p, d) -> (m, p)."""
    va = jax.scipy.linalg.solve_triangular(post.chol, _cross(post, a).T, lower=True)
    vb = jax.scipy.linalg.solve_triangular(post.chol, _cross(post, b).T, lower=True)
    return matern52(a, b, post.params.lengthscale) - va.T @ vb


def predict_joint(post: GPPosterior, xs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Joint posterior mean (m,) and covariance (m, m) of f at xs."""
    ks = _cross(post, xs)
    return post.params.mean + ks @ post.alpha, posterior_cov(post, xs, xs)
