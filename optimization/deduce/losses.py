"""DEDUCE's pieces as pure functions over parameter pytrees.

Detect (G): gradient conflict <g_t, g_M> <= eps |g_t| |g_M| between the current batch and old-task replay.
Detect (B): the transferability bound E_T <= E_S + |1 - 2 eps(h_d)| + c |LEEP| (Nguyen et al. 2020 for LEEP).
LUM: one unlearning step on L_u = -CE(x_t, y_t) + alpha |theta - theta_prev|^2, Fisher-preconditioned (paper
form) or norm-rescaled with noise (released-code form).
Fisher: the diagonal Fisher with labels sampled from the model, F <- tau F_old + F_new.
GUM: continual-backprop resets (Dohare et al. 2024) with utility |h| x mean |w_out| x sigma(s x normalised
Fisher of the outgoing weights), of a fraction phi of mature units.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Params = Any


def cross_entropy(logits: jax.Array, y: jax.Array, weights: jax.Array | None = None) -> jax.Array:
    """Mean (or `weights`-weighted mean) softmax cross-entropy; logits (B, C), y (B,) int."""
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1)[:, 0]
    if weights is None:
        return nll.mean()
    return jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def tree_dot(a: Params, b: Params) -> jax.Array:
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def tree_norm(a: Params) -> jax.Array:
    return jnp.sqrt(tree_dot(a, a))


def gradient_conflict(g_t: Params, g_m: Params, epsilon: jax.Array | float) -> jax.Array:
    """Detector G: True when <g_t, g_M> <= eps |g_t| |g_M| (eps = 0: any obtuse angle). Scalar bool."""
    return tree_dot(g_t, g_m) <= epsilon * tree_norm(g_t) * tree_norm(g_m)


def lum_paper(params: Params, g_t: Params, anchor: Params, fisher: Params, *, delta, alpha,
              damping) -> Params:
    """Paper-form LUM: theta' = theta - delta P (grad L_u), L_u = -CE + alpha |theta - anchor|^2,
    P = 1 / (damping + F / mean F) per tensor (a damped stand-in for F^-1 that moves high-Fisher weights less).

    The printed update theta + delta F^-1 [alpha grad D - grad CE] has the opposite sign to a descent step on
    L_u; we take the descent step on L_u (unlearn = ascend the current loss, stay near theta_prev).
    """
    def one(p, g, a, f):
        grad_u = -g + 2.0 * alpha * (p - a)
        precond = 1.0 / (damping + f / (jnp.mean(f) + 1e-12))
        return p - delta * precond * grad_u
    return jax.tree.map(one, params, g_t, anchor, fisher)


def lum_code(params: Params, g_t: Params, anchor: Params, fisher: Params, key: jax.Array, *, delta, alpha,
             lr, noise, fisher_scale) -> tuple[Params, Params]:
    """Released-code-form LUM: an SGD copy theta_c = theta - lr grad L_u, the per-tensor step rescaled to the
    weights' norm, theta' = theta + delta (Delta |theta| / |Delta| + noise xi) / (1 + scale F).
    Returns (theta', theta_c); the learn step then pulls toward theta_c."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.tree.unflatten(treedef, list(jax.random.split(key, len(leaves))))

    def one(p, g, a, f, k):
        copy = p - lr * (-g + 2.0 * alpha * (p - a))
        d = copy - p
        d_hat = d * jnp.linalg.norm(p) / (jnp.linalg.norm(d) + 1e-12)
        xi = jax.random.normal(k, p.shape, p.dtype)
        return p + delta * (d_hat + noise * xi) / (1.0 + fisher_scale * f), copy

    pairs = jax.tree.map(one, params, g_t, anchor, fisher, keys)
    new = jax.tree.map(lambda pr: pr[0], pairs, is_leaf=lambda x: isinstance(x, tuple))
    copy = jax.tree.map(lambda pr: pr[1], pairs, is_leaf=lambda x: isinstance(x, tuple))
    return new, copy


def fisher_penalty(params: Params, target: Params, fisher: Params) -> jax.Array:
    """sum F (theta - target)^2 (EWC-style quadratic pull)."""
    return sum(jnp.sum(f * (p - t) ** 2) for p, t, f in
               zip(jax.tree.leaves(params), jax.tree.leaves(target), jax.tree.leaves(fisher)))


def diag_fisher(apply: Callable, params: Params, x: jax.Array, key: jax.Array, weights: jax.Array,
                chunk: int = 16) -> Params:
    """Diagonal Fisher E_x E_{y~p(.|x)} (d log p(y|x) / d theta)^2 with one sampled label per example.

    x: (N, ...) with N a multiple of `chunk`; weights: (N,) 1 for real rows, 0 for padding.
    """
    n = x.shape[0]
    ys = jax.random.categorical(key, apply(params, x)[0])

    def logp(p, xi, yi):
        return jax.nn.log_softmax(apply(p, xi[None])[0][0])[yi]

    per_example = jax.vmap(jax.grad(logp), in_axes=(None, 0, 0))

    def body(acc, idx):
        xs, yc, wc = x[idx], ys[idx], weights[idx]
        g = per_example(params, xs, yc)
        return jax.tree.map(lambda a, gi: a + jnp.einsum("n,n...->...", wc, gi ** 2), acc, g), None

    idx = jnp.arange(n).reshape(-1, chunk)
    total, _ = jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), idx)
    return jax.tree.map(lambda t: t / jnp.maximum(jnp.sum(weights), 1.0), total)


