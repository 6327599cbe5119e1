"""Simulated-preference BO experiments: the whole BO loop (fit, lift, acquisition, evaluation) as one
`lax.scan`, vmapped over arms and seeds, in float64.

Arms: none (plain GP-BO, c = 0.5 so the lift is exactly zero), aligned (a box of expected grid count `box_e`
around the true optimum, centre jittered every round), misaligned (the same box around a poor region) and
random (a box of the same size at a uniformly random place every round); all with confidence c. Baselines
added in issue 42: aligned_soft (the aligned box with the reference code's smoothing 0.06 on every box) and
pibo (no lift; LogEI weighted by a Gaussian prior over the optimum's location, piBO). Pools also get an exact
random-search reference (`random_search_expected`), no simulation needed.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from core.plots import line_plot
from core.train import progress as progress_bar
from core.train import write_metrics
from optimization import gp
from optimization.lgbo import acquisition, model, oracles
from optimization.lgbo.configs import ARMS, Config
from optimization.lgbo.data import Problem, get_problem
from optimization.lgbo.space import sobol


class LoopState(NamedTuple):
    x: jax.Array  # (n_max, D)
    y: jax.Array  # (n_max,) raw objective values
    n: jax.Array  # () number of observations
    params: gp.GPParams  # last MAP fit (warm start)
    available: jax.Array  # (N,) pool rows not yet evaluated ((1,) for closed-form problems)
    key: jax.Array


ARM_MODE = np.asarray([oracles.MODES.index(m) for m in ("none", "aligned", "misaligned", "random", "aligned", "none")])
assert len(ARM_MODE) == len(ARMS)


def simulated_region(arm: jax.Array, key: jax.Array, problem: Problem, config: Config) -> model.Region:
    """The simulated oracle's box for arm index (into ARMS) in unit coordinates."""
    return oracles.box_region(jnp.asarray(ARM_MODE)[arm], key, jnp.asarray(problem.optimum_u),
                              jnp.asarray(problem.poor_u),
                              side=oracles.box_side(config.box_e, config.n_grid, problem.space.n_params),
                              jitter=config.jitter, confidence=config.confidence)


