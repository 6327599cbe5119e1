"""DecAlign's objective terms as pure JAX functions (paper Sec. 3; shapes in the docstrings).

- decoupling: mean over modalities of cos^2(flatten s_m, flatten c_m);
- heterogeneity: per-batch diagonal Gaussian mixture prototypes (unrolled EM) + multi-marginal entropic OT
  between the three modalities' prototypes through ott-jax's MMSinkhorn (log domain), plus the local
  sample-to-prototype term;
- homogeneity: moment matching (mean, covariance, skewness) and Gaussian-kernel MMD;
- supervised contrastive loss on the fused representation.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from ott.experimental import mmsinkhorn
from ott.geometry import costs

_PAIRS = ((0, 1), (0, 2), (1, 2))


def decoupling_loss(s: jax.Array, c: jax.Array) -> jax.Array:
    """s, c: (M, B, L, d) unique and common features -> mean over m and batch of cos^2(flat s, flat c)."""
    s = s.reshape(s.shape[0], s.shape[1], -1)
    c = c.reshape(c.shape[0], c.shape[1], -1)
    cos = jnp.sum(s * c, -1) / (jnp.linalg.norm(s, axis=-1) * jnp.linalg.norm(c, axis=-1) + 1e-8)
    return jnp.mean(cos**2)


class Mixture(NamedTuple):
    """A diagonal Gaussian mixture: weights (K,), means (K, d), variances (K, d)."""

    weights: jax.Array
    means: jax.Array
    variances: jax.Array


def _log_joint(x: jax.Array, g: Mixture) -> jax.Array:
    """(B, d) x (K components) -> (B, K) log pi_k + log N(x | mu_k, diag var_k)."""
    d = x.shape[-1]
    diff = x[:, None, :] - g.means[None]
    quad = jnp.sum(diff**2 / g.variances[None], -1)
    logdet = jnp.sum(jnp.log(g.variances), -1)
    return jnp.log(g.weights)[None] - 0.5 * (quad + logdet[None] + d * jnp.log(2 * jnp.pi))


def gmm_log_likelihood(x: jax.Array, g: Mixture) -> jax.Array:
    """Mean log-likelihood of x (B, d) under the mixture."""
    return jnp.mean(jax.nn.logsumexp(_log_joint(x, g), axis=-1))


def fit_diag_gmm(x: jax.Array, num_components: int, iters: int = 5, var_floor: float = 1e-4,
                 ) -> tuple[Mixture, jax.Array, jax.Array]:
    """Unrolled EM for a diagonal GMM on x (B, d); differentiable w.r.t. x.

    Initialised with K evenly spaced samples as means, the data variance and uniform weights. Returns the
    mixture, the final posteriors (B, K) and the log-likelihood after each EM step (iters,). The variance
    floor is applied as max(var, floor), the constrained maximiser, so the likelihood never decreases.
    """
    b, _ = x.shape
    idx = jnp.round(jnp.linspace(0, b - 1, num_components)).astype(jnp.int32)
    g = Mixture(weights=jnp.full((num_components,), 1.0 / num_components),
                means=x[idx],
                variances=jnp.broadcast_to(jnp.maximum(jnp.var(x, 0), var_floor), (num_components, x.shape[1])))

    def step(g, _):
        r = jax.nn.softmax(_log_joint(x, g), axis=-1)  # E-step (B, K)
        nk = jnp.sum(r, 0) + 1e-10
        means = (r.T @ x) / nk[:, None]
        var = (r.T @ (x**2)) / nk[:, None] - means**2
        var = jnp.maximum(var, var_floor)
        new = Mixture(weights=nk / jnp.sum(nk), means=means, variances=var)
        return new, gmm_log_likelihood(x, new)

    g, lls = jax.lax.scan(step, g, None, length=iters)
    post = jax.nn.softmax(_log_joint(x, g), axis=-1)
    return g, post, lls


def diag_w2_cost(mu1: jax.Array, var1: jax.Array, mu2: jax.Array, var2: jax.Array) -> jax.Array:
    """Closed-form squared 2-Wasserstein between diagonal Gaussians, mean-reduced over d: (K1, d), (K2, d) -> (K1, K2).

    W2^2 = mean_d (mu_i - mu_j)^2 + mean_d (var_i + var_j - 2 sqrt(var_i var_j)).
    """
    s1, s2 = jnp.sqrt(var1), jnp.sqrt(var2)
    dm = jnp.mean((mu1[:, None] - mu2[None]) ** 2, -1)
    dv = jnp.mean(var1[:, None] + var2[None] - 2 * s1[:, None] * s2[None], -1)
    return dm + dv


def gaussian_points(g: Mixture) -> jax.Array:
    """Embed diagonal Gaussians as [mu, sigma] / sqrt(d): their squared Euclidean distance is `diag_w2_cost`."""
    d = g.means.shape[-1]
    return jnp.concatenate([g.means, jnp.sqrt(g.variances)], -1) / jnp.sqrt(d)


class OTResult(NamedTuple):
    loss: jax.Array  # <P, C> + eps * sum P (log P - 1) at the solution (Danskin gradients)
    plan: jax.Array  # (K, K, K) transport tensor
    marginals_error: jax.Array  # sum_m |P marginal m - nu_m|_1


def multimarginal_ot(mixtures: tuple[Mixture, ...], marginals: tuple[jax.Array, ...], *, epsilon: float = 0.1,
                     iters: int = 50) -> OTResult:
    """Entropic multi-marginal OT between the modalities' prototypes with cost C[i,j,k] = sum of pairwise W2^2.

    Solved by ott-jax's log-domain MMSinkhorn for a fixed number of iterations; its cost is the dual value
    sum_m <f_m, nu_m> + eps (1 - sum P), which equals the primal <P,C> + eps sum P(log P - 1) + eps at
    convergence, so we subtract eps.
    """
    solver = mmsinkhorn.MMSinkhorn(min_iterations=iters, max_iterations=iters, inner_iterations=iters,
                                   threshold=0.0, use_danskin=True)
    xs = tuple(gaussian_points(g) for g in mixtures)
    # Danskin: the potentials are solved on stopped inputs (no backward pass through the Sinkhorn loop);
    # the dual value is then re-evaluated with the live cost tensor and marginals, whose gradients are
    # the plan (w.r.t. C) and the potentials (w.r.t. the marginals).
    out = solver(jax.lax.stop_gradient(xs), a_s=jax.lax.stop_gradient(tuple(marginals)),
                 cost_fns=costs.SqEuclidean(), epsilon=epsilon)
    pots = tuple(jax.lax.stop_gradient(jnp.where(jnp.isfinite(f), f, 0.0)) for f in out.potentials)
    cost_t = mmsinkhorn.cost_tensor(xs, costs.SqEuclidean())
    plan = mmsinkhorn.coupling_tensor(pots, cost_t, epsilon)
    dual = sum(jnp.sum(f * a) for f, a in zip(pots, marginals)) + epsilon * (1.0 - jnp.sum(plan))
    err = sum(jnp.sum(jnp.abs(m - a)) for m, a in zip(mmsinkhorn.tensor_marginals(plan), marginals))
    return OTResult(loss=dual - epsilon, plan=plan, marginals_error=jax.lax.stop_gradient(err))


def local_prototype_loss(pooled: jax.Array, posts: jax.Array, means: jax.Array) -> jax.Array:
    """pooled (M, B, d), posts (M, B, K), means (M, K, d): sample-to-prototype term over the 6 ordered pairs.

    For the ordered pair (m, n): mean_i sum_k post_m[i, k] * mean_d (x_m[i] - mu_n[k])^2.
    """
    terms = []
    for m, n in itertools.permutations(range(pooled.shape[0]), 2):
        dist = jnp.mean((pooled[m][:, None] - means[n][None]) ** 2, -1)  # (B, K)
        terms.append(jnp.mean(jnp.sum(posts[m] * dist, -1)))
    return jnp.mean(jnp.stack(terms))


def heterogeneity_loss(s_pooled: jax.Array, *, num_prototypes: int = 7, em_iters: int = 5, var_floor: float = 1e-4,
                       epsilon: float = 0.1, ot_iters: int = 50) -> tuple[jax.Array, dict]:
    """s_pooled (3, B, d): mean-pooled unique features -> (OT + local loss, diagnostics)."""
    stacked, posts, _ = jax.vmap(lambda x: fit_diag_gmm(x, num_prototypes, em_iters, var_floor))(s_pooled)
    mixtures = tuple(Mixture(*(leaf[m] for leaf in stacked)) for m in range(s_pooled.shape[0]))
    nu = jnp.mean(posts, 1) + 1e-6  # (M, K) mean posteriors = prototype weights
    nu = nu / jnp.sum(nu, -1, keepdims=True)
    ot = multimarginal_ot(mixtures, tuple(nu), epsilon=epsilon, iters=ot_iters)
    local = local_prototype_loss(s_pooled, posts, stacked.means)
    return ot.loss + local, {"ot": ot.loss, "local": local, "ot_marginal_err": ot.marginals_error}


def _moments(z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    mu = jnp.mean(z, 0)
    zc = z - mu
    cov = zc.T @ zc / z.shape[0]
    skew = jnp.mean(zc**3, 0) / (jnp.diag(cov) + 1e-6) ** 1.5
    return mu, cov, skew


def moment_loss(z: jax.Array, pairs: str = "sum") -> jax.Array:
    """z (3, B, p): MSE between the modalities' means, covariances and skewnesses, summed (`pairs="sum"`) or
    averaged (`"mean"`, the official code's later variant) over the 3 modality pairs."""
    mom = [_moments(z[m]) for m in range(z.shape[0])]
    total = 0.0
    for i, j in _PAIRS:
        total += sum(jnp.mean((a - b) ** 2) for a, b in zip(mom[i], mom[j]))
    if pairs not in ("sum", "mean"):
        raise ValueError(f"pairs={pairs!r}: expected 'sum' or 'mean'")
    return total / len(_PAIRS) if pairs == "mean" else total


def mmd(x: jax.Array, y: jax.Array, bandwidth: float = 1.0) -> jax.Array:
    """Biased MMD^2 with the Gaussian kernel exp(-|a-b|^2 / (2 bandwidth)) between x (B, p) and y (B', p)."""
    def k(a, b):
        d2 = jnp.sum(a**2, -1)[:, None] + jnp.sum(b**2, -1)[None] - 2 * a @ b.T
        return jnp.exp(-jnp.maximum(d2, 0.0) / (2 * bandwidth))
    return jnp.mean(k(x, x)) + jnp.mean(k(y, y)) - 2 * jnp.mean(k(x, y))


def homogeneity_loss(z: jax.Array, bandwidth: float = 1.0, pairs: str = "sum") -> tuple[jax.Array, dict]:
    """z (3, B, p): distribution-encoded pooled common features -> moments + mean pairwise MMD."""
    mom = moment_loss(z, pairs)
    m = jnp.mean(jnp.stack([mmd(z[i], z[j], bandwidth) for i, j in _PAIRS]))
    return mom + m, {"moments": mom, "mmd": m}


def supcon_loss(features: jax.Array, classes: jax.Array, temperature: float = 0.1) -> jax.Array:
    """Supervised contrastive loss (Khosla et al. 2020) on L2-normalised features (B, p) with int classes (B,).

    Anchors without a positive in the batch are skipped.
    """
    f = features / (jnp.linalg.norm(features, axis=-1, keepdims=True) + 1e-8)
    logits = f @ f.T / temperature
    b = f.shape[0]
    eye = jnp.eye(b, dtype=bool)
    logits = jnp.where(eye, -jnp.inf, logits)
    log_prob = logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
    pos = (classes[:, None] == classes[None]) & ~eye
    npos = jnp.sum(pos, -1)
    per_anchor = -jnp.sum(jnp.where(pos, log_prob, 0.0), -1) / jnp.maximum(npos, 1)
    has = npos > 0
    return jnp.sum(jnp.where(has, per_anchor, 0.0)) / jnp.maximum(jnp.sum(has), 1)


def sentiment_classes(labels: jax.Array) -> jax.Array:
    """Regression labels in [-3, 3] -> the 7 Acc-7 classes (used to define SupCon positives)."""
    return (jnp.round(jnp.clip(labels, -3.0, 3.0)) + 3).astype(jnp.int32)
