"""The experiment: annealed posterior chains over (d, widths, kappa) x P x seeds, P* location, fits and claims.

`experiment(config)` returns rows (one per (sweep, d, widths, kappa) point) and claims; `run(config, workdir)`
also writes metrics.json and the plots. Every point runs, per P, one compiled stage program vmapped over seeds
(`sample.make_stage`): an ascending anneal from a prior draw, a descending anneal from a planted start matched
to the predicted pattern, equal simulated time per stage, split-R-hat between the two per (seed, P), and an
adaptive extension of the P values that fail it. A (seed, P) that still fails is marked and left out of every
fit and claim (`p_star_values` holds None there).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from core.config import BadInputError
from core.results import censored, interval_claim, paired_claim
from core.train import write_metrics
from interp.scale_analysis import configs, sample, theory

A_HALF = 0.5   # half-way between the lazy alignment (~0: the GP's cubic eigenvalue is ~d^-3) and learned (1)


# -- sweeps ------------------------------------------------------------------------------------------------

def sweep_points(config: configs.Config, sweep: str) -> list[tuple[str, int, tuple[int, ...], float]]:
    """(arch, d, widths, kappa) of every point of a sweep."""
    k = config.kappa
    if sweep == "two_d":
        return [("two", d, (max(1, round(config.two_width_ratio * d)),), k) for d in config.two_d]
    if sweep == "two_n":
        return [("two", config.two_n_d, (n,), k) for n in config.two_n]
    if sweep == "three_d":
        return [("three", d, (max(1, round(config.three_width_ratio * d)),) * 2, k) for d in config.three_d]
    if sweep == "three_n1":
        return [("three", config.three_n1_d, (n1, config.three_n1_n2), k) for n1 in config.three_n1]
    if sweep == "kappa":
        return [("two", config.kappa_d, (config.kappa_width,), float(kv)) for kv in config.kappa_values]
    raise BadInputError(f"sweep={sweep!r}: expected one of {configs.SWEEPS}")


def p_grid(config: configs.Config, d: int, arch: str = "two", widths: Sequence[int] = (1,),
           kappa: float | None = None) -> list[int]:
    """The sample sizes of one point: p_over_kappa_energy * kappa * E_min, or p_over_energy * E_min, or
    p_over_d * d (the first that is set)."""
    kappa = config.kappa if kappa is None else kappa
    if config.p_over_kappa_energy:
        e = theory.predict(arch, d, widths).energy
        return sorted({max(1, int(round(r * kappa * e))) for r in config.p_over_kappa_energy})
    if config.p_over_energy:
        e = theory.predict(arch, d, widths).energy
        return sorted({max(1, int(round(r * e))) for r in config.p_over_energy})
    return sorted({max(1, int(round(r * d))) for r in config.p_over_d})


def plant_spec(config: configs.Config, arch: str, d: int, widths: Sequence[int]) -> dict[str, Any]:
    """The planted start of the descending chain: the calculator's winning pattern with its predicted counts
    (rounded, at least 1), or first-layer specialists (`plant="first"`, the earlier default)."""
    pred = theory.predict(arch, d, widths)
    m1 = max(1, int(round(pred.argmin.get("M1", 1.0))))
    m2 = max(1, int(round(pred.argmin.get("M2", 1.0))))
    if config.plant == "first" or pred.pattern not in ("Spec", "Spec-Mag", "GP-Spec"):
        return {"pattern": "first", "n_first": m1, "n_second": 0}
    if pred.pattern == "GP-Spec":
        return {"pattern": "GP-Spec", "n_first": 0, "n_second": m2}
    return {"pattern": pred.pattern, "n_first": m1, "n_second": 0}


def _fold(keys: jax.Array, tag: int) -> jax.Array:
    return jax.vmap(lambda k: jax.random.fold_in(k, tag))(keys)


def run_point(config: configs.Config, arch: str, d: int, widths: tuple[int, ...], kappa: float | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Anneal every seed's chains of one point up and down the P grid. Returns traces {name: (S, nP, I, R)}
    (I = 0: ascending from the prior, 1: descending from the planted start), split-R-hat (S, nP), the number of
    stages each P received, the steps per stage and the wall time."""
    sc = config.sampler
    kappa = config.kappa if kappa is None else float(kappa)
    key = jax.random.fold_in(jax.random.key(config.seed), 1000 * d + sum(widths) + int(round(1000 * kappa)))
    problem = sample.make_problem(key, arch=arch, d=d, widths=widths, kappa=kappa, n_test=config.n_test,
                                  n_probe=config.n_probe, spec_multiple=config.spec_multiple)
    ps = p_grid(config, d, arch, widths, kappa)
    n_dir = 2 if config.planted else 1
    seed_keys = sample.split_seed_keys(config.seed, config.n_seeds)
    etas = [sample.step_size_at(p, step_size=sc.step_size, curvature=sc.curvature, kappa=kappa) for p in ps]
    every = [sample.steps_per_record(p, sim_time=sc.sim_time, n_records=sc.n_records, step_size=sc.step_size,
                                     curvature=sc.curvature, kappa=kappa) for p in ps]
    traces: dict[str, np.ndarray] = {}
    ends: dict[tuple[int, int], tuple[Any, Any]] = {}
    t0 = time.time()
    n_stages = np.zeros(len(ps), np.int64)

    stage = sample.make_stage(problem, p_max=ps[-1], n_records=sc.n_records, friction=sc.friction)
    betas = sample.beta_ladder(sc.replicas, sc.beta_min)
    tempered = (sample.make_stage(problem, p_max=ps[-1], n_records=sc.n_records, friction=sc.friction,
                                  betas=betas) if sc.replicas > 1 else None)
    n_tempered = np.zeros(len(ps), np.int64)
    ensembles: set[tuple[int, int]] = set()   # (direction, j) whose end state carries a replica axis

    def run_stage(j, direction, q, m, round_, temper=False):
        nk = _fold(seed_keys, 10_000 * round_ + 100 * j + direction + 17)
        if temper and (direction, j) not in ensembles:
            q, m = sample.with_replicas(q, sc.replicas), sample.with_replicas(m, sc.replicas)
            ensembles.add((direction, j))
        q, m, tr = (tempered if temper else stage)(q, m, seed_keys, nk, jnp.float32(etas[j]), jnp.int32(every[j]),
                                                   jnp.int32(ps[j]))
        tr = jax.device_get(tr)
        for name, arr in tr.items():
            if name not in traces:
                traces[name] = np.full((config.n_seeds, len(ps), n_dir, sc.n_records), np.nan, np.float32)
            traces[name][:, j, direction] = np.asarray(arr)
        ends[(direction, j)] = (q, m)
        return q, m

    q, m = sample.make_init(problem, p_max=ps[-1], pattern=None)(seed_keys, jnp.int32(ps[0]))
    for j in range(len(ps)):
        q, m = run_stage(j, 0, q, m, 0)
        n_stages[j] += 1
    plant = plant_spec(config, arch, d, widths)
    if config.planted:
        q, m = sample.make_init(problem, p_max=ps[-1], pattern=plant["pattern"], n_first=plant["n_first"],
                                n_second=plant["n_second"])(seed_keys, jnp.int32(ps[-1]))
        for j in reversed(range(len(ps))):
            q, m = run_stage(j, 1, q, m, 0)
    burn = [int(sc.burn_frac * sc.n_records)] * len(ps)
    rhat = point_rhat(traces["A_f"], burn)
    for round_ in range(1, sc.max_extend + 1 if config.planted else 1):
        failing = [j for j in range(len(ps)) if not np.all(rhat[:, j] < sc.rhat_max)]
        if not failing:
            break
        for j in failing:
            for direction in range(n_dir):
                run_stage(j, direction, *ends[(direction, j)], round_, temper=tempered is not None)
            n_stages[j] += 1
            if tempered is not None:
                n_tempered[j] += 1
                burn[j] = int(sc.burn_frac * sc.n_records)  # swaps move replica 0 at once: burn in again
            else:
                burn[j] = 0      # an extension continues an annealed stage: all its records are kept
        rhat = point_rhat(traces["A_f"], burn)
    wall = time.time() - t0
    log(f"  {arch}-layer d={d} widths={widths} kappa={kappa:g} P={ps}: {config.n_seeds} seeds x {n_dir} anneals, "
        f"steps/stage {[e * sc.n_records for e in every]}, stages per P {n_stages.tolist()}"
        + (f" ({n_tempered.tolist()} tempered, {sc.replicas} replicas)" if tempered is not None else "")
        + f", {wall:.1f} s")
    tempering = None
    if tempered is not None:
        acc = traces.get("swap_accept")
        tempering = {"replicas": sc.replicas, "betas": [round(b, 4) for b in betas],
                     "tempered_stages_per_P": n_tempered.tolist(),
                     "swap_accept_by_P": [None if acc is None or not np.isfinite(acc[:, j]).any()
                                          else round(float(np.nanmean(acc[:, j])), 3) for j in range(len(ps))]}
    return {"traces": traces, "rhat": rhat, "n_stages": n_stages.tolist(), "P": ps, "kappa": kappa, "burn": burn,
            "tempering": tempering,
            "steps_per_stage": [e * sc.n_records for e in every], "sim_time_per_stage":
            [round(e * sc.n_records * eta, 3) for e, eta in zip(every, etas)], "plant": plant,
            "wall_seconds": wall, "prior_count1": problem.prior_count1, "prior_count2": problem.prior_count2}