def make_run(problem: Problem, config: Config):
    """-> run(key, arm) -> best-so-far raw values (iterations + 1,) for one BO loop (pure, jittable)."""
    space = problem.space
    d, n_max, q = space.dim, config.n_max, config.q
    grid_u = space.snap_unit(jnp.asarray(sobol(config.n_grid, space.n_params, seed=1234)))
    grid_x = space.encode_unit(grid_u)
    base = acquisition.qmc_normal(512 if q == 1 else 1024, q, seed=7)
    settings = acquisition.AcqSettings(q=q)
    cont = jnp.asarray(space.continuous_mask())
    if problem.is_pool:
        pool_x, pool_y = jnp.asarray(problem.pool_x), jnp.asarray(problem.pool_y)
        pool_u = jnp.asarray(problem.pool_u)
        n_pool = pool_x.shape[0]
    else:
        cand_u = jnp.asarray(sobol(config.n_candidates, space.n_params, seed=4321))
        f = problem.f
    side = oracles.box_side(config.box_e, config.n_grid, space.n_params)
    soft_arm, pibo_arm = ARMS.index("aligned_soft"), ARMS.index("pibo")

    def pibo_log_weight(arm, key, u, t):
        """(beta / n) log pi(u) for the piBO arm (0 otherwise): Gaussian prior, sd pibo_sd * side per unit
        coordinate, centred at the optimum plus a jitter of the aligned box's size drawn once per run."""
        jit = config.jitter * side * jax.random.uniform(jax.random.fold_in(key, 999_983), (space.n_params,),
                                                        minval=-1.0, maxval=1.0)
        centre = jnp.asarray(problem.optimum_u) + jit
        log_pi = -0.5 * jnp.sum(((u - centre) / (config.pibo_sd * side)) ** 2, axis=-1)
        return jnp.where(arm == pibo_arm, config.pibo_beta / (t + 1.0) * log_pi, 0.0)

    def init(key):
        k_init, k_loop = jax.random.split(key)
        x = jnp.zeros((n_max, d))
        y = jnp.zeros((n_max,))
        if problem.is_pool:
            idx = jax.random.choice(k_init, n_pool, (config.n_init,), replace=False)
            x0, y0 = pool_x[idx], pool_y[idx]
            available = jnp.ones((n_pool,), bool).at[idx].set(False)
        else:
            x0 = space.encode_unit(jax.random.uniform(k_init, (config.n_init, space.n_params)))
            y0, available = f(x0), jnp.ones((1,), bool)
        x = x.at[: config.n_init].set(x0)
        y = y.at[: config.n_init].set(y0)
        return LoopState(x, y, jnp.asarray(config.n_init), gp.default_params(d), available, k_loop)

    def step(arm, state: LoopState, t):
        key = jax.random.fold_in(state.key, t)
        k_region, k_cand = jax.random.split(key)
        mask = (jnp.arange(n_max) < state.n).astype(jnp.float64)
        ys, _, _ = gp.standardize(state.y, mask)
        params = gp.fit_map(state.x, ys, mask, state.params, steps=config.fit_steps)
        post = gp.posterior(params, state.x, ys, mask)
        region = simulated_region(arm, k_region, problem, config)
        soft = arm == soft_arm
        lift = model.make_lift(post, region, grid_u, grid_x, force_soft=soft,
                               softness=jnp.where(soft, model.REFERENCE_SOFTNESS, model.SOFTNESS))
        best = jnp.max(jnp.where(mask > 0, ys, -jnp.inf))
        posts, lifts = jax.tree.map(lambda a: a[None], (post, lift))
        if problem.is_pool:
            xq, idx, _ = acquisition.suggest(posts, lifts, best, pool_x, state.available, cont, base, settings,
                                             pibo_log_weight(arm, state.key, pool_u, t))
            yq = pool_y[idx]
            available = state.available.at[idx].set(False)
        else:  # Cranley-Patterson rotation of the fixed Sobol set: fresh, low-discrepancy candidates each round
            cu = jnp.mod(cand_u + jax.random.uniform(k_cand, (space.n_params,)), 1.0)
            cands = space.encode_unit(cu)
            xq, _, _ = acquisition.suggest(posts, lifts, best, cands, jnp.ones(cands.shape[0], bool), cont,
                                           base, settings, pibo_log_weight(arm, state.key, cu, t))
            yq, available = f(xq), state.available
        x = jax.lax.dynamic_update_slice(state.x, xq, (state.n, 0))
        y = jax.lax.dynamic_update_slice(state.y, yq, (state.n,))
        n = state.n + q
        best_raw = jnp.max(jnp.where(jnp.arange(n_max) < n, y, -jnp.inf))
        return LoopState(x, y, n, params, available, state.key), best_raw

    def run(key, arm):
        state = init(key)
        best0 = jnp.max(state.y[: config.n_init])
        _, bests = jax.lax.scan(lambda s, t: step(arm, s, t), state, jnp.arange(config.iterations))
        return jnp.concatenate([best0[None], bests])

    return run


def run_problem(problem: Problem, config: Config, mesh=None) -> np.ndarray:
    """Best-so-far curves (arms, seeds, iterations + 1) in raw objective units.

    Without a mesh the seeds run `seed_batch` at a time (one compiled vmapped batch, called once per batch
    under a progress bar; the last batch is padded by repeating a key); with a mesh (core.sharding.make_mesh)
    all seeds are vmapped and sharded over its "data" axis."""
    arms = jnp.asarray([ARMS.index(a) for a in config.arms])
    with jax.enable_x64(True):
        run = make_run(problem, config)
        keys = jax.random.split(jax.random.key(config.seed), config.seeds)
        per_seed = lambda k: jax.vmap(lambda a: run(k, a))(arms)  # (arms, T+1)
        if mesh is not None:
            from core.sharding import batch_sharding

            if config.seeds % mesh.shape["data"]:
                raise ValueError(f"seeds={config.seeds}: expected a multiple of the mesh's data axis "
                                 f"({mesh.shape['data']}) to shard seeds")
            keys = jax.device_put(keys, batch_sharding(mesh))
            curves = np.asarray(jax.jit(jax.vmap(per_seed), out_shardings=batch_sharding(mesh))(keys))
        else:
            size = min(config.seed_batch, config.seeds)
            padded = jnp.concatenate([keys, jnp.repeat(keys[-1:], -config.seeds % size, axis=0)])
            run_batch = jax.jit(jax.vmap(per_seed))
            starts = progress_bar(range(0, len(padded), size), desc=f"lgbo {problem.name}", unit="seed batch")
            curves = np.concatenate([np.asarray(run_batch(padded[i:i + size])) for i in starts])[:config.seeds]
    return np.transpose(curves, (1, 0, 2))  # (arms, seeds, T+1)


