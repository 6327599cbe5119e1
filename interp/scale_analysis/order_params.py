"""Order parameters of a posterior sample: which feature-learning pattern the network is in.

  A_f           alignment <f, y>/<y, y> on held-out data (the paper's primary quantity; A_f ~ 1 is necessary
                for learning by Cauchy-Schwarz: int (f - y)^2 >= <y, y> (A_f - 1)^2)
  test_mse      <(f - y)^2>/<y, y> on held-out data
  kernel_drift  ||K - K0||_F of the last hidden kernel K = phi phi^T / N_L on probe points, against the prior's
                expected kernel K0, in units of its mean under the prior (GP / lazy pattern: ~1; learning: > 1)
  cov_align1    first-layer covariance alignment (w*^T S w*) / (tr S / d), S = mean_i u_i u_i^T (prior: ~1;
                Gaussian feature learning: > 1)
  spec1         fraction of first-layer neurons with |cos(w_i, w*)| > tau (specialisation)
  kta           kernel-target alignment y^T K y / (||K||_F |y|^2) of the last hidden kernel (second layer for
                three-layer nets)
  spec2, corr2  three layers only: fraction of second-layer neurons whose pre-activation has |corr(h2_j, y)|
                > tau on held-out data, and the mean |corr(h2_j, y)|
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import scipy.stats

from interp.scale_analysis import model as model_lib


def alignment(f: jax.Array, y: jax.Array) -> jax.Array:
    """A_f = <f, y> / <y, y> under the empirical measure of the rows."""
    return jnp.mean(f * y) / jnp.mean(y * y)


def kernel_target_alignment(k: jax.Array, y: jax.Array) -> jax.Array:
    """y^T K y / (||K||_F y^T y), in [-1, 1]; 1 when K is proportional to y y^T."""
    return (y @ k @ y) / (jnp.linalg.norm(k) * (y @ y))


def cosines(w: jax.Array, w_star: jax.Array) -> jax.Array:
    """cos(w_i, w*) for the rows of w (N, d)."""
    return (w @ w_star) / (jnp.linalg.norm(w, axis=-1) * jnp.linalg.norm(w_star) + 1e-30)


def covariance_alignment(w: jax.Array, w_star: jax.Array) -> jax.Array:
    """(w*^T S w*) / (tr S / d) with S = W^T W / N and |w*| = 1: 1 in expectation under an isotropic prior."""
    proj = w @ w_star
    return jnp.mean(proj * proj) / (jnp.mean(jnp.sum(w * w, axis=-1)) / w.shape[-1])


def prior_spec_fraction(d: int, threshold: float) -> float:
    """P(|cos(w, w*)| > tau) for isotropic w in R^d: cos^2 ~ Beta(1/2, (d-1)/2); the baseline count of spec1."""
    if d < 2:
        return 1.0 if threshold < 1 else 0.0
    return float(scipy.stats.beta.sf(threshold ** 2, 0.5, (d - 1) / 2))


def make_observer(problem) -> Callable[[model_lib.Params], dict[str, jax.Array]]:
    """observe(params) -> dict of scalar order parameters, for use inside the scanned chain."""
    x, y, w_star = problem.x_test, problem.y_test, problem.w_star
    yp = y[: problem.n_probe]
    k0 = problem.probe_kernel
    tau = problem.spec_threshold

    def observe(params):
        hs = model_lib.hidden(params, x)
        phi = jax.scipy.special.erf(hs[-1])
        f = phi @ params["a"] / math.sqrt(phi.shape[-1])
        phip = phi[: problem.n_probe]
        k = phip @ phip.T / phi.shape[-1]
        out = {
            "A_f": alignment(f, y),
            "test_mse": jnp.mean((f - y) ** 2) / jnp.mean(y * y),
            "kernel_drift": jnp.linalg.norm(k - k0) / problem.probe_drift0,
            "cov_align1": covariance_alignment(params["w1"], w_star),
            "spec1": jnp.mean(jnp.abs(cosines(params["w1"], w_star)) > tau),
            "kta": kernel_target_alignment(k, yp),
        }
        if len(hs) == 2:
            h2 = hs[1] - hs[1].mean(0)
            yc = y - y.mean()
            corr = (yc @ h2) / (jnp.linalg.norm(h2, axis=0) * jnp.linalg.norm(yc) + 1e-30)
            out["spec2"] = jnp.mean(jnp.abs(corr) > tau)
            out["corr2"] = jnp.mean(jnp.abs(corr))
        return out

    return observe