def point_rhat(a_traces: np.ndarray, burn: Sequence[int]) -> np.ndarray:
    """Split-R-hat of A_f between the two anneals, per (seed, P), on the records of the latest stage after its
    first burn[j] (nan when there is one direction only)."""
    s, n_p, n_dir, r = a_traces.shape
    if n_dir < 2:
        return np.full((s, n_p), np.nan)
    return np.array([[sample.split_rhat(a_traces[i, j, :, burn[j]:]) for j in range(n_p)] for i in range(s)])


def kept_mean(traces: np.ndarray, burn: Sequence[int]) -> np.ndarray:
    """Mean over the kept records of (S, nP, I, R) traces, P by P: (S, nP, I)."""
    return np.stack([np.nanmean(traces[:, j, :, b:], axis=-1) for j, b in enumerate(burn)], axis=1)


# -- analysis ----------------------------------------------------------------------------------------------

def crossing(p_values: Sequence[float], curve: Sequence[float], level: float = A_HALF) -> float:
    """The P at which `curve` first rises through `level`, interpolated linearly in log P; nan if it never
    does within the grid (censored), p_values[0] if it starts above."""
    p = np.asarray(p_values, np.float64)
    c = np.asarray(curve, np.float64)
    if c.size == 0 or not np.all(np.isfinite(c)):
        return float("nan")
    if c[0] >= level:
        return float("nan")
    for j in range(1, len(p)):
        if c[j] >= level:
            t = (level - c[j - 1]) / (c[j] - c[j - 1])
            return float(math.exp(math.log(p[j - 1]) + t * (math.log(p[j]) - math.log(p[j - 1]))))
    return float("nan")


