"""Whole experiments in one jit: lax.scan over rounds, vmap over seeds, one compiled program per algorithm.

`make_simulator(algorithm, env, T)` returns a jitted `simulate(seeds, net, hp) -> curves` that runs every
seed of one (algorithm, environment) pair for T rounds.  The network (P, sigma_2, D) and the
hyperparameters (eps) are traced arguments, so the same compiled program serves every topology and eps.

Regret: agent v's individual regret at t is R_t(v) = sum_{s<=t} <x_{v,s}, m_s> - min_k sum_{s<=t} m_s(k),
with m_s the expected global loss (agent average) and x_{v,s} the distribution agent v played (its
conditional expectation of the realised regret).  Curves report the mean over agents ("mean individual
regret", the paper's plotted quantity) and the worst agent.
"""

from __future__ import annotations

import math
import os
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .configs import Config
from .envs import make_env
from .model import AlgoConfig, make_algorithm
from .networks import Network, make_network


def net_arrays(net: Network, dtype=jnp.float32) -> dict:
    """The traced network arguments of a simulator."""
    return {"P": jnp.asarray(net.P, dtype), "sigma2": jnp.asarray(net.sigma2, dtype),
            "D": jnp.asarray(net.diameter, jnp.int32)}


def stack_nets(nets: list[dict]) -> dict:
    """Stack per-run network arguments along a new leading (run) axis."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *nets)


def make_simulator(algorithm: str, env, T: int, algo_cfg: AlgoConfig = AlgoConfig(), *, base_seed: int = 0,
                   jit: bool = True, in_shardings=None, out_shardings=None):
    """simulate(seeds (S,) int32, nets, hps) -> {"regret_mean": (R, S, T), "regret_max": (R, S, T),
    "truncated": (R, S)}.

    nets, hps: per-run arguments stacked on a leading axis of R runs (topologies, eps values): every run
    of one algorithm is one call of one compiled program.  Seed s of every run sees the same environment
    instance and the same random numbers (common random numbers across topologies and eps).
    """
    algo = make_algorithm(algorithm, algo_cfg)
    V, K = env.V, env.K
    B = V + 1                        # ring of pending bias records: D <= V - 1 < B

    def one_seed(seed, net, hp):
        key = jax.random.fold_in(jax.random.key(base_seed), seed)
        k_env, k_run = jax.random.split(key)
        params = env.init(k_env)
        state = algo.init(V, K, B)

        def body(carry, t):
            state, cum_alg, cum_mean, trunc = carry
            k_loss, k_act = jax.random.split(jax.random.fold_in(k_run, t))
            feedback, mean = env.step(params, t, k_loss)
            state, x, aux = algo.step(state, t, k_act, feedback, net, hp)
            cum_alg = cum_alg + x @ mean
            cum_mean = cum_mean + mean
            regret = cum_alg - jnp.min(cum_mean)
            return (state, cum_alg, cum_mean, trunc + aux), (jnp.mean(regret), jnp.max(regret))

        carry = (state, jnp.zeros((V,)), jnp.zeros((K,)), jnp.zeros(()))
        (_, _, _, trunc), (r_mean, r_max) = jax.lax.scan(body, carry, jnp.arange(1, T + 1, dtype=jnp.int32))
        return {"regret_mean": r_mean, "regret_max": r_max, "truncated": trunc / T}

    def simulate(seeds, nets, hps):
        per_run = jax.vmap(one_seed, in_axes=(0, None, None))
        return jax.vmap(per_run, in_axes=(None, 0, 0))(seeds, nets, hps)

    if not jit:
        return simulate
    return jax.jit(simulate, in_shardings=in_shardings, out_shardings=out_shardings)


def slope(t: np.ndarray, r: np.ndarray, t_from: float) -> float:
    """Least-squares slope of log r against log t over 50 log-spaced rounds in [t_from, T] (r > 0 only)."""
    T = len(r)
    ts = np.unique(np.geomspace(max(1, t_from), T, 50).astype(int))
    y = r[ts - 1]
    ok = y > 0
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(ts[ok]), np.log(y[ok]), 1)[0])


def summarize(curves: dict, *, t_from: float) -> dict:
    """Final mean individual regret over seeds (mean, std, 95% CI half-width), worst agent, slope."""
    r = np.asarray(curves["regret_mean"], np.float64)        # (S, T)
    S, T = r.shape
    final = r[:, -1]
    mean_curve = r.mean(0)
    return {
        "final_regret": float(final.mean()),
        "final_regret_std": float(final.std(ddof=1)) if S > 1 else 0.0,
        "final_regret_ci95": float(1.96 * final.std(ddof=1) / math.sqrt(S)) if S > 1 else 0.0,
        "final_regret_worst_agent": float(np.asarray(curves["regret_max"])[:, -1].mean()),
        "slope": slope(np.arange(1, T + 1), mean_curve, t_from),
        "slope_second_half": slope(np.arange(1, T + 1), mean_curve, T / 2),
        "truncated_fraction": float(np.asarray(curves["truncated"]).mean()),
        "seeds": S,
    }


def _band(r: np.ndarray, n_points: int = 300):
    S, T = r.shape
    idx = np.unique(np.linspace(0, T - 1, n_points).astype(int))
    m = r.mean(0)[idx]
    h = 1.96 * r.std(0, ddof=1)[idx] / math.sqrt(S) if S > 1 else np.zeros_like(m)
    return idx + 1, m, m - h, m + h


LABELS = {"fedftrl": "FedFTRL", "fedexp3": "FedExp3", "fedexp3_default": "FedExp3-default", "gucb": "Gossip UCB",
          "ind_ftrl": "IND-FTRL"}


def run_experiment(cfg: Config, workdir: str | pathlib.Path | None = None, *, progress: bool = True,
                   shard_seeds: bool = False) -> dict:
    """Run every (algorithm, topology) of cfg plus the FedFTRL-eps runs; write regret PNGs into workdir.

    One compiled program per algorithm runs all its topologies / eps values and seeds.  shard_seeds splits
    the seed axis over all local devices (e.g. one per CPU core with --xla_force_host_platform_device_count).

    Returns {"rows": [...], "timing": {...}, "networks": {...}, "curves": {...}} (curves: host arrays).
    """
    from core.plots import line_plot

    env = make_env(cfg.setting, V=cfg.V, K=cfg.K, noise_sd=cfg.noise_sd, corruption_rounds=cfg.corruption_rounds,
                   gap=cfg.gap, ratings_path=cfg.ratings_path, missing_loss=cfg.missing_loss)
    topologies = list(dict.fromkeys(list(cfg.topologies) + list(cfg.eps_topologies if cfg.epsilons else ())))
    nets = {name: make_network(name, cfg.V, rule=cfg.gossip, radius=cfg.rgg_radius, seed=cfg.rgg_seed)
            for name in topologies}
    seeds = jnp.arange(cfg.seeds, dtype=jnp.int32)
    t_from = max(1.0, cfg.slope_from * cfg.T)
    rows, curves = [], {}
    timing = {"compile_s": {}, "run_s": {}, "compile_cpu_s": {}, "run_cpu_s": {}}
    in_shardings = None
    if shard_seeds and len(jax.devices()) > 1 and cfg.seeds % len(jax.devices()) == 0:
        from core.sharding import batch_sharding, make_mesh, replicated
        mesh = make_mesh()
        in_shardings = (batch_sharding(mesh), replicated(mesh), replicated(mesh))
        seeds = jax.device_put(seeds, in_shardings[0])
    timing["devices"] = len(jax.devices()) if in_shardings is not None else 1
    cpu0, wall0 = os.times(), time.perf_counter()

    def log(msg):
        if progress:
            print(f"[fedftrl] {msg}", flush=True)

    lr0 = float(cfg.algo.lr_scale)
    jobs = {a: [(topo, 1.0, lr0) for topo in cfg.topologies] for a in cfg.algorithms}
    if cfg.epsilons:
        jobs.setdefault("fedftrl", [])
        jobs["fedftrl"] += [(topo, float(e), lr0) for e in cfg.epsilons for topo in cfg.eps_topologies]
    if cfg.lr_scales:   # the lr_scale sensitivity runs, on every topology of cfg
        jobs.setdefault("fedftrl", [])
        jobs["fedftrl"] += [(topo, 1.0, float(c)) for c in cfg.lr_scales if float(c) != lr0 or "fedftrl" not in
                            cfg.algorithms for topo in cfg.topologies]
    # with a workdir, each algorithm's curves are checkpointed when its program finishes: a rerun of a killed run
    # restores the finished algorithms (no compile) and runs the rest
    ckpt = None
    if workdir is not None:
        from core.checkpoint import Checkpointer
        ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints", keep=len(jobs), config=cfg)
    done = (ckpt.latest_step() or 0) if ckpt is not None else 0
    timing["restored"] = []
    for k, (algo, runs) in enumerate(jobs.items()):
        nets_arg = stack_nets([net_arrays(nets[topo]) for topo, _, _ in runs])
        hps = {"eps": jnp.asarray([e for _, e, _ in runs], jnp.float32),
               "lr_scale": jnp.asarray([c for _, _, c in runs], jnp.float32)}
        c0, t0 = os.times(), time.perf_counter()
        sim = make_simulator(algo, env, cfg.T, cfg.algo, base_seed=cfg.seed, in_shardings=in_shardings)
        if k < done:
            out, _ = ckpt.restore(jax.eval_shape(sim, seeds, nets_arg, hps), step=k + 1)
            c1 = c2 = c0
            t1 = t2 = t0
            timing["restored"].append(algo)
        else:
            compiled = sim.lower(seeds, nets_arg, hps).compile()
            c1, t1 = os.times(), time.perf_counter()
            out = jax.block_until_ready(compiled(seeds, nets_arg, hps))
            c2, t2 = os.times(), time.perf_counter()
            if ckpt is not None:
                ckpt.save(k + 1, out, data_state={"algorithm": algo})
        out = jax.tree.map(np.asarray, out)
        timing["compile_s"][algo] = t1 - t0
        timing["run_s"][algo] = t2 - t1
        timing["compile_cpu_s"][algo] = (c1.user - c0.user) + (c1.system - c0.system)
        timing["run_cpu_s"][algo] = (c2.user - c1.user) + (c2.system - c1.system)
        for i, (topo, eps, lr) in enumerate(runs):
            label = LABELS[algo] if eps == 1.0 else f"FedFTRL-eps{eps:g}"
            if algo == "fedftrl" and lr != lr0:
                label = f"FedFTRL-lr{lr:g}"
            one = jax.tree.map(lambda a: a[i], out)
            curves[(label, topo)] = one
            row = {"algorithm": label, "topology": topo, "setting": cfg.setting, "eps": eps,
                   "lr_scale": lr if algo == "fedftrl" else None, "T": cfg.T,
                   "V": cfg.V, "K": env.K, **summarize(one, t_from=t_from)}
            rows.append(row)
            log(f"{label:>16s} {topo:>8s}: regret {row['final_regret']:.1f} +- {row['final_regret_ci95']:.1f} "
                f"slope {row['slope']:.2f}")
        log(f"{algo}: {len(runs)} runs x {cfg.seeds} seeds in one program: compile {t1 - t0:.1f} s, "
            f"run {t2 - t1:.1f} s wall / {timing['run_cpu_s'][algo]:.1f} s CPU")
    if ckpt is not None:
        ckpt.close()
    cpu1 = os.times()
    timing["wall_s"] = time.perf_counter() - wall0
    timing["cpu_user_sys_s"] = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    networks = {n: {"V": net.V, "diameter": net.diameter, "sigma2": net.sigma2, "spectral_gap": 1 - net.sigma2,
                    "edges": int(net.adjacency.sum() // 2)} for n, net in nets.items()}

    if workdir is not None:
        workdir = pathlib.Path(workdir)
        _write_regret_log(workdir, curves, cfg.T)
        for topo in topologies:
            sel = {lab: _band(c["regret_mean"]) for (lab, tp), c in curves.items() if tp == topo}
            if sel:
                line_plot(workdir / f"regret_{cfg.setting}_{topo}.png", sel,
                          title=f"{cfg.setting}, {topo} (V={cfg.V}, K={env.K}, {cfg.seeds} runs, 95% CI)",
                          xlabel="round t", ylabel="mean individual regret")
        if cfg.setting in ("adversarial", "constant_gap", "ftl_trap") or cfg.T >= 10_000:
            for topo in cfg.topologies:
                sel = {}
                for (lab, tp), c in curves.items():
                    if tp == topo:
                        t, m, lo, hi = _band(c["regret_mean"], 2000)
                        keep = t >= t_from
                        if np.all(m[keep] > 0):      # a curve with regret <= 0 has no log-log slope: left out
                            sel[lab] = (t[keep], m[keep])
                if sel:
                    line_plot(workdir / f"regret_loglog_{cfg.setting}_{topo}.png", sel, logx=True, logy=True,
                              title=f"{cfg.setting}, {topo}: log-log regret", xlabel="T",
                              ylabel="mean individual regret")
    return {"rows": rows, "timing": timing, "networks": networks, "curves": curves}


def _write_regret_log(workdir: pathlib.Path, curves: dict, T: int, records: int = 100) -> None:
    """metrics.jsonl: the mean-over-seeds individual regret of every (algorithm, topology) at `records` evenly
    spaced rounds (the simulation is one compiled scan, so the log is written after it)."""
    from core.train import MetricsLog
    means = {f"regret/{label}/{topo}": np.asarray(c["regret_mean"], np.float64).mean(0)
             for (label, topo), c in curves.items()}
    log = MetricsLog(workdir / "metrics.jsonl", 0)
    for t in np.unique(np.linspace(1, T, min(records, T)).round().astype(int)):
        log.write({"step": int(t), **{k: float(v[t - 1]) for k, v in means.items()}})
    log.close()


def train_and_evaluate(cfg: Config, workdir: pathlib.Path) -> dict:
    """The registry entry: run the experiment, write PNGs and metrics.json, return the final metrics."""
    from core.train import write_metrics

    res = run_experiment(cfg, workdir)
    metrics: dict[str, Any] = {}
    for row in res["rows"]:
        key = f"{row['algorithm']}/{row['topology']}"
        metrics[f"regret/{key}"] = row["final_regret"]
        metrics[f"slope/{key}"] = row["slope"]
    metrics["wall_s"] = res["timing"]["wall_s"]
    metrics["cpu_user_sys_s"] = res["timing"]["cpu_user_sys_s"]
    for topo in cfg.topologies:
        finals = {r["algorithm"]: r["final_regret"] for r in res["rows"] if r["topology"] == topo and r["eps"] == 1.0}
        metrics[f"best/{topo}"] = min(finals, key=finals.get)
    write_metrics(workdir, metrics)
    return metrics
