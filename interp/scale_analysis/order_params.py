"""Order parameters of a posterior sample: which feature-learning pattern the network is in.

  A_f           alignment <f, y>/<y, y> on held-out data (the paper's primary quantity; A_f ~ 1 is necessary
                for learning by Cauchy-Schwarz: int (f - y)^2 >= <y, y> (A_f - 1)^2)
  test_mse      <(f - y)^2>/<y, y> on held-out data
  kernel_drift  ||K - K0||_F of the last hidden kernel K = phi phi^T / N_L on probe points, against the prior's
                expected kernel K0, in units of its mean under the prior (GP / lazy pattern: ~1; learning: > 1)
  cov_align1    first-layer covariance alignment (w*^T S w*) / (tr S / d), S = mean_i u_i u_i^T (prior: ~1;
                Gaussian feature learning: > 1)
  spec1         count of specialised first-layer neurons: |overlap| |cos(w_i, w*)| (prior sd 1/sqrt(d)) is an
                outlier both of the prior and of the bulk of the layer (`specialist_mask`), so a collective
                tilt of every neuron towards w* is not counted
  kta           kernel-target alignment y^T K y / (||K||_F |y|^2) of the last hidden kernel (second layer for
                three-layer nets)
  spec2, corr2  three layers only: the same count for the second layer, on the overlap u_j = corr(h2_j, w*.x)
                of each pre-activation with the LINEAR feature w*.x on held-out data (what a GP-Spec specialist
                carries: a lazy first layer passes w*.x on through the linear part of erf), and the mean |u_j|;
  corr2_he3     the mean |corr(h2_j, He3(w*.x))|, the earlier (uninformative for GP-Spec) second-layer measure
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import scipy.stats

from interp.scale_analysis import model as model_lib

MAD_TO_SD = 1.4826   # sd of a normal = 1.4826 x its median absolute deviation


def alignment(f: jax.Array, y: jax.Array) -> jax.Array:
    """A_f = <f, y> / <y, y> under the empirical measure of the rows."""
    return jnp.mean(f * y) / jnp.mean(y * y)


def kernel_target_alignment(k: jax.Array, y: jax.Array) -> jax.Array:
    """y^T K y / (||K||_F y^T y), in [-1, 1]; 1 when K is proportional to y y^T."""
    return (y @ k @ y) / (jnp.linalg.norm(k) * (y @ y))


def cosines(w: jax.Array, w_star: jax.Array) -> jax.Array:
    """cos(w_i, w*) for the rows of w (N, d)."""
    return (w @ w_star) / (jnp.linalg.norm(w, axis=-1) * jnp.linalg.norm(w_star) + 1e-30)


def correlations(h: jax.Array, z: jax.Array) -> jax.Array:
    """Pearson corr(h[:, j], z) over the rows, for every column j of h (n, N)."""
    hc = h - h.mean(0)
    zc = z - z.mean()
    return (zc @ hc) / (jnp.linalg.norm(hc, axis=0) * jnp.linalg.norm(zc) + 1e-30)


def covariance_alignment(w: jax.Array, w_star: jax.Array) -> jax.Array:
    """(w*^T S w*) / (tr S / d) with S = W^T W / N and |w*| = 1: 1 in expectation under an isotropic prior."""
    proj = w @ w_star
    return jnp.mean(proj * proj) / (jnp.mean(jnp.sum(w * w, axis=-1)) / w.shape[-1])


def prior_spec_fraction(d: int, threshold: float) -> float:
    """P(|cos(w, w*)| > tau) for isotropic w in R^d: cos^2 ~ Beta(1/2, (d-1)/2); the baseline count of spec1."""
    if d < 2:
        return 1.0 if threshold < 1 else 0.0
    return float(scipy.stats.beta.sf(threshold ** 2, 0.5, (d - 1) / 2))


def specialist_mask(u: jax.Array, prior_sd: float | jax.Array, multiple: float) -> jax.Array:
    """Which units are specialists, from their overlaps u (N,) with the feature and the overlap's prior sd.

    On the folded overlaps a = |u| (a specialist may lock onto +feature or -feature): a unit counts when
    a > multiple * prior_sd (an outlier of the prior: the threshold scales with the prior's own width,
    1/sqrt(d) for first-layer cosines) AND a - median(a) > multiple * max(s, prior_sd), s = 1.4826 MAD(a) (an
    outlier of its own layer's bulk). A collective tilt or a shared magnetisation moves the whole bulk, median
    and all, so it is not counted; a few units locked onto the feature sit in a second mode above the bulk."""
    a = jnp.abs(u)
    m = jnp.median(a)
    s = MAD_TO_SD * jnp.median(jnp.abs(a - m))
    scale = jnp.maximum(s, prior_sd)
    return (a > multiple * prior_sd) & (a - m > multiple * scale)


def specialist_count(u: jax.Array, prior_sd: float | jax.Array, multiple: float) -> jax.Array:
    """The number of specialists among units with overlaps u (see `specialist_mask`)."""
    return jnp.sum(specialist_mask(u, prior_sd, multiple).astype(jnp.float32))


def make_observer(problem) -> Callable[[model_lib.Params], dict[str, jax.Array]]:
    """observe(params) -> dict of scalar order parameters, for use inside the scanned chain."""
    x, y, w_star = problem.x_test, problem.y_test, problem.w_star
    z = x @ w_star
    yp = y[: problem.n_probe]
    k0 = problem.probe_kernel
    c = problem.spec_multiple
    sd1 = 1.0 / math.sqrt(problem.d)

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
            "spec1": specialist_count(cosines(params["w1"], w_star), sd1, c),
            "kta": kernel_target_alignment(k, yp),
        }
        if len(hs) == 2:
            u2 = correlations(hs[1], z)
            out["spec2"] = specialist_count(u2, problem.prior_sd2, c)
            out["corr2"] = jnp.mean(jnp.abs(u2))
            out["corr2_he3"] = jnp.mean(jnp.abs(correlations(hs[1], y)))
        return out

    return observe