def interp_log(p_values: Sequence[float], values: Sequence[float], at: float) -> float:
    """values(P) interpolated linearly in log P at P = at (clamped to the grid)."""
    if not np.isfinite(at):
        return float("nan")
    return float(np.interp(math.log(at), np.log(np.asarray(p_values, np.float64)), np.asarray(values)))


def loglog_fit(x: Sequence[float], y: Sequence[float], conf: float = 0.95) -> dict[str, float]:
    """OLS fit log y = a + b log x over finite points: slope b, its standard error and a t-interval."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[ok]), np.log(y[ok])
    n = int(ok.sum())
    if n < 2 or np.ptp(lx) == 0:
        return {"slope": float("nan"), "se": float("nan"), "lo": float("nan"), "hi": float("nan"), "n": n}
    b, a = np.polyfit(lx, ly, 1)
    if n == 2:
        return {"slope": float(b), "intercept": float(a), "se": float("nan"), "lo": float("nan"),
                "hi": float("nan"), "n": n}
    resid = ly - (a + b * lx)
    se = math.sqrt(resid @ resid / (n - 2) / np.sum((lx - lx.mean()) ** 2))
    t = scipy.stats.t.ppf(0.5 + conf / 2, n - 2)
    return {"slope": float(b), "intercept": float(a), "se": se, "lo": float(b - t * se),
            "hi": float(b + t * se), "n": n}




def _r(x, nd: int = 4):
    arr = np.asarray(x, np.float64)
    out = np.round(arr, nd).tolist()
    return _nan_to_none(out)


def _nan_to_none(x):
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def seed_p_star(ps: Sequence[float], curve: Sequence[float], ok: Sequence[bool]) -> Any:
    """One seed's P* as a results value: a float where A_f crosses 1/2 between two equilibrated grid points;
    a bound (core.results.censored) where it never crosses (">=" the largest P, "<=" the smallest) and the end
    point is equilibrated; None where a point it rests on failed the R-hat check (never used in a fit)."""
    p = crossing(ps, curve)
    c = np.asarray(curve, np.float64)
    if np.isfinite(p):
        j = int(np.argmax(c >= A_HALF))
        return float(p) if ok[j - 1] and ok[j] else None
    if not np.all(np.isfinite(c)):
        return None
    if c[0] >= A_HALF:
        return censored(ps[0], "<=") if ok[0] else None
    return censored(ps[-1], ">=") if ok[-1] else None


def _value(v: Any) -> float:
    return float("nan") if v is None else float(v["value"] if isinstance(v, dict) else v)


def count_at(ps: Sequence[float], counts: Sequence[float], p_star: Any, ok: Sequence[bool]) -> Any:
    """A specialist count at a seed's P*: interpolated in log P at an exact P*; at a P* censored above, the
    count at the largest P as a lower bound (the count grows with P); at one censored below, the count at the
    smallest P as an upper bound; None where P* is None."""
    if p_star is None:
        return None
    if isinstance(p_star, dict):
        j = -1 if p_star["censored"] == ">=" else 0
        return censored(float(counts[j]), p_star["censored"]) if ok[j] else None
    return interp_log(ps, counts, p_star)


def summarise_point(config: configs.Config, sweep: str, arch: str, d: int, widths: tuple[int, ...],
                    res: dict[str, Any]) -> dict[str, Any]:
    """Posterior means, P*, specialised counts and the per-point equilibration report (JSON-able)."""
    sc = config.sampler
    ps, kappa, traces, rhat = res["P"], res["kappa"], res["traces"], res["rhat"]
    burn = res["burn"]
    post = {k: kept_mean(v, burn) for k, v in traces.items() if k != "swap_accept"}  # (S, nP, I)
    a = post["A_f"]
    a_seed = a.mean(axis=2)                                                          # (S, nP)
    n_seeds = a.shape[0]
    ok = (rhat < sc.rhat_max) if a.shape[2] > 1 else np.ones(rhat.shape, bool)       # (S, nP)
    p_star_values = [seed_p_star(ps, a_seed[s], ok[s]) for s in range(n_seeds)]
    p_star_raw = [crossing(ps, a_seed[s]) for s in range(n_seeds)]
    spec1 = post["spec1"].mean(axis=2) - res["prior_count1"]                         # excess count (S, nP)
    m1_at = [count_at(ps, spec1[s], p_star_values[s], ok[s]) for s in range(n_seeds)]
    pred = theory.predict(arch, d, widths)
    exact = [v for v in p_star_values if isinstance(v, float)]
    gp = float(np.exp(np.mean(np.log(exact)))) if exact else None
    tr = traces["A_f"]
    tau = np.array([[[sample.integrated_autocorr_time(tr[s, j, i, burn[j]:]) for i in range(tr.shape[2])]
                     for j in range(len(ps))] for s in range(n_seeds)])
    gap = np.abs(a[:, :, 0] - a[:, :, -1]) if a.shape[2] > 1 else np.zeros(a.shape[:2])
    row = {
        "sweep": sweep, "arch": arch, "d": d, "N": "x".join(str(w) for w in widths), "kappa": kappa,
        "P_range": f"{ps[0]}-{ps[-1]}",
        "P*": round(gp, 1) if gp is not None else None,
        "P*/(kappa E_min)": round(gp / (kappa * pred.energy), 2) if gp is not None else None,
        "pattern": pred.pattern,
        "P*_seeds_used": f"{sum(v is not None for v in p_star_values)}/{n_seeds}",
        "equilibrated": f"{int(ok.sum())}/{ok.size}",
        "rhat_max": round(float(np.nanmax(rhat)), 3) if np.isfinite(rhat).any() else None,
        "widths": list(widths), "P": ps,
        "A_f": _r(a_seed.mean(0)), "A_f_seeds": _r(a_seed), "A_f_by_init": _r(a.mean(0).T),
        "test_mse": _r(post["test_mse"].mean(axis=(0, 2))),
        "kernel_drift": _r(post["kernel_drift"].mean(axis=(0, 2))),
        "cov_align1": _r(post["cov_align1"].mean(axis=(0, 2))),
        "kta": _r(post["kta"].mean(axis=(0, 2))),
        "spec1_excess": _r(spec1.mean(0)), "spec1_excess_seeds": _r(spec1),
        "spec1_by_init": _r((post["spec1"] - res["prior_count1"]).mean(0).T),
        "spec1_prior_count": round(res["prior_count1"], 4),
        "p_star_values": p_star_values,
        "p_star_unchecked": _r(p_star_raw),
        "spec1_at_p_star": m1_at,
        "predicted": {"pattern": pred.pattern, "energy": pred.energy, "argmin": pred.argmin,
                      "energies": pred.energies},
        "plant": res["plant"],
        "equilibration": {
            "test": f"split-R-hat of A_f between the prior-start ascending and the planted-start descending "
                    f"anneal, per (seed, P), < {sc.rhat_max}",
            "rhat": _r(rhat), "passed": ok.astype(int).tolist(), "n_passed": int(ok.sum()), "n": int(ok.size),
            "init_gap_by_P": _r(gap.max(0)), "stages_per_P": res["n_stages"],
            "steps_per_stage": res["steps_per_stage"], "sim_time_per_stage": res["sim_time_per_stage"],
            "tau_int_records_median": float(np.nanmedian(tau)),
            "diverged_chains": int(np.sum(~np.isfinite(traces["A_f"][..., -1]))),
            "tempering": res.get("tempering"),
        },
        "point_wall_seconds": round(res["wall_seconds"], 1),
    }
    if "spec2" in post:
        spec2 = post["spec2"].mean(axis=2) - res["prior_count2"]
        row["spec2_excess"] = _r(spec2.mean(0))
        row["spec2_excess_seeds"] = _r(spec2)
        row["spec2_by_init"] = _r((post["spec2"] - res["prior_count2"]).mean(0).T)
        row["spec2_prior_count"] = round(res["prior_count2"], 4)
        row["corr2"] = _r(post["corr2"].mean(axis=(0, 2)))
        row["corr2_he3"] = _r(post["corr2_he3"].mean(axis=(0, 2)))
        row["spec2_at_p_star"] = [count_at(ps, spec2[s], p_star_values[s], ok[s]) for s in range(n_seeds)]
    return row


# -- claims ------------------------------------------------------------------------------------------------

def seed_slopes(xs: Sequence[float], per_row_values: Sequence[Sequence[Any]]) -> tuple[list[Any], list[str]]:
    """Per-seed log-log slopes: for seed s, OLS of log v_r[s] on log x_r over the rows r where it is measured
    (not None). A censored value stands at its bound; the slope is then a bound too when every censored point
    pushes it the same way (raising log v right of the mean log x raises the slope), else the seed is left out.
    Returns (slopes as floats / censored values, notes on left-out seeds)."""
    n_seeds = max((len(v) for v in per_row_values), default=0)
    out, notes = [], []
    for s in range(n_seeds):
        pts = [(x, v[s]) for x, v in zip(xs, per_row_values) if s < len(v) and v[s] is not None]
        n_all = len(pts)
        pts = [(x, v) for x, v in pts if x > 0 and _value(v) > 0]
        if len(pts) < n_all:
            notes.append(f"seed {s}: {n_all - len(pts)} value(s) <= 0 left out of the log-log fit")
        if len({x for x, _ in pts}) < 2:
            notes.append(f"seed {s}: fewer than 2 measured points")
            continue
        lx = np.log([x for x, _ in pts])
        ly = np.log([_value(v) for _, v in pts])
        slope = float(np.polyfit(lx, ly, 1)[0])
        sides = set()
        for x, v in zip(lx, (v for _, v in pts)):
            if isinstance(v, dict):
                up = (x > lx.mean()) == (v["censored"] == ">=")
                sides.add(">=" if up else "<=")
        if len(sides) > 1:
            notes.append(f"seed {s}: censored points bound the slope both ways")
            continue
        out.append(censored(slope, sides.pop()) if sides else slope)
    return out, notes


def _deviation(values: Sequence[Any], pred: float) -> list[Any]:
    """|slope - pred| per seed; a bound on a slope is a lower bound on the deviation when it points away from
    pred (slope >= b >= pred, or slope <= b <= pred), otherwise unknown (left out)."""
    out = []
    for v in values:
        if isinstance(v, dict):
            b = v["value"]
            if (v["censored"] == ">=" and b >= pred) or (v["censored"] == "<=" and b <= pred):
                out.append(censored(abs(b - pred), ">="))
        else:
            out.append(abs(float(v) - pred))
    return out


def _exponent_claims(id_: str, what: str, slopes: list[Any], notes: list[str], pred: float, null: float,
                     tol: float, null_name: str, evidence: str, label: str = "") -> tuple[list[dict], list[dict]]:
    """Two claims about one exponent over per-seed slopes: it is beyond the null (e.g. far below the lazy d^3)
    and it is within +-tol of the prediction (mean |slope - pred| < tol). (claims, not_measured)."""
    note = ("; left out: " + "; ".join(notes)) if notes else ""
    if not slopes:
        return [], [{"id": id_, "statement": what, "reason": "no seed measured at 2+ points" + note}]
    ev = f"{evidence}{note}; per-seed slopes {[round(_value(s), 3) for s in slopes]}"
    c1 = interval_claim(f"{id_}_vs_{null_name}", f"{label}{what}: exponent beyond the {null_name} value "
                        f"{null:g} (predicted {pred:.2f})", slopes, null=null, higher_is_better=pred > null,
                        evidence=ev, label="per-seed exponent", predicted=pred)
    dev = _deviation(slopes, pred)
    if not dev:
        return [c1], [{"id": id_, "statement": what, "reason": "every slope is a bound towards the prediction"}]
    c2 = interval_claim(id_, f"{label}{what}: exponent within +-{tol:g} of the predicted {pred:.2f}", dev,
                        null=tol, higher_is_better=False, evidence=ev, label=f"|exponent - {pred:.2f}|",
                        predicted=pred)
    return [c1, c2], []


def _pred_slope(rows, xkey: Callable[[dict], float], ykey: Callable[[dict], float]) -> float:
    xs = [xkey(r) for r in rows]
    ys = [ykey(r) for r in rows]
    return loglog_fit(xs, ys)["slope"]


def make_claims(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The claims of the benchmark from its rows: (claims, not_measured). Only the paper's stated predictions
    are claims; the project's stricter ones carry "project's prediction" in their statement."""
    claims, missing = [], []
    by = {s: [r for r in rows if r["sweep"] == s] for s in configs.SWEEPS}
    energy = lambda r: r["predicted"]["energy"]  # noqa: E731

    def add(pair):
        claims.extend(pair[0])
        missing.extend(pair[1])

    for sweep, name in (("two_d", "two-layer"), ("three_d", "three-layer")):
        rs = by[sweep]
        if len(rs) < 2:
            continue
        pred = _pred_slope(rs, lambda r: r["d"], energy)
        slopes, notes = seed_slopes([r["d"] for r in rs], [r["p_star_values"] for r in rs])
        add(_exponent_claims(
            f"{sweep}_p_star_linear_in_d", f"{name} P* (A_f = 1/2) grows like d at widths N = "
            f"{rs[0]['widths'][0] // rs[0]['d']}d (paper: P* ~ d, far below the lazy d^3)", slopes, notes, pred, 3.0,
            0.5, "lazy", "P* per d (geometric mean of equilibrated seeds): "
            + ", ".join(f"d={r['d']}: {r['P*']} ({r['P*_seeds_used']} seeds)" for r in rs)))
    rs = by["kappa"]
    if len(rs) >= 2:
        slopes, notes = seed_slopes([r["kappa"] for r in rs], [r["p_star_values"] for r in rs])
        add(_exponent_claims(
            "p_star_proportional_to_kappa", f"two-layer P* grows like kappa at d={rs[0]['d']}, N={rs[0]['N']} "
            "(paper: P* ~ kappa E)", slopes, notes, 1.0, 0.0, 0.5, "kappa-independent",
            "P* per kappa: " + ", ".join(f"kappa={r['kappa']:g}: {r['P*']} ({r['P*_seeds_used']})" for r in rs)))
    rs = by["two_n"]
    if len(rs) >= 2:
        pred = _pred_slope(rs, lambda r: r["widths"][0] / r["d"],
                           lambda r: r["predicted"]["argmin"].get("M1", float("nan")))
        slopes, notes = seed_slopes([r["widths"][0] / r["d"] for r in rs], [r["spec1_at_p_star"] for r in rs])
        add(_exponent_claims(
            "two_layer_specialists_sqrt_n_over_d", f"two-layer count of specialised first-layer neurons at P* "
            f"grows like sqrt(N/d) at d={rs[0]['d']} (paper, Fig. 2c)", slopes, notes, pred, 0.0, 0.25, "constant",
            "excess specialist counts (overlap > 3 prior sd and off the bulk, minus the prior's) at P*; "
            + ", ".join(f"N={r['widths'][0]}: {_fmt_vals(r['spec1_at_p_star'])}" for r in rs)))
        pred = _pred_slope(rs, lambda r: r["widths"][0], energy)
        slopes, notes = seed_slopes([r["widths"][0] for r in rs], [r["p_star_values"] for r in rs])
        add(_exponent_claims(
            "two_layer_p_star_vs_width", f"two-layer P* grows like N^{pred:.2f} at d={rs[0]['d']} (the calculator's "
            "E_min = 2 sqrt(N d))", slopes, notes, pred, 0.0, 0.25, "width-independent",
            "P* by N: " + ", ".join(f"N={r['widths'][0]}: {r['P*']} ({r['P*_seeds_used']})" for r in rs),
            label="project's prediction: "))
    rs = by["two_d"] + by["two_n"]
    if len({round(energy(r), 6) for r in rs}) >= 2:
        slopes, notes = seed_slopes([energy(r) for r in rs], [r["p_star_values"] for r in rs])
        add(_exponent_claims(
            "two_layer_p_star_proportional_to_energy", "two-layer P* is proportional to the calculator's E_min "
            "across the d and N sweeps", slopes, notes, 1.0, 0.0, 0.5, "energy-independent",
            "slope of log P* on log E_min per seed", label="project's prediction: "))
    rs = by["three_n1"]
    if len(rs) >= 2:
        lo, hi = rs[0], rs[-1]
        b = theory.phase_boundary(theory.THREE_LAYER[2], theory.THREE_LAYER[1], "N1")
        n2, d = lo["widths"][1], lo["d"]
        where = (f"N1={lo['widths'][0]} (predicted {lo['pattern']}) vs N1={hi['widths'][0]} (predicted "
                 f"{hi['pattern']}) at N2={n2}, d={d}; the project's unit-prefactor boundary N1 = {b} = "
                 f"{b({'N2': n2, 'd': d}):.1f}")
        pairs = [(u, v) for u, v in zip(hi.get("spec2_at_p_star", []), lo.get("spec2_at_p_star", []))
                 if u is not None and v is not None]
        if len(pairs) >= 2:  # a paired interval needs two seeds; one is reported as not measured
            claims.append(paired_claim(
                "three_layer_second_layer_takes_over", "three-layer: second-layer specialists (on w*.x) at P* "
                "appear as N1 grows past ~sqrt(N2 d) (paper: Spec-Mag gives way to GP-Spec)",
                [u for u, _ in pairs], [v for _, v in pairs], evidence=where + "; excess spec2 at P*, "
                "largest N1 minus smallest N1"))
        else:
            missing.append({"id": "three_layer_second_layer_takes_over", "statement": "second layer takes over",
                            "reason": f"{len(pairs)} seed(s) with an equilibrated P* at both ends of the N1 sweep "
                                      f"(two needed); excess spec2 at P* (largest N1, smallest N1): {pairs}"})
        frac = lambda r, v: None if v is None else (  # noqa: E731
            censored(v["value"] / r["widths"][0], v["censored"]) if isinstance(v, dict) else v / r["widths"][0])
        pairs = [(frac(lo, u), frac(hi, v)) for u, v in zip(lo["spec1_at_p_star"], hi["spec1_at_p_star"])
                 if u is not None and v is not None]
        if len(pairs) >= 2:
            claims.append(paired_claim(
                "three_layer_first_layer_specialisation_fades", "three-layer: the fraction of specialised "
                "first-layer neurons at P* is larger below the transition than above it (paper: Spec-Mag at "
                "small N1, a lazy first layer in GP-Spec)", [u for u, _ in pairs], [v for _, v in pairs],
                evidence=where + "; excess spec1 / N1 at P*, smallest N1 minus largest N1"))
        else:
            missing.append({"id": "three_layer_first_layer_specialisation_fades", "statement": "first layer fades",
                            "reason": f"{len(pairs)} seed(s) with an equilibrated P* at both ends of the N1 sweep "
                                      f"(two needed); excess spec1 / N1 at P* (smallest N1, largest N1): {pairs}"})
    return claims, missing