def random_search_expected(problem: Problem, config: Config) -> dict[str, Any]:
    """Exact expectations for random search of a pool: n = n_init + i rows drawn without replacement.

    With the N pool values sorted ascending, P(best of n <= y_(j)) = C(j, n) / C(N, n), so E[best of n] =
    sum_j y_(j) (C(j, n) - C(j-1, n)) / C(N, n); with m rows at or above the target, P(not reached) =
    C(N - m, n) / C(N, n), and E[iterations to target] (never reached within the budget: iterations + 1, as
    for the BO arms) = sum_{i=0}^{iterations} P(not reached after n_init + i rows)."""
    from scipy.special import gammaln

    if not problem.is_pool:
        raise ValueError(f"random_search_expected: {problem.name} is not a pool")
    y = np.sort(np.asarray(problem.pool_y, np.float64))
    N = len(y)
    lc = lambda a, b: np.where(a >= b, gammaln(a + 1) - gammaln(b + 1) - gammaln(np.maximum(a - b, 0) + 1), -np.inf)
    thr = problem.floor + config.target * (problem.optimum - problem.floor)
    m = int(np.sum(y >= thr))
    j = np.arange(1, N + 1, dtype=np.float64)
    best, miss = [], []
    for i in range(config.iterations + 1):
        n = config.n_init + i * config.q
        cdf = np.exp(lc(j, n) - lc(float(N), n))          # P(best <= y_(j))
        pmf = np.diff(np.concatenate([[0.0], cdf]))
        best.append(float(pmf @ y))
        miss.append(float(np.exp(lc(float(N - m), n) - lc(float(N), n))))
    best = np.asarray(best)
    progress = (best - problem.floor) / (problem.optimum - problem.floor)
    return {"iters_to_target_mean": float(np.sum(miss)), "reached_target": 1.0 - miss[-1],
            "final_regret_mean": float(problem.optimum - best[-1]), "final_progress_mean": float(progress[-1]),
            "curve_mean": progress.tolist(), "p_not_reached": miss}


def iterations_to_target(progress: np.ndarray, target: float) -> np.ndarray:
    """First iteration index whose progress reaches `target` (iterations + 1 if never: censored)."""
    hit = progress >= target
    return np.where(hit.any(-1), hit.argmax(-1), progress.shape[-1])


def summarise(problem: Problem, curves: np.ndarray, config: Config) -> dict[str, Any]:
    progress = (curves - problem.floor) / (problem.optimum - problem.floor)
    ttt = iterations_to_target(progress, config.target)
    regret = problem.optimum - curves[..., -1]
    out = {}
    for i, arm in enumerate(config.arms):
        out[arm] = {
            "iters_to_target_mean": float(ttt[i].mean()),
            "iters_to_target_median": float(np.median(ttt[i])),
            "reached_target": float((ttt[i] < progress.shape[-1]).mean()),
            "final_regret_mean": float(regret[i].mean()),
            "final_regret_sem": float(regret[i].std(ddof=1) / np.sqrt(len(regret[i]))) if len(regret[i]) > 1 else 0.0,
            "final_progress_mean": float(progress[i, :, -1].mean()),
            "curve_mean": progress[i].mean(0).tolist(),
            "curve_sem": (progress[i].std(0, ddof=1) / np.sqrt(progress.shape[1])).tolist()
            if progress.shape[1] > 1 else [0.0] * progress.shape[-1],
        }
    return out


