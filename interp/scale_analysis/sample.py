"""Langevin sampling of the Bayesian posterior of the paper, as one scanned program vmapped over chains.

Posterior (method notes, eq. of section 0), in the prior-whitened coordinates of `model.py`:
    pi(theta) ~ exp(-U),   U(theta) = (1/(2 kappa)) sum_{mu<=P} (f_theta(x_mu) - y_mu)^2 + |theta|^2 / 2.
The sampler is underdamped Langevin dynamics integrated with BAOAB (Leimkuhler & Matthews): one gradient
per step, O(eta^2) bias in the configurational marginal, and exact Gaussian marginals for quadratic U, which
the linear-Gaussian test uses. (The paper does not state its sampler; Langevin is this package's choice.)

The data term's curvature grows like P/kappa, so every chain takes eta(P) = step_size / sqrt(1 + c P/kappa)
(stability of BAOAB needs eta * sqrt(lambda_max) < 2). A whole chain is a `lax.scan` over records of a
`fori_loop` over steps; `make_sweep` vmaps it over (seed, P, initialisation) in one compiled program, with
the data of all P padded to the largest P of the call and masked.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from interp.scale_analysis import data as data_lib
from interp.scale_analysis import model as model_lib
from interp.scale_analysis import order_params


class ChainState(NamedTuple):
    q: Any          # position pytree
    p: Any          # momentum pytree
    grad: Any       # grad U(q), carried so that each step costs one gradient


def _tmap(f, *trees):
    return jax.tree.map(f, *trees)


def baoab_step(grad_fn: Callable[[Any], Any], state: ChainState, key: jax.Array, eta: jax.Array,
               friction: float) -> ChainState:
    """One BAOAB step of dq = p dt, dp = -grad U dt - gamma p dt + sqrt(2 gamma) dW (unit mass, temperature 1)."""
    q, p, g = state
    p = _tmap(lambda p, g: p - 0.5 * eta * g, p, g)
    q = _tmap(lambda q, p: q + 0.5 * eta * p, q, p)
    c = jnp.exp(-friction * eta)
    leaves, treedef = jax.tree.flatten(p)
    flat = jax.random.normal(key, (sum(x.size for x in leaves),), leaves[0].dtype)   # one draw per step
    noise, start = [], 0
    for x in leaves:
        noise.append(flat[start:start + x.size].reshape(x.shape))
        start += x.size
    p = jax.tree.unflatten(treedef, [c * x + jnp.sqrt(1.0 - c * c) * n for x, n in zip(leaves, noise)])
    q = _tmap(lambda q, p: q + 0.5 * eta * p, q, p)
    g = grad_fn(q)
    p = _tmap(lambda p, g: p - 0.5 * eta * g, p, g)
    return ChainState(q, p, g)


def run_chain(grad_fn: Callable[[Any], Any], observe: Callable[[Any], Mapping[str, jax.Array]], q0: Any,
              key: jax.Array, *, eta: jax.Array, friction: float, n_records: int,
              record_every: int) -> tuple[ChainState, dict[str, jax.Array]]:
    """Run n_records * record_every BAOAB steps from q0 (momenta from N(0, I)); observe(q) at each record.

    Returns the final state and traces {name: (n_records,)}.
    """
    k0, key = jax.random.split(key)
    leaves, treedef = jax.tree.flatten(q0)
    p0 = jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype)
                                      for k, x in zip(jax.random.split(k0, len(leaves)), leaves)])
    state = ChainState(q0, p0, grad_fn(q0))

    def record(state, r):
        rkey = jax.random.fold_in(key, r)

        def body(i, s):
            return baoab_step(grad_fn, s, jax.random.fold_in(rkey, i), eta, friction)

        state = jax.lax.fori_loop(0, record_every, body, state)
        return state, dict(observe(state.q))

    return jax.lax.scan(record, state, jnp.arange(n_records))


def step_sizes(p_values: jax.typing.ArrayLike, *, step_size: float, curvature: float,
               kappa: float) -> jax.Array:
    """eta(P) = step_size / sqrt(1 + curvature * P / kappa): BAOAB is stable for eta * sqrt(lambda_max) < 2."""
    return step_size / jnp.sqrt(1.0 + curvature * jnp.asarray(p_values, jnp.float32) / kappa)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything a sweep over (seed, P, init) shares: architecture, scales, teacher, held-out data."""

    arch: str
    d: int
    widths: tuple[int, ...]
    kappa: float
    w_star: jax.Array
    x_test: jax.Array
    y_test: jax.Array
    probe_kernel: jax.Array       # prior expectation of the last hidden kernel on x_test[:n_probe]
    probe_drift0: jax.Array       # prior mean of ||K - K0||_F: the finite-width level of the kernel drift
    n_probe: int
    spec_threshold: float