def _fmt_vals(vals: Sequence[Any]) -> str:
    return "[" + ", ".join("-" if v is None else (f"{v['censored']}{v['value']:.2f}" if isinstance(v, dict)
                                                  else f"{v:.2f}") for v in vals) + "]"


# -- the experiment ----------------------------------------------------------------------------------------

class PointStore:
    """Finished sweep points on disk (`folder/<arch>_d<d>_N<widths>_k<kappa>.npz` + `.json`), so a killed run
    resumes at its first unfinished point and ends where an uninterrupted one ends (every point's chains are
    seeded by the config and the point alone). Each file is written to a temporary name and renamed, so a kill
    mid-write leaves the point unfinished, never half-stored."""

    def __init__(self, folder: str | pathlib.Path):
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _stem(self, key: tuple) -> pathlib.Path:
        arch, d, widths, kappa = key
        return self.folder / f"{arch}_d{d}_N{'x'.join(str(w) for w in widths)}_k{kappa:g}"

    def load(self, key: tuple) -> dict[str, Any] | None:
        stem = self._stem(key)
        if not (stem.with_suffix(".json").exists() and stem.with_suffix(".npz").exists()):
            return None
        res = json.loads(stem.with_suffix(".json").read_text())
        with np.load(stem.with_suffix(".npz")) as arrays:
            res["traces"] = {k[len("trace_"):]: arrays[k] for k in arrays.files if k.startswith("trace_")}
            res["rhat"] = arrays["rhat"]
        return res

    def save(self, key: tuple, res: dict[str, Any]) -> None:
        stem = self._stem(key)
        tmp = stem.with_name(stem.name + ".tmp.npz")
        np.savez(tmp, rhat=res["rhat"], **{f"trace_{k}": v for k, v in res["traces"].items()})
        os.replace(tmp, stem.with_suffix(".npz"))
        rest = {k: v for k, v in res.items() if k not in ("traces", "rhat")}
        tmp = stem.with_name(stem.name + ".tmp.json")
        tmp.write_text(json.dumps(rest, default=float))
        os.replace(tmp, stem.with_suffix(".json"))  # the .json marks the point finished: written last


