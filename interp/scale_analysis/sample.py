"""Langevin sampling of the Bayesian posterior of the paper, as one scanned program vmapped over chains.

Posterior (method notes, eq. of section 0), in the prior-whitened coordinates of `model.py`:
    pi(theta) ~ exp(-U),   U(theta) = (1/(2 kappa)) sum_{mu<=P} (f_theta(x_mu) - y_mu)^2 + |theta|^2 / 2.
The sampler is underdamped Langevin dynamics integrated with BAOAB (Leimkuhler & Matthews): one gradient
per step, O(eta^2) bias in the configurational marginal, and exact Gaussian marginals for quadratic U, which
the linear-Gaussian test uses. (The paper does not state its sampler; Langevin is this package's choice.)

The data term's curvature grows like P/kappa, so every chain takes eta(P) = step_size / sqrt(1 + c P/kappa)
(stability of BAOAB needs eta * sqrt(lambda_max) < 2), and runs for the same SIMULATED time at every P: the
step count is sim_time / eta(P) (`steps_per_record`), so a large-P chain is not given less physical time than
a small-P one. Chains are annealed in P (`make_stage`): the ascending chain starts from a prior draw at the
smallest P and carries its state (positions and momenta) up the grid; the descending chain starts from a
planted state matched to the predicted pattern (`planted_init`) at the largest P and carries it down. Both
directions see the same training data (nested in P), so at each P they sample the same posterior and their
split-R-hat (`split_rhat`, the same estimator as numpyro's `split_gelman_rubin`) says whether they agree.
A stage is a `lax.scan` over records of a `fori_loop` over steps, vmapped over seeds; one compiled program per
point serves every stage (the data are padded to the point's largest P and masked; P, the step size and the
step count are traced), since on a shared CPU compiles cost more than the padding.
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
              record_every: int | jax.Array, p0: Any = None) -> tuple[ChainState, dict[str, jax.Array]]:
    """Run n_records * record_every BAOAB steps from q0 (momenta p0, or fresh from N(0, I)); observe(q) at each
    record. `record_every` may be a traced integer (one compiled program serves every step count).

    Returns the final state and traces {name: (n_records,)}.
    """
    k0, key = jax.random.split(key)
    leaves, treedef = jax.tree.flatten(q0)
    if p0 is None:
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


def beta_ladder(replicas: int, beta_min: float) -> tuple[float, ...]:
    """Inverse temperatures of the data term for parallel tempering: geometric from 1 (the posterior, replica 0)
    down to beta_min; (1.0,) for a single replica."""
    if replicas < 1 or not 0 < beta_min <= 1:
        raise ValueError(f"replicas={replicas!r}, beta_min={beta_min!r}: expected replicas >= 1 and "
                         "0 < beta_min <= 1")
    if replicas == 1:
        return (1.0,)
    return tuple(float(beta_min ** (k / (replicas - 1))) for k in range(replicas))


def swap_neighbours(energies: jax.Array, betas: jax.Array, parity: jax.Array, key: jax.Array
                    ) -> tuple[jax.Array, jax.Array]:
    """One replica-exchange sweep over the neighbour pairs (k, k+1) with k = parity mod 2: the states of replicas
    k and k+1 (at inverse temperatures beta_k > beta_k+1 of the data term E) trade places with probability
    min(1, exp((beta_k - beta_k+1) (E_k - E_k+1))), the Metropolis ratio of the swapped product of
    pi_beta ~ exp(-beta E - prior) (the prior terms cancel). Returns (perm (K,), accepted (K - 1,) with 0 for
    pairs not attempted): replica k's new state is the old state of replica perm[k]."""
    K = energies.shape[0]
    k = jnp.arange(K - 1)
    log_ratio = (betas[:-1] - betas[1:]) * (energies[:-1] - energies[1:])
    attempt = (k % 2) == (parity % 2)
    accept = attempt & (jnp.log(jax.random.uniform(key, (K - 1,))) < log_ratio)
    idx = jnp.arange(K)
    up = jnp.concatenate([accept, jnp.zeros((1,), bool)])     # replica k takes k+1's state
    down = jnp.concatenate([jnp.zeros((1,), bool), accept])   # replica k+1 takes k's state
    perm = jnp.where(up, idx + 1, jnp.where(down, idx - 1, idx))
    return perm, accept