def make_problem(key: jax.Array, *, arch: str, d: int, widths: Sequence[int], kappa: float, n_test: int,
                 n_probe: int, spec_threshold: float, prior_draws: int = 32) -> Problem:
    """Teacher direction, a held-out test set, and the prior kernel (Monte Carlo over prior draws)."""
    model_lib.check_arch(arch, d, widths)
    if not kappa > 0:
        raise ValueError(f"kappa={kappa!r}: expected kappa > 0 (at kappa -> 0 the posterior-to-prior bound "
                         "is vacuous)")
    if not 0 < n_probe <= n_test:
        raise ValueError(f"n_probe={n_probe!r}: expected 0 < n_probe <= n_test={n_test}")
    w_star, x_test, y_test, k0, drift0 = _problem_arrays(key, arch, d, tuple(int(w) for w in widths), n_test,
                                                         n_probe, prior_draws)
    return Problem(arch=arch, d=d, widths=tuple(int(w) for w in widths), kappa=float(kappa), w_star=w_star,
                   x_test=x_test, y_test=y_test, probe_kernel=k0, probe_drift0=drift0, n_probe=n_probe,
                   spec_threshold=float(spec_threshold))


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _problem_arrays(key, arch, d, widths, n_test, n_probe, prior_draws):
    kw, kt, kp = jax.random.split(key, 3)
    w_star = data_lib.teacher_direction(kw, d)
    x_test, y_test = data_lib.sample(kt, n_test, w_star)
    xp = x_test[:n_probe]

    def prior_kernel(k):
        phi = model_lib.features(model_lib.init_params(k, arch, d, widths), xp)
        return phi @ phi.T / phi.shape[-1]

    ks = jax.lax.map(prior_kernel, jax.random.split(kp, prior_draws))
    k0 = ks.mean(0)
    drift0 = jnp.mean(jnp.sqrt(jnp.sum((ks - k0) ** 2, axis=(1, 2)))) * math.sqrt(prior_draws / (prior_draws - 1))
    return w_star, x_test, y_test, k0, drift0


def planted_init(key: jax.Array, problem: Problem, n_planted: int, x: jax.Array, y: jax.Array,
                 mask: jax.Array) -> model_lib.Params:
    """A learned-looking start: a prior draw whose first n_planted first-layer neurons point along w* (norms
    spread over [0.5, 1.5] sqrt(d), signs alternating, so that erf units of several scales can carry He3), with
    the readout set to its conditional posterior mean given the rest (a ridge solve on the training data).
    Started from both this and a prior draw, a chain that ends in the same state from both is equilibrated."""
    params = model_lib.init_params(key, problem.arch, problem.d, problem.widths)
    n1 = problem.widths[0]
    k = max(1, min(int(n_planted), n1))
    scales = jnp.linspace(0.5, 1.5, k) * math.sqrt(problem.d)
    signs = jnp.where(jnp.arange(k) % 2 == 0, 1.0, -1.0)
    planted = (scales * signs)[:, None] * problem.w_star[None, :]
    params["w1"] = params["w1"].at[:k].set(planted)
    phi = model_lib.features(params, x)                       # (P_max, N_L)
    n_l = phi.shape[-1]
    # U restricted to a: |phi a / sqrt(N) - y|^2_mask / (2 kappa) + |a|^2 / 2  ->  its minimiser
    gram = (phi * mask[:, None]).T @ phi / (n_l * problem.kappa) + jnp.eye(n_l)
    rhs = (phi * mask[:, None]).T @ y / (math.sqrt(n_l) * problem.kappa)
    params["a"] = jnp.linalg.solve(gram, rhs)
    return params