def experiment(config: configs.Config, log: Callable[[str], None] = print,
               on_row: Callable[[list, list, list], None] | None = None,
               deadline: float | None = None, store: PointStore | None = None) -> dict[str, Any]:
    """Run every sweep of `config`; returns {"rows", "claims", "not_measured", "wall_seconds", "traces"}. With a
    `deadline` (time.time() value) the points after the one that passes it are skipped (stopped_early). With a
    `store`, finished points are read from it instead of rerun, and each newly run point is saved to it."""
    t0 = time.time()
    rows, traces_all = [], {}
    claims, missing = [], []
    cache: dict[tuple, dict[str, Any]] = {}
    for sweep in config.sweeps:
        for arch, d, widths, kappa in sweep_points(config, sweep):
            key = (arch, d, tuple(widths), float(kappa))
            if key not in cache and store is not None:
                cache[key] = store.load(key)
                if cache[key] is None:
                    del cache[key]
                else:
                    log(f"  {arch}-layer d={d} widths={widths} kappa={kappa:g}: finished before, read from "
                        f"{store.folder}")
            if key not in cache:     # a point shared by two sweeps (e.g. d = 16 of two_d and two_n) runs once
                cache[key] = run_point(config, arch, d, widths, kappa, log=log)
                if store is not None:
                    store.save(key, cache[key])
            res = cache[key]
            row = summarise_point(config, sweep, arch, d, widths, res)
            rows.append(row)
            traces_all[(sweep, d, widths, kappa)] = res["traces"]
            log(f"{sweep} d={d} widths={widths} kappa={kappa:g}: P*={row['P*']} (seeds "
                f"{_fmt_vals(row['p_star_values'])}), A_f by P {row['A_f']}, R-hat "
                f"{row['equilibration']['rhat']}, equilibrated {row['equilibrated']}")
            claims, missing = make_claims(rows)
            if on_row is not None:
                on_row(rows, claims, missing)
            if deadline is not None and time.time() > deadline:
                log(f"time budget spent after {sweep} d={d} widths={widths}: remaining points not run")
                return {"rows": rows, "claims": claims, "not_measured": missing,
                        "wall_seconds": time.time() - t0, "traces": traces_all, "stopped_early": True}
    return {"rows": rows, "claims": claims, "not_measured": missing, "wall_seconds": time.time() - t0,
            "traces": traces_all, "stopped_early": False}