SWAP_STREAM = 2 ** 31 - 1  # the swap draws' fold-in index under a record's key (steps use 0 .. record_every - 1)


def run_tempered_chain(grad_fn: Callable[[Any, jax.Array], Any], energy_fn: Callable[[Any], jax.Array],
                       observe: Callable[[Any], Mapping[str, jax.Array]], q0: Any, p0: Any, key: jax.Array, *,
                       betas: Sequence[float], eta: jax.Array, friction: float, n_records: int,
                       record_every: int | jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
    """Parallel tempering: K replicas (leading axis of q0 / p0) run BAOAB on U_beta = beta E + prior, one beta per
    replica (`grad_fn(q, beta)`), and after each record's steps neighbours swap states (positions and momenta;
    even pairs at even records, odd at odd) by `swap_neighbours`. Replica 0 (beta 1) samples the posterior and
    is the one observed; traces also hold `swap_accept`, the mean acceptance of the record's attempted swaps."""
    b = jnp.asarray(betas, jnp.float32)
    K = b.shape[0]
    grads = jax.vmap(grad_fn)
    state = ChainState(q0, p0, grads(q0, b))
    step = jax.vmap(lambda s, k, beta: baoab_step(lambda q: grad_fn(q, beta), s, k, eta, friction))

    def record(state, r):
        rkey = jax.random.fold_in(key, r)

        def body(i, s):
            return step(s, jax.random.split(jax.random.fold_in(rkey, i), K), b)

        state = jax.lax.fori_loop(0, record_every, body, state)
        perm, accept = swap_neighbours(jax.vmap(energy_fn)(state.q), b, r, jax.random.fold_in(rkey, SWAP_STREAM))
        q = _tmap(lambda x: x[perm], state.q)
        p = _tmap(lambda x: x[perm], state.p)
        state = ChainState(q, p, grads(q, b))
        attempted = jnp.sum((jnp.arange(K - 1) % 2) == (r % 2))
        out = dict(observe(_tmap(lambda x: x[0], q)))
        out["swap_accept"] = jnp.sum(accept) / jnp.maximum(attempted, 1)
        return state, out

    state, traces = jax.lax.scan(record, state, jnp.arange(n_records))
    return state.q, state.p, traces


def step_sizes(p_values: jax.typing.ArrayLike, *, step_size: float, curvature: float,
               kappa: float) -> jax.Array:
    """eta(P) = step_size / sqrt(1 + curvature * P / kappa): BAOAB is stable for eta * sqrt(lambda_max) < 2."""
    return step_size / jnp.sqrt(1.0 + curvature * jnp.asarray(p_values, jnp.float32) / kappa)


def step_size_at(p: float, *, step_size: float, curvature: float, kappa: float) -> float:
    """eta(P) as a Python float (the same formula as `step_sizes`)."""
    return float(step_size / math.sqrt(1.0 + curvature * float(p) / kappa))


def steps_per_record(p: float, *, sim_time: float, n_records: int, step_size: float, curvature: float,
                     kappa: float) -> int:
    """Steps between records so that n_records records cover at least `sim_time` of simulated time at eta(P):
    ceil(sim_time / (eta(P) n_records)). Equal simulated time at every P means ~sqrt(P) more steps at large P."""
    if sim_time <= 0 or n_records < 1:
        raise ValueError(f"sim_time={sim_time!r}, n_records={n_records!r}: expected sim_time > 0, n_records >= 1")
    eta = step_size_at(p, step_size=step_size, curvature=curvature, kappa=kappa)
    return max(1, math.ceil(sim_time / (eta * n_records) - 1e-9))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything the chains of one (arch, d, widths, kappa) point share: scales, teacher, held-out data."""

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
    spec_multiple: float          # specialist threshold, in prior sds of the overlap (order_params.specialist_mask)
    prior_sd2: float              # three layers: prior sd of corr(h2_j, w*.x) (Monte Carlo); 1/sqrt(d) otherwise
    prior_count1: float           # expected specialist counts of a prior draw (Monte Carlo), subtracted as baseline
    prior_count2: float


def make_problem(key: jax.Array, *, arch: str, d: int, widths: Sequence[int], kappa: float, n_test: int,
                 n_probe: int, spec_multiple: float = 2.5, prior_draws: int = 32) -> Problem:
    """Teacher direction, a held-out test set, the prior kernel and the prior levels of the specialist counts
    (Monte Carlo over prior draws)."""
    model_lib.check_arch(arch, d, widths)
    if not kappa > 0:
        raise ValueError(f"kappa={kappa!r}: expected kappa > 0 (at kappa -> 0 the posterior-to-prior bound "
                         "is vacuous)")
    if not 0 < n_probe <= n_test:
        raise ValueError(f"n_probe={n_probe!r}: expected 0 < n_probe <= n_test={n_test}")
    if not spec_multiple > 0:
        raise ValueError(f"spec_multiple={spec_multiple!r}: expected a positive multiple of the prior sd")
    widths = tuple(int(w) for w in widths)
    w_star, x_test, y_test, k0, drift0, u1, u2 = _problem_arrays(key, arch, d, widths, n_test, n_probe,
                                                                  prior_draws)
    sd1 = 1.0 / math.sqrt(d)
    sd2 = float(np.sqrt(np.mean(np.asarray(u2) ** 2))) if arch == "three" else sd1
    count = jax.vmap(lambda u, s: order_params.specialist_count(u, s, spec_multiple), in_axes=(0, None))
    c1 = float(np.mean(np.asarray(count(u1, sd1))))
    c2 = float(np.mean(np.asarray(count(u2, sd2)))) if arch == "three" else 0.0
    return Problem(arch=arch, d=d, widths=widths, kappa=float(kappa), w_star=w_star,
                   x_test=x_test, y_test=y_test, probe_kernel=k0, probe_drift0=drift0, n_probe=n_probe,
                   spec_multiple=float(spec_multiple), prior_sd2=sd2, prior_count1=c1, prior_count2=c2)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _problem_arrays(key, arch, d, widths, n_test, n_probe, prior_draws):
    kw, kt, kp = jax.random.split(key, 3)
    w_star = data_lib.teacher_direction(kw, d)
    x_test, y_test = data_lib.sample(kt, n_test, w_star)
    xp = x_test[:n_probe]
    z = x_test @ w_star

    def prior_stats(k):
        params = model_lib.init_params(k, arch, d, widths)
        phi = model_lib.features(params, xp)
        u1 = order_params.cosines(params["w1"], w_star)
        hs = model_lib.hidden(params, x_test)
        u2 = order_params.correlations(hs[-1], z)
        return phi @ phi.T / phi.shape[-1], u1, u2

    ks, u1, u2 = jax.lax.map(prior_stats, jax.random.split(kp, prior_draws))
    k0 = ks.mean(0)
    drift0 = jnp.mean(jnp.sqrt(jnp.sum((ks - k0) ** 2, axis=(1, 2)))) * math.sqrt(prior_draws / (prior_draws - 1))
    return w_star, x_test, y_test, k0, drift0, u1, u2


PLANT_PATTERNS = ("Spec", "Spec-Mag", "GP-Spec", "first")


def planted_init(key: jax.Array, problem: Problem, x: jax.Array, y: jax.Array, *, pattern: str,
                 n_first: int = 0, n_second: int = 0, mask: jax.Array | None = None) -> model_lib.Params:
    """A learned-looking start in the given pattern: a prior draw, then

      Spec / Spec-Mag / first: n_first first-layer neurons along w* (norms spread over [0.5, 1.5] sqrt(d),
                 signs alternating, so that erf units of several scales can carry He3);
      Spec-Mag:  also a magnetisation of the second layer: every second-layer row gets a shared component of
                 amplitude sqrt(N1 / n_first) on the planted units (random sign per row);
      GP-Spec:   a prior (lazy) first layer and n_second second-layer rows whose pre-activation is the linear
                 feature h2_j = alpha_j w*.x (alpha_j over [0.5, 1.5], signs alternating): W2_j is the ridge
                 regression of alpha_j w*.x on the first layer's erf features of the training inputs;

    with the readout set to its conditional posterior mode given the rest (a ridge solve on (x, y), rows
    weighted by `mask`). The descending chain starts here; a chain from a prior draw is the other start."""
    if pattern not in PLANT_PATTERNS:
        raise ValueError(f"pattern={pattern!r}: expected one of {PLANT_PATTERNS}")
    params = model_lib.init_params(key, problem.arch, problem.d, problem.widths)
    mask = jnp.ones(x.shape[0], x.dtype) if mask is None else mask
    n1 = problem.widths[0]
    if pattern in ("Spec", "Spec-Mag", "first"):
        k = max(1, min(int(n_first), n1))
        scales = jnp.linspace(0.5, 1.5, k) * math.sqrt(problem.d)
        signs = jnp.where(jnp.arange(k) % 2 == 0, 1.0, -1.0)
        params["w1"] = params["w1"].at[:k].set((scales * signs)[:, None] * problem.w_star[None, :])
        if pattern == "Spec-Mag" and problem.arch == "three":
            n2 = problem.widths[1]
            row_sign = jnp.where(jax.random.bernoulli(jax.random.fold_in(key, 7), 0.5, (n2,)), 1.0, -1.0)
            mag = math.sqrt(n1 / k) * row_sign[:, None] * signs[None, :]
            params["w2"] = params["w2"].at[:, :k].add(mag)
    elif pattern == "GP-Spec":
        if problem.arch != "three":
            raise ValueError("pattern='GP-Spec' plants second-layer specialists: expected arch='three'")
        n2 = problem.widths[1]
        k = max(1, min(int(n_second), n2))
        phi1 = jax.scipy.special.erf(model_lib.hidden(params, x)[0]) * mask[:, None]    # (P, N1)
        z = (x @ problem.w_star) * mask
        gram = phi1.T @ phi1 / n1 + 1e-2 * jnp.eye(n1)
        beta = jnp.linalg.solve(gram, phi1.T @ z / math.sqrt(n1))             # phi1 beta / sqrt(N1) ~ z
        alphas = jnp.linspace(0.5, 1.5, k) * jnp.where(jnp.arange(k) % 2 == 0, 1.0, -1.0)
        params["w2"] = params["w2"].at[:k].set(alphas[:, None] * beta[None, :])
    phi = model_lib.features(params, x)                       # (P, N_L)
    n_l = phi.shape[-1]
    # U restricted to a: |phi a / sqrt(N) - y|^2 / (2 kappa) + |a|^2 / 2  ->  its minimiser
    phi = phi * mask[:, None]
    gram = phi.T @ phi / (n_l * problem.kappa) + jnp.eye(n_l)
    rhs = phi.T @ (y * mask) / (math.sqrt(n_l) * problem.kappa)
    params["a"] = jnp.linalg.solve(gram, rhs)
    return params


def data_energy(params: model_lib.Params, x: jax.Array, y: jax.Array, kappa: float,
                mask: jax.Array | None = None) -> jax.Array:
    """E = sum_mu mask_mu (f(x_mu) - y_mu)^2 / (2 kappa): the data term of U, the one tempering scales."""
    r = model_lib.forward(params, x) - y
    sq = r * r if mask is None else mask * r * r
    return 0.5 * jnp.sum(sq) / kappa


def potential(params: model_lib.Params, x: jax.Array, y: jax.Array, kappa: float,
              mask: jax.Array | None = None, beta: jax.typing.ArrayLike = 1.0) -> jax.Array:
    """U = beta sum_mu mask_mu (f(x_mu) - y_mu)^2 / (2 kappa) + |theta|^2 / 2 (whitened prior; mask defaults to
    1; beta 1 is the posterior, beta < 1 a tempered one)."""
    prior = sum(jnp.sum(v * v) for v in jax.tree.leaves(params))
    return beta * data_energy(params, x, y, kappa, mask) + 0.5 * prior


def training_data(key: jax.Array, p_max: int, w_star: jax.Array) -> tuple[jax.Array, jax.Array]:
    """p_max training pairs; row i is drawn from fold_in(key, i), so (called unbatched) the first P rows do not
    depend on p_max. Under vmap the RBG generator's draws depend on the batch shape, which is why a point's
    stages share one p_max and mask (every stage and both directions of a point see the same rows)."""
    x = jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), w_star.shape))(jnp.arange(p_max))
    return x, data_lib.target(x, w_star)


def data_key(seed_key: jax.Array) -> jax.Array:
    """The training-data key of a seed: every chain of that seed (both directions, every P) sees the same rows."""
    return jax.random.fold_in(seed_key, 0)


def make_init(problem: Problem, *, p_max: int, pattern: str | None, n_first: int = 0,
              n_second: int = 0) -> Callable[[jax.Array, jax.Array], tuple[Any, Any]]:
    """A jitted init(seed_keys (B,), p) -> (positions, momenta) batched over seeds: a prior draw (pattern None)
    or the planted state of `planted_init` fitted on the seed's first p (<= p_max) training rows."""

    def one(seed_key, p):
        ki = jax.random.fold_in(seed_key, 1 if pattern is None else 2)
        if pattern is None:
            q = model_lib.init_params(ki, problem.arch, problem.d, problem.widths)
        else:
            x, y = training_data(data_key(seed_key), p_max, problem.w_star)
            mask = (jnp.arange(p_max) < p).astype(x.dtype)
            q = planted_init(ki, problem, x, y, pattern=pattern, n_first=n_first, n_second=n_second, mask=mask)
        leaves, treedef = jax.tree.flatten(q)
        km = jax.random.fold_in(seed_key, 3 if pattern is None else 4)
        mom = jax.tree.unflatten(treedef, [jax.random.normal(k, v.shape, v.dtype)
                                           for k, v in zip(jax.random.split(km, len(leaves)), leaves)])
        return q, mom

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def make_stage(problem: Problem, *, p_max: int, n_records: int, friction: float,
               betas: Sequence[float] = (1.0,)) -> Callable[..., Any]:
    """A jitted stage(q, mom, seed_keys, noise_keys, eta, record_every, p) -> (q, mom, traces {name: (B, R)}):
    BAOAB at sample size p (<= p_max; the seed's first p training rows, the rest masked) continued from
    positions q and momenta mom (batched over B chains), n_records records of `record_every` steps each.
    eta, record_every and p are traced scalars: one compiled program serves every stage of a point.

    With several `betas` (see `beta_ladder`) each chain is a parallel-tempering ensemble: q and mom carry a
    replica axis after the batch axis (B, K, ...), replica 0 samples the posterior and is the one observed, and
    the traces add `swap_accept` (`run_tempered_chain`)."""
    if p_max < 1:
        raise ValueError(f"p_max={p_max!r}: expected >= 1")
    betas = tuple(float(b) for b in betas)
    if not betas or betas[0] != 1.0 or any(not 0 < b <= a for a, b in zip(betas, betas[1:])):
        raise ValueError(f"betas={betas!r}: expected a decreasing ladder starting at 1.0")
    observe = order_params.make_observer(problem)
    kappa = problem.kappa

    def one(q, mom, seed_key, noise_key, eta, record_every, p):
        x, y = training_data(data_key(seed_key), p_max, problem.w_star)
        mask = (jnp.arange(p_max) < p).astype(x.dtype)
        if len(betas) > 1:
            grad_fn = jax.grad(lambda q, beta: potential(q, x, y, kappa, mask, beta))
            return run_tempered_chain(grad_fn, lambda q: data_energy(q, x, y, kappa, mask), observe, q, mom,
                                      noise_key, betas=betas, eta=eta, friction=friction, n_records=n_records,
                                      record_every=record_every)
        grad_fn = jax.grad(lambda q: potential(q, x, y, kappa, mask))
        state, traces = run_chain(grad_fn, observe, q, noise_key, eta=eta, friction=friction,
                                  n_records=n_records, record_every=record_every, p0=mom)
        return state.q, state.p, traces

    return jax.jit(jax.vmap(one, in_axes=(0, 0, 0, 0, None, None, None)))


def with_replicas(tree: Any, replicas: int) -> Any:
    """Batched chain states (B, ...) -> (B, K, ...): every replica of a tempering ensemble starts where the chain
    does (the ascending anneal from its prior draw, the descending one from its planted state)."""
    return _tmap(lambda x: jnp.repeat(x[:, None], replicas, axis=1), tree)


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
    """Split-R-hat (Gelman-Rubin) of chains (C, T): ~1 when the chains sample the same distribution. Each chain
    is split into its first and last floor(T/2) draws (numpyro's `split_gelman_rubin` convention), then
    R-hat = sqrt(((T'-1)/T' W + B/T') / W) with W the mean within-chain variance and B/T' the variance of the
    chain means (T' = floor(T/2))."""
    c = np.asarray(chains, np.float64)
    t = c.shape[1] // 2
    if t < 2:
        return float("nan")
    c = np.concatenate([c[:, :t], c[:, -t:]], axis=0)
    if not np.all(np.isfinite(c)):
        return float("nan")
    w = c.var(axis=1, ddof=1).mean()
    b = t * c.mean(axis=1).var(ddof=1)
    var = (t - 1) / t * w + b / t
    return float(np.sqrt(var / w)) if w > 0 else float("nan")