def diag_fisher_released(apply: Callable, params: Params, x: jax.Array, y: jax.Array, weights: jax.Array,
                         chunk: int = 16) -> Params:
    """The released code's Fisher weighting: mean_x p(y|x) (d log p(y|x) / d theta)^2 at the TRUE label y
    (an empirical Fisher, each example weighted by the probability the model gives its label).

    x: (N, ...) with N a multiple of `chunk`; y: (N,) int; weights: (N,) 1 for real rows, 0 for padding.
    """
    n = x.shape[0]

    def logp(p, xi, yi):
        return jax.nn.log_softmax(apply(p, xi[None])[0][0])[yi]

    per_example = jax.vmap(jax.value_and_grad(logp), in_axes=(None, 0, 0))

    def body(acc, idx):
        lp, g = per_example(params, x[idx], y[idx])
        wc = weights[idx] * jnp.exp(lp)
        return jax.tree.map(lambda a, gi: a + jnp.einsum("n,n...->...", wc, gi ** 2), acc, g), None

    idx = jnp.arange(n).reshape(-1, chunk)
    total, _ = jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), idx)
    return jax.tree.map(lambda t: t / jnp.maximum(jnp.sum(weights), 1.0), total)


class GumState(NamedTuple):
    age: dict[str, jax.Array]       # layer -> (units,) int32 steps since (re)initialisation
    utility: dict[str, jax.Array]   # layer -> (units,) float32 EMA of the gated contribution utility
    pending: dict[str, jax.Array]   # layer -> () float32 fractional count of units owed a reset


def init_gum(params: Params, pairs) -> GumState:
    units = {layer: params[layer]["bias"].shape[0] for layer, _ in pairs}
    return GumState(age={k: jnp.zeros((u,), jnp.int32) for k, u in units.items()},
                    utility={k: jnp.zeros((u,), jnp.float32) for k, u in units.items()},
                    pending={k: jnp.zeros((), jnp.float32) for k in units})