def _vals(vs):
    return [(_value(v), isinstance(v, dict)) for v in vs if v is not None]


def plot(result: dict[str, Any], workdir: pathlib.Path, prefix: str = "") -> list[pathlib.Path]:
    """A_f against P per anneal direction and against P / (kappa E_min), P* against d, the specialist counts."""
    import matplotlib
    import matplotlib.ticker
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workdir = pathlib.Path(workdir)
    rows = result["rows"]
    paths = []
    sweeps = [s for s in configs.SWEEPS if any(r["sweep"] == s for r in rows)]
    if sweeps:
        fig, axes = plt.subplots(2, len(sweeps), figsize=(4.2 * len(sweeps), 7), squeeze=False)
        for k, s in enumerate(sweeps):
            for r in (r for r in rows if r["sweep"] == s):
                lab = f"d={r['d']} N={r['N']}" + (f" k={r['kappa']:g}" if s == "kappa" else "")
                up, down = (np.array([np.nan if v is None else v for v in c]) for c in
                            (r["A_f_by_init"][0], r["A_f_by_init"][-1]))
                line, = axes[0, k].plot(r["P"], up, "o-", label=lab + " (prior, up)")
                axes[0, k].plot(r["P"], down, "s--", color=line.get_color(), label=lab + " (planted, down)")
                bad = np.array(r["equilibration"]["passed"]).min(0) == 0
                if bad.any():
                    axes[0, k].plot(np.array(r["P"])[bad], up[bad], "x", color="red", ms=9)
                axes[1, k].plot(np.array(r["P"]) / (r["kappa"] * r["predicted"]["energy"]),
                                np.array([np.nan if v is None else v for v in r["A_f"]]), "o-", label=lab)
            for i, xl in enumerate(("P (red x: R-hat failed)", "P / (kappa E_min)")):
                ax = axes[i, k]
                ax.set_xscale("log")
                ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
                ax.axhline(A_HALF, color="gray", lw=0.8, ls="--")
                ax.set_xlabel(xl)
                ax.set_ylabel("alignment A_f (held out)")
                ax.set_title(s)
                ax.legend(fontsize=6)
        fig.tight_layout()
        paths.append(workdir / f"{prefix}alignment.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    xs_of = {"two_d": lambda r: r["d"], "three_d": lambda r: r["d"], "two_n": lambda r: r["widths"][0],
             "kappa": lambda r: r["kappa"], "three_n1": lambda r: r["widths"][0]}
    psweeps = [s for s in ("two_d", "three_d", "two_n", "kappa") if any(r["sweep"] == s for r in rows)]
    if psweeps:
        fig, axes = plt.subplots(1, len(psweeps), figsize=(4.2 * len(psweeps), 3.8), squeeze=False)
        for k, s in enumerate(psweeps):
            ax = axes[0, k]
            rs = [r for r in rows if r["sweep"] == s]
            for r in rs:
                for v, cens in _vals(r["p_star_values"]):
                    ax.scatter([xs_of[s](r)], [v], marker="^" if cens else "o", color="C0", s=16)
            x = np.array([xs_of[s](r) for r in rs], float)
            e = np.array([r["kappa"] * r["predicted"]["energy"] for r in rs])
            exact = [v for r in rs for v in r["p_star_values"] if isinstance(v, float)]
            if exact:
                ratio = np.exp(np.mean(np.log(exact)) - np.mean(np.log(e)))
                ax.plot(x, ratio * e, "k--", lw=0.8, label="predicted shape (kappa E_min)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel({"two_d": "d", "three_d": "d", "two_n": "N", "kappa": "kappa"}[s])
            ax.set_ylabel("P* (triangles: bounds)")
            ax.set_title(s)
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(workdir / f"{prefix}p_star.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    for s, xlab in (("two_n", "N / d"), ("three_n1", "N1")):
        rs = [r for r in rows if r["sweep"] == s]
        if not rs:
            continue
        fig, ax = plt.subplots(figsize=(5, 4))
        x = [r["widths"][0] / r["d"] if s == "two_n" else r["widths"][0] for r in rs]
        m1 = [np.mean([v for v, _ in _vals(r["spec1_at_p_star"])] or [np.nan]) for r in rs]
        pm = [r["predicted"]["argmin"].get("M1", 0.0) if r["predicted"]["pattern"] != "GP-Spec" else 0.0
              for r in rs]
        ax.plot(x, m1, "o-", label="measured first-layer specialists at P*")
        ax.plot(x, pm, "s--", label="predicted M1")
        if s == "three_n1":
            m2 = [np.mean([v for v, _ in _vals(r.get("spec2_at_p_star", []))] or [np.nan]) for r in rs]
            pm2 = [r["predicted"]["argmin"].get("M2", 0.0) for r in rs]
            ax.plot(x, m2, "^-", label="measured second-layer specialists (w*.x) at P*")
            ax.plot(x, pm2, "v--", label="predicted M2")
        ax.set_xscale("log")
        ax.set_xlabel(xlab)
        ax.set_ylabel("excess count")
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(workdir / f"{prefix}{s}_specialists.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def run(config: configs.Config, workdir: pathlib.Path) -> dict[str, Any]:
    """Run the experiment; write metrics.json, rows.json and PNG plots into workdir; return the final metrics.
    Each finished sweep point is kept in `workdir/points/`: rerunning the same command into the folder resumes at
    the first unfinished point (metrics.jsonl is rewritten with the same records)."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    from core.train import MetricsLog
    log = MetricsLog(workdir / "metrics.jsonl", 0, config=config)

    def log_point(rows, claims, missing):  # metrics.jsonl: a record per finished sweep point
        r = rows[-1]
        rhat = [v for v in np.ravel(np.asarray(r["equilibration"]["rhat"], dtype=float)) if np.isfinite(v)]
        log.write({"step": len(rows), "sweep": r["sweep"], "d": r["d"], "N": r["N"], "kappa": r["kappa"],
                   "p_star": r["P*"] if isinstance(r["P*"], (int, float)) else None,
                   "equilibrated": r["equilibrated"], "max_rhat": max(rhat) if rhat else None})

    try:
        result = experiment(config, on_row=log_point, store=PointStore(workdir / "points"))
    finally:
        log.close()
    plot(result, workdir)
    metrics = {
        "wall_seconds": round(result["wall_seconds"], 2),
        "claims": {c["id"]: c["held"] for c in result["claims"]},
        "not_measured": [m["id"] for m in result["not_measured"]],
        "p_star": {f"{r['sweep']}:d={r['d']}:N={r['N']}:kappa={r['kappa']:g}": r["P*"] for r in result["rows"]},
        "equilibrated": {f"{r['sweep']}:d={r['d']}:N={r['N']}:kappa={r['kappa']:g}": r["equilibrated"]
                         for r in result["rows"]},
    }
    metrics = json.loads(json.dumps(metrics, default=float).replace("NaN", "null"))
    (workdir / "rows.json").write_text(json.dumps(result["rows"], indent=1, default=float).replace("NaN", "null"))
    write_metrics(workdir, metrics)
    return metrics
