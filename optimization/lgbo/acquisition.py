"""Acquisition functions on the (lifted) GP: analytic LogEI and Monte Carlo qLogEI, maximised over a
candidate set (Sobol points or a discrete pool), refined by multi-start projected gradient ascent, and
extended to batches (q > 1) by sequential greedy qLogEI with the earlier picks pending.

A surrogate is a pair (posts, lifts) with a leading sample axis S: S = 1 for a MAP fit, S > 1 for NUTS
hyperparameter samples; the acquisition value is the log of the sample-averaged EI (SAASBO-style).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax
from jax.scipy.special import log_ndtr, logsumexp, ndtri

from optimization import gp
from optimization.lgbo import model

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_SQRT_PI_2 = 0.5 * math.log(math.pi / 2)


def _log1mexp(x):
    """log(1 - exp(x)) for x < 0, stable."""
    return jnp.where(x > -math.log(2.0), jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


def log_h(z: jax.Array) -> jax.Array:
    """log(phi(z) + z Phi(z)), accurate for all z (the expected improvement of a unit Gaussian)."""
    big = 1.0 / math.sqrt(jnp.finfo(z.dtype).eps)
    z_mid = jnp.clip(z, -big, -1.0)
    # z > -1: direct; -big < z <= -1: phi(z) (1 - |z| Phi(z)/phi(z)) with Mills ratio via erfcx; z <= -big: asymptote
    direct = jnp.log(jnp.maximum(jnp.exp(-0.5 * z * z - _LOG_SQRT_2PI) + z * jnp.exp(log_ndtr(z)), 1e-300))
    mills = jnp.log(jax.scipy.special.erfcx(-z_mid / math.sqrt(2.0)) * jnp.abs(z_mid)) + _LOG_SQRT_PI_2
    mid = -0.5 * z_mid * z_mid - _LOG_SQRT_2PI + _log1mexp(jnp.minimum(mills, -1e-300))
    tail = -0.5 * z * z - _LOG_SQRT_2PI - 2.0 * jnp.log(jnp.abs(jnp.minimum(z, -1.0)))
    return jnp.where(z > -1.0, direct, jnp.where(z > -big, mid, tail))


def log_ei(mean: jax.Array, var: jax.Array, best: jax.Array) -> jax.Array:
    """Analytic log expected improvement over `best` of N(mean, var)."""
    sd = jnp.sqrt(var)
    return log_h((mean - best) / sd) + jnp.log(sd)


def _log_softplus(t):
    return jnp.where(t > 30.0, jnp.log(jnp.maximum(t, 1e-300)),
                     jnp.where(t < -30.0, t, jnp.log(jnp.log1p(jnp.exp(jnp.clip(t, -30.0, 30.0))))))


def qlog_ei(mean: jax.Array, cov: jax.Array, best: jax.Array, base: jax.Array, qmask: jax.Array,
            tau_max: float = 1e-2, tau_relu: float = 1e-6) -> jax.Array:
    """Monte Carlo qLogEI of a joint Gaussian over q points with fixed base samples (S, q) (QMC normals).

    The max over the q points and the positive part are smoothed (temperatures tau_max, tau_relu) so the
    log stays finite and differentiable; masked points (qmask = 0) do not count."""
    q = mean.shape[-1]
    pair = qmask[:, None] * qmask[None, :]
    cov = cov * pair + jnp.diag(1.0 - qmask) + 1e-9 * jnp.eye(q, dtype=cov.dtype)
    f = mean + base @ jnp.linalg.cholesky(cov).T  # (S, q)
    z = jnp.where(qmask > 0, f - best, -1e6)
    smooth_max = tau_max * logsumexp(z / tau_max, axis=-1)
    vals = _log_softplus(smooth_max / tau_relu) + math.log(tau_relu)
    return logsumexp(vals) - math.log(base.shape[0])


def qmc_normal(n: int, q: int, seed: int = 0) -> jax.Array:
    """Fixed scrambled-Sobol normal base samples (n, q)."""
    from optimization.lgbo.space import sobol

    u = jnp.asarray(sobol(n, q, seed))
    return ndtri(jnp.clip(u, 1e-10, 1 - 1e-10))


# surrogate helpers (leading sample axis) ---------------------------------------------------------------------
def _logmeanexp(v):
    return logsumexp(v, axis=0) - math.log(v.shape[0])


def surrogate_log_ei(posts, lifts, best, xs):
    """log of the sample-averaged EI at xs (m, D) -> (m,)."""
    mean, var = jax.vmap(model.lifted_predict, (0, 0, None))(posts, lifts, xs)
    return _logmeanexp(log_ei(mean, var, best))


def surrogate_qlog_ei_append(posts, lifts, best, xs, pend_x, pend_mask, base):
    """qLogEI of each candidate xs (m, D) joined with the pending points (q-1, D) -> (m,)."""

    def one(post, lift):
        cm, cv = model.lifted_predict(post, lift, xs)  # (m,)
        pm, pc = model.lifted_predict_joint(post, lift, pend_x)  # (q-1,), (q-1, q-1)
        cross = gp.posterior_cov(post, xs, pend_x)  # (m, q-1)
        m = xs.shape[0]
        mean = jnp.concatenate([jnp.broadcast_to(pm, (m, pm.shape[0])), cm[:, None]], axis=1)
        top = jnp.concatenate([jnp.broadcast_to(pc, (m,) + pc.shape), cross[:, :, None]], axis=2)
        bottom = jnp.concatenate([cross, cv[:, None]], axis=1)[:, None, :]
        cov = jnp.concatenate([top, bottom], axis=1)
        qmask = jnp.concatenate([pend_mask, jnp.ones((1,), pend_mask.dtype)])
        return jax.vmap(lambda mu, c: qlog_ei(mu, c, best, base, qmask))(mean, cov)

    return _logmeanexp(jax.vmap(one)(posts, lifts))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AcqSettings:
    q: int = 1
    n_mc: int = 512  # QMC samples for qLogEI (q > 1)
    refine_starts: int = 0  # multi-start gradient ascent from the best candidates (0: candidate argmax only)
    refine_steps: int = 30
    refine_lr: float = 0.02


def refine(fn, x0: jax.Array, cont_mask: jax.Array, steps: int, lr: float) -> jax.Array:
    """Projected Adam ascent of fn: (D,) -> () from x0, moving only continuous features, inside [0, 1]."""
    opt = optax.adam(lr)

    def step(carry, _):
        x, s = carry
        g = jax.grad(fn)(x) * cont_mask
        g = jnp.where(jnp.isfinite(g), g, 0.0)
        upd, s = opt.update(-g, s, x)
        return (jnp.clip(x + upd, 0.0, 1.0), s), None

    (x, _), _ = jax.lax.scan(step, (x0, opt.init(x0)), None, length=steps)
    return x


def suggest(posts, lifts, best, cands_x: jax.Array, available: jax.Array, cont_mask: jax.Array,
            base: jax.Array, settings: AcqSettings, log_weight: jax.Array | None = None
            ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Pick q points: argmax of LogEI over the available candidates (then qLogEI with earlier picks pending).

    cands_x: (N, D) feasible encoded candidates; available: (N,) bool (pool rows not yet used).
    Returns (x (q, D), candidate indices (q,), acquisition values (q,)). With refine_starts > 0 (continuous
    candidate sets only) each pick is refined by projected gradient ascent from the top candidates, and the
    returned index is -1 when the refined point won.

    log_weight: (N,) added to every candidate's log acquisition before the argmax (piBO's (beta / n) log pi(x),
    Hvarfner et al. 2022); the gradient refinement, when on, does not see it."""
    if log_weight is not None and settings.refine_starts > 0:
        raise ValueError("suggest: log_weight (a piBO prior) works on the candidate argmax only; expected "
                         "refine_starts=0")
    q = settings.q
    d = cands_x.shape[-1]
    pend_x = jnp.zeros((max(q - 1, 1), d), cands_x.dtype)
    pend_mask = jnp.zeros((max(q - 1, 1),), cands_x.dtype)
    xs, idxs, vals = [], [], []
    for j in range(q):
        if j == 0:
            def acq(x):
                return surrogate_log_ei(posts, lifts, best, x)
        else:
            def acq(x, pend_x=pend_x, pend_mask=pend_mask):
                return surrogate_qlog_ei_append(posts, lifts, best, x, pend_x, pend_mask, base)
        raw = acq(cands_x)
        if log_weight is not None:
            raw = raw + log_weight
        scores = jnp.where(available, raw, -jnp.inf)
        # argmax on scores rounded to 1e-9: candidates tied up to float rounding (e.g. pool rows that differ only
        # in a feature the GP ignores) go to the lowest index whatever the device layout / batch size
        idx = jnp.argmax(jnp.round(scores * 1e9))
        x, val = cands_x[idx], scores[idx]
        if settings.refine_starts > 0:
            _, top = jax.lax.top_k(scores, settings.refine_starts)
            starts = cands_x[top]
            fn = lambda z: acq(z[None])[0]
            refined = jax.vmap(lambda z: refine(fn, z, cont_mask, settings.refine_steps, settings.refine_lr))(starts)
            rvals = acq(refined)
            rvals = jnp.where(jnp.isfinite(rvals), rvals, -jnp.inf)
            r = jnp.argmax(rvals)
            better = rvals[r] > val
            x = jnp.where(better, refined[r], x)
            val = jnp.where(better, rvals[r], val)
            idx = jnp.where(better, -1, idx)
        available = available & (jnp.arange(cands_x.shape[0]) != idx)
        xs.append(x), idxs.append(idx), vals.append(val)
        if j < q - 1:
            pend_x = pend_x.at[j].set(x)
            pend_mask = pend_mask.at[j].set(1.0)
    return jnp.stack(xs), jnp.stack(idxs), jnp.stack(vals)