def potential(params: model_lib.Params, x: jax.Array, y: jax.Array, mask: jax.Array,
              kappa: float) -> jax.Array:
    """U = sum_mu mask_mu (f(x_mu) - y_mu)^2 / (2 kappa) + |theta|^2 / 2 (whitened prior)."""
    r = model_lib.forward(params, x) - y
    prior = sum(jnp.sum(v * v) for v in jax.tree.leaves(params))
    return 0.5 * jnp.sum(mask * r * r) / kappa + 0.5 * prior


def training_data(key: jax.Array, p_max: int, w_star: jax.Array) -> tuple[jax.Array, jax.Array]:
    """p_max training pairs; row i is drawn from fold_in(key, i), so the first P rows do not depend on p_max."""
    x = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), w_star.shape))(jnp.arange(p_max))
    return x, data_lib.target(x, w_star)


def make_sweep(problem: Problem, *, p_max: int, n_records: int, record_every: int, step_size: float,
               friction: float, curvature: float, n_planted: int) -> Callable[..., dict[str, jax.Array]]:
    """A jitted sweep(seed_keys (B,), p_values (B,), planted (B,) bool) -> traces {name: (B, n_records)}.

    Chains with the same seed key share their training data (row i is drawn from fold_in(seed key, i), so
    the first P rows are the same whatever p_max: sample sizes are nested across calls); each chain has its
    own Langevin noise.
    """
    if p_max < 1:
        raise ValueError(f"p_max={p_max!r}: expected >= 1")
    observe = order_params.make_observer(problem)
    kappa = problem.kappa

    def chain(seed_key, p_value, is_planted):
        kd, ki, kn = jax.random.split(seed_key, 3)
        x, y = training_data(kd, p_max, problem.w_star)
        mask = (jnp.arange(p_max) < p_value).astype(x.dtype)
        ki = jax.random.fold_in(ki, is_planted.astype(jnp.int32))
        q_prior = model_lib.init_params(ki, problem.arch, problem.d, problem.widths)
        q_plant = planted_init(ki, problem, n_planted, x, y, mask)
        q0 = jax.tree.map(lambda a, b: jnp.where(is_planted, b, a), q_prior, q_plant)
        eta = step_sizes(p_value, step_size=step_size, curvature=curvature, kappa=kappa)
        grad_fn = jax.grad(lambda q: potential(q, x, y, mask, kappa))
        noise_key = jax.random.fold_in(jax.random.fold_in(kn, p_value), is_planted.astype(jnp.int32))
        _, traces = run_chain(grad_fn, observe, q0, noise_key, eta=eta, friction=friction,
                              n_records=n_records, record_every=record_every)
        return traces

    return jax.jit(jax.vmap(chain))


def split_seed_keys(seed: int, n_seeds: int, impl: str = "rbg") -> jax.Array:
    """n_seeds typed keys, one per data/disorder realisation. The RBG generator (XLA's RngBitGenerator for the
    bits, threefry for splitting) compiles several times faster on CPU than threefry in the Langevin loop."""
    return jax.random.split(jax.random.key(seed, impl=impl), n_seeds)


def integrated_autocorr_time(trace: np.ndarray) -> float:
    """Integrated autocorrelation time (in records) of a 1-D trace, Sokal's window with c = 5."""
    x = np.asarray(trace, np.float64)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 4 or np.var(x) == 0:
        return float("nan") if n < 4 else 1.0
    x = x - x.mean()
    f = np.fft.rfft(x, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n]
    acf /= acf[0]
    tau = 1.0
    for m in range(1, n):
        tau += 2.0 * acf[m]
        if m >= 5.0 * tau:
            break
    return float(max(tau, 1.0))


def split_rhat(chains: np.ndarray) -> float:
    """Split-R-hat (Gelman-Rubin) of chains (C, T): ~1 when the chains sample the same distribution."""
    c = np.asarray(chains, np.float64)
    t = c.shape[1] // 2
    if t < 2:
        return float("nan")
    c = np.concatenate([c[:, :t], c[:, t:2 * t]], axis=0)
    if not np.all(np.isfinite(c)):
        return float("nan")
    w = c.var(axis=1, ddof=1).mean()
    b = t * c.mean(axis=1).var(ddof=1)
    var = (t - 1) / t * w + b / t
    return float(np.sqrt(var / w)) if w > 0 else float("nan")