def gum_step(params: Params, gum: GumState, hiddens: dict[str, jax.Array], fisher: Params, key: jax.Array,
             pairs, *, rate, maturity, decay, gate_scale, max_resets: int = 1
             ) -> tuple[Params, GumState, jax.Array]:
    """One GUM update: score units, then reset up to `max_resets` of the lowest-utility mature units per layer.

    Utility of unit u: EMA of mean_batch |h_u| x mean_j |W_next[u, j]| x sigmoid(s x F_u / max F), with F_u the
    mean Fisher of u's outgoing weights. A reset draws new incoming weights (LeCun normal), zeroes the bias and
    outgoing weights (so the network's function is unchanged), and restarts age and utility.
    Returns (params, gum, number of units reset).
    """
    params = {k: dict(v) for k, v in params.items()}
    age, util, pend = dict(gum.age), dict(gum.utility), dict(gum.pending)
    n_reset = jnp.zeros((), jnp.int32)
    for li, (layer, nxt) in enumerate(pairs):
        w_out = params[nxt]["kernel"]                       # (units, next)
        f_out = jnp.mean(fisher[nxt]["kernel"], axis=1)
        gate = jax.nn.sigmoid(gate_scale * f_out / (jnp.max(f_out) + 1e-12))
        inst = jnp.mean(jnp.abs(hiddens[layer]), axis=0) * jnp.mean(jnp.abs(w_out), axis=1) * gate
        u = decay * util[layer] + (1.0 - decay) * inst
        a = age[layer] + 1
        mature = a > maturity
        owed = pend[layer] + rate * jnp.sum(mature)
        k = min(max_resets, u.shape[0])
        neg, idx = jax.lax.top_k(jnp.where(mature, -u, -jnp.inf), k)
        n_now = jnp.minimum(jnp.floor(owed), k).astype(jnp.int32)
        chosen = (jnp.arange(k) < n_now) & jnp.isfinite(neg)
        reset = jnp.zeros(u.shape, bool).at[idx].max(chosen)
        kernel = params[layer]["kernel"]
        fan_in = kernel.shape[0]
        fresh = jax.random.truncated_normal(jax.random.fold_in(key, li), -2.0, 2.0, (fan_in, k))
        fresh = fresh * (1.0 / jnp.sqrt(fan_in)) / 0.87962566  # LeCun normal (nnx's default kernel init)
        cols = jnp.where(chosen[None, :], fresh, kernel[:, idx])
        params[layer]["kernel"] = kernel.at[:, idx].set(cols)
        params[layer]["bias"] = jnp.where(reset, 0.0, params[layer]["bias"])
        params[nxt]["kernel"] = jnp.where(reset[:, None], 0.0, w_out)
        age[layer] = jnp.where(reset, 0, a)
        util[layer] = jnp.where(reset, 0.0, u)
        pend[layer] = owed - jnp.sum(chosen)
        n_reset = n_reset + jnp.sum(chosen).astype(jnp.int32)
    return params, GumState(age, util, pend), n_reset


def leep(source_probs: jax.Array, target_y: jax.Array, num_target: int, weights: jax.Array) -> jax.Array:
    """LEEP (Nguyen et al. 2020): mean_x log sum_z P(y(x) | z) P(z | x), with the empirical conditional
    P(y | z) = P(y, z) / P(z) from the source model's softmax P(z | x) over the target data.
    source_probs (N, Z), target_y (N,), weights (N,) 1 for real rows."""
    w = weights / jnp.maximum(jnp.sum(weights), 1.0)
    onehot = jax.nn.one_hot(target_y, num_target)                      # (N, Y)
    joint = jnp.einsum("n,nz,ny->yz", w, source_probs, onehot)        # (Y, Z)
    cond = joint / (jnp.sum(joint, axis=0, keepdims=True) + 1e-12)    # P(y | z)
    per = jnp.einsum("nz,nz->n", source_probs, cond[target_y])       # sum_z P(y_n|z) P(z|x_n)
    return jnp.sum(w * jnp.log(per + 1e-12))


def domain_error(feat_old: jax.Array, w_old: jax.Array, feat_new: jax.Array, w_new: jax.Array, key: jax.Array,
                 *, steps: int, lr: float = 0.5, train_share: float = 0.7) -> jax.Array:
    """Test error of a logistic-regression domain classifier h_d (old buffer vs new task, 70/30 split).

    feat_*: (n, d) features; w_*: (n,) 1 for real rows. Returns the held-out error eps(h_d) in [0, 1]."""
    x = jnp.concatenate([feat_old, feat_new])
    y = jnp.concatenate([jnp.zeros(feat_old.shape[0]), jnp.ones(feat_new.shape[0])])
    w = jnp.concatenate([w_old, w_new])
    mu, sd = jnp.mean(x, 0), jnp.std(x, 0) + 1e-6
    x = (x - mu) / sd
    is_train = jax.random.uniform(key, (x.shape[0],)) < train_share
    wt, we = w * is_train, w * (~is_train)

    def loss(theta):
        z = x @ theta[:-1] + theta[-1]
        ll = jax.nn.log_sigmoid(z) * y + jax.nn.log_sigmoid(-z) * (1 - y)
        return -jnp.sum(wt * ll) / jnp.maximum(jnp.sum(wt), 1.0)

    theta = jax.lax.fori_loop(0, steps, lambda i, th: th - lr * jax.grad(loss)(th), jnp.zeros(x.shape[1] + 1))
    pred = (x @ theta[:-1] + theta[-1]) > 0
    return jnp.sum(we * (pred != (y > 0.5))) / jnp.maximum(jnp.sum(we), 1.0)


def transfer_bound(old_error, domain_err, leep_score, c) -> jax.Array:
    """Detector B's bound on the new task's error: E_S + |1 - 2 eps(h_d)| + c |LEEP|."""
    return old_error + jnp.abs(1.0 - 2.0 * domain_err) + c * jnp.abs(leep_score)