def plot_curves(path: pathlib.Path, name: str, summary: Mapping[str, Any], target: float) -> None:
    """Best-so-far (% of the optimum) per arm with +-1 s.e.m. bands, and the target line."""
    curves = {}
    for arm, s in summary.items():
        m, e = 100 * np.asarray(s["curve_mean"]), 100 * np.asarray(s["curve_sem"])
        curves[arm] = (np.arange(len(m)), m, m - e, m + e)
    t = np.arange(len(m))
    curves[f"{100 * target:g} % target"] = (t, np.full(len(t), 100 * target))
    line_plot(path, curves, title=name, xlabel="BO iteration", ylabel="best so far (% of optimum)")


def plot_regret(path: pathlib.Path, name: str, summary: Mapping[str, Any]) -> None:
    """Normalised simple regret 1 - progress per arm (log scale)."""
    curves = {}
    for arm, s in summary.items():
        r = np.maximum(1.0 - np.asarray(s["curve_mean"]), 1e-6)
        curves[arm] = (np.arange(len(r)), r)
    line_plot(path, curves, title=f"{name}: regret", xlabel="BO iteration",
              ylabel="normalised regret (1 - best / optimum)", logy=True)


def train_and_evaluate(config: Config, workdir: pathlib.Path | str) -> dict[str, Any]:
    """Run every (problem, arm, seed); write metrics.json, lgbo_curves.json (per-arm curves) and one
    best-so-far PNG per problem into workdir."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, Any] = {}
    # each problem's curves are checkpointed when its runs finish; a killed run's rerun restores those problems
    from core.checkpoint import Checkpointer
    ckpt = Checkpointer(workdir / "checkpoints", keep=len(config.problems), config=config)
    done = ckpt.latest_step() or 0
    for k, name in enumerate(config.problems):
        problem = get_problem(name, ordinal=config.ordinal)
        t0 = time.perf_counter()
        if k < done:
            template = np.zeros((len(config.arms), config.seeds, config.iterations + 1), np.float64)
            curves, saved = ckpt.restore(template, step=k + 1)
            curves, seconds = np.asarray(curves), saved["wall_seconds"]
        else:
            curves = run_problem(problem, config)
            seconds = time.perf_counter() - t0
            ckpt.save(k + 1, curves, data_state={"problem": name, "wall_seconds": seconds})
        summary = summarise(problem, curves, config)
        summary["wall_seconds"] = seconds
        plot_curves(workdir / f"lgbo_{name}.png", name, {a: summary[a] for a in config.arms}, config.target)
        plot_regret(workdir / f"lgbo_{name}_regret.png", name, {a: summary[a] for a in config.arms})
        metrics[name] = summary
    ckpt.close()
    flat = {f"{p}/{a}/iters_to_target_mean": metrics[p][a]["iters_to_target_mean"]
            for p in config.problems for a in config.arms}
    flat.update({f"{p}/{a}/final_regret_mean": metrics[p][a]["final_regret_mean"]
                 for p in config.problems for a in config.arms})
    (workdir / "lgbo_curves.json").write_text(json.dumps(metrics, indent=1))
    # metrics.jsonl: one record per BO iteration, each (problem, arm)'s mean best-so-far progress (0 = the
    # problem's floor, 1 = its optimum); the campaigns are compiled scans, so it is written after them
    from core.train import MetricsLog
    log = MetricsLog(workdir / "metrics.jsonl", 0, config=config)
    iterations = len(metrics[config.problems[0]][config.arms[0]]["curve_mean"])
    for t in range(iterations):
        log.write({"step": t, **{f"progress/{p}/{a}": metrics[p][a]["curve_mean"][t]
                                 for p in config.problems for a in config.arms}})
    log.close()
    write_metrics(workdir, flat)
    return flat
