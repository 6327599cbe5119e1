"""Our numpyro GP + LogEI against BoTorch (SingleTaskGP + qLogExpectedImprovement) on Hartmann-6, same machine,
same run: time per BO iteration (MAP fit + acquisition argmax over the same Sobol candidates) at n = 20, 50,
100 observations, and the best values a full BO loop finds over the same seeds.

Needs the optional extra: `pip install -e .[botorch]` (torch==2.13.0 CPU wheel + botorch).

    nice -n 10 .venv/bin/python benchmarks/lgbo_vs_botorch.py --seeds 3 --iterations 30
    .venv/bin/python benchmarks/lgbo_vs_botorch.py --claims-from-rows   # recompute the committed claims

Both sides: Matern-5/2 ARD with BoTorch's dimension-scaled lengthscale prior and LogNormal(-4, 1) noise prior,
standardised y, 2 Sobol initial points, argmax over 8192 scrambled-Sobol candidates (fresh per round), q = 1.
Ours: padded buffers (n_max = 128: one compile for every n), float64, fixed-step L-BFGS; steady state
excludes the one-off compile, which is reported separately. BoTorch: fit_gpytorch_mll (scipy L-BFGS-B).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from core.results import RESULTS_DIR, paired_claim, recompute_claims, speedup_claim, write_results  # noqa: E402
from optimization import gp  # noqa: E402
from optimization.lgbo import acquisition, model  # noqa: E402
from optimization.lgbo.data import HARTMANN6_MAX, hartmann6  # noqa: E402
from optimization.lgbo.space import sobol  # noqa: E402

D, N_MAX, N_CAND = 6, 128, 8192


# ours -----------------------------------------------------------------------------------------------------------
def make_ours(fit_steps: int):
    base = acquisition.qmc_normal(512, 1)
    settings = acquisition.AcqSettings(q=1)

    @jax.jit
    def step(x, y, mask, cands, warm):
        ys, _, _ = gp.standardize(y, mask)
        params = gp.fit_map(x, ys, mask, warm, steps=fit_steps)
        post = gp.posterior(params, x, ys, mask)
        lift = model.make_lift(post, model.no_region(D), cands[:8], cands[:8])  # c = 0.5: zero lift, plain BO
        best = jnp.max(jnp.where(mask > 0, ys, -jnp.inf))
        posts, lifts = jax.tree.map(lambda a: a[None], (post, lift))
        xq, _, _ = acquisition.suggest(posts, lifts, best, cands, jnp.ones(cands.shape[0], bool), jnp.ones(D), base,
                                       settings)
        return xq[0], params

    def iteration(x_obs: np.ndarray, y_obs: np.ndarray, cands: np.ndarray, warm):
        n = len(x_obs)
        x = np.zeros((N_MAX, D))
        y = np.zeros(N_MAX)
        x[:n], y[:n] = x_obs, y_obs
        mask = (np.arange(N_MAX) < n).astype(np.float64)
        xq, params = step(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask), jnp.asarray(cands), warm)
        return np.asarray(xq), params

    return iteration


# botorch --------------------------------------------------------------------------------------------------------
def make_botorch():
    import torch
    from botorch.acquisition.logei import qLogExpectedImprovement
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
    from botorch.sampling import SobolQMCNormalSampler
    from gpytorch.mlls import ExactMarginalLogLikelihood

    torch.set_default_dtype(torch.float64)

    def iteration(x_obs: np.ndarray, y_obs: np.ndarray, cands: np.ndarray, warm=None):
        tx = torch.as_tensor(x_obs)
        ty = torch.as_tensor(y_obs)[:, None]
        m = SingleTaskGP(tx, ty, covar_module=get_covar_module_with_dim_scaled_prior(ard_num_dims=D,
                                                                                    use_rbf_kernel=False))
        fit_gpytorch_mll(ExactMarginalLogLikelihood(m.likelihood, m))
        acq = qLogExpectedImprovement(m, best_f=ty.max(), sampler=SobolQMCNormalSampler(torch.Size([512]), seed=0))
        tc = torch.as_tensor(cands)
        with torch.no_grad():
            vals = torch.cat([acq(tc[i:i + 1024, None, :]) for i in range(0, len(tc), 1024)])
        return cands[int(torch.argmax(vals))], None

    return iteration, torch


def candidates(seed: int, round_: int) -> np.ndarray:
    return sobol(N_CAND, D, seed=10_000 * seed + round_)


def timing(impls: dict, ns, repeats, seed0=100):
    """Seconds per iteration at each n (fresh random data per repeat), the implementations interleaved so that
    both see the same machine load; each one's first call (our compile) is made first and reported apart."""
    out = {k: {n: [] for n in ns} for k in impls}
    first = {}

    def one(name, n, r):
        rng = np.random.default_rng(seed0 + 31 * n + r)
        x = rng.uniform(size=(n, D))
        with jax.enable_x64(True):
            y = np.asarray(hartmann6(jnp.asarray(x)))
        cands = candidates(seed0, n + r)
        t0 = time.perf_counter()
        with jax.enable_x64(True):
            impls[name](x, y, cands, None)
        return time.perf_counter() - t0

    for name in impls:
        first[name] = one(name, ns[0], 999)
    for n in ns:
        for r in range(repeats):
            for name in impls:
                out[name][n].append(one(name, n, r))
    return out, first


def bo_loop(iteration, seed: int, iterations: int, warm_start: bool):
    x = sobol(2, D, seed=seed)
    with jax.enable_x64(True):
        y = np.asarray(hartmann6(jnp.asarray(x)))
    warm = None
    for t in range(iterations):
        xq, params = iteration(x, y, candidates(seed, t), warm)
        warm = params if warm_start else None
        with jax.enable_x64(True):
            yq = float(hartmann6(jnp.asarray(xq)))
        x, y = np.vstack([x, xq]), np.append(y, yq)
    return float(y.max())


SAME_BEST_MARGIN = 0.1  # Hartmann-6 units (optimum 3.32237)


def make_claims(rows, compile_ours: float, first_bt: float) -> list[dict]:
    """Claims from the stored rows: the timing rows hold every repeat of both implementations, interleaved on
    the same data; the seed rows hold both best values per seed (the same Sobol start and candidates)."""
    timing = [r for r in rows if "n" in r]
    seeds = [r for r in rows if "seed" in r]
    ratios = [b / o for r in timing for o, b in zip(r["ours_times"], r["botorch_times"])]
    claims = [
        speedup_claim(
            "ours_as_fast_steady_state",
            "our numpyro GP iteration (fit + acquisition) is at least as fast as BoTorch's in steady state at "
            + ", ".join(f"n={r['n']}" for r in timing),
            ratios, 1.0, label="BoTorch / ours seconds per iteration",
            excluded="the pairs are interleaved calls in one process on the same data (repeat r of ours, then of "
                     "BoTorch); median s/iteration ours vs BoTorch: " + "; ".join(
                         f"n={r['n']}: {r['ours_s_per_iter']} vs {r['botorch_s_per_iter']}" for r in timing)
                     + f"; our one-off compile {compile_ours:.1f} s, BoTorch first call {first_bt:.1f} s "
                     "(excluded)"),
    ]
    if seeds:
        optimum = seeds[0]["optimum"]
        claims.append(paired_claim(
            "same_best_values",
            f"over the same {len(seeds)} seeds our BO's best value after {seeds[0]['iterations']} iterations is "
            f"not worse than BoTorch's by more than {SAME_BEST_MARGIN} (non-inferiority)",
            [r["ours_best"] for r in seeds], [r["botorch_best"] for r in seeds], margin=-SAME_BEST_MARGIN,
            oracle=optimum, evidence=f"Hartmann-6 optimum {optimum}; per seed ours "
                                     f"{[r['ours_best'] for r in seeds]}, "
                                     f"BoTorch {[r['botorch_best'] for r in seeds]}"))
    return claims


def print_claims(claims) -> None:
    for c in claims:
        print({True: "HELD         ", False: "NOT HELD     ", None: "INCONCLUSIVE "}[c["held"]] + c["id"] + ": "
              + c["evidence"])


def claims_from_rows() -> int:
    """Recompute `claims` of the committed results file from its stored rows; everything else is kept."""
    path = RESULTS_DIR / "lgbo_vs_botorch.json"
    record = recompute_claims(path, lambda r: make_claims(r["rows"], r["compile_seconds_ours"],
                                                          r["first_call_seconds_botorch"]))
    print_claims(record["claims"])
    print(f"rewrote the claims of {path}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="20,50,100")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--fit-steps", type=int, default=40)
    ap.add_argument("--claims-from-rows", action="store_true",
                    help="recompute the claims of the committed results file from its rows (no run)")
    args = ap.parse_args(argv)
    if args.claims_from_rows:
        claims_from_rows()
        from lgbo import render_readme  # benchmarks/lgbo.py, beside this file

        render_readme()
        return 0
    ns = [int(v) for v in args.ns.split(",")]
    start, load_at_start = time.perf_counter(), os.getloadavg()[0]
    ours = make_ours(args.fit_steps)
    bt, torch = make_botorch()
    times, first = timing({"ours": ours, "botorch": bt}, ns, args.repeats)
    t_ours, t_bt, compile_ours, first_bt = times["ours"], times["botorch"], first["ours"], first["botorch"]
    rows = []
    for n in ns:
        rows.append({"n": n, "ours_s_per_iter": round(statistics.median(t_ours[n]), 4),
                     "botorch_s_per_iter": round(statistics.median(t_bt[n]), 4),
                     "speedup": round(statistics.median(t_bt[n]) / statistics.median(t_ours[n]), 2),
                     "ours_times": t_ours[n], "botorch_times": t_bt[n]})
        print(rows[-1], flush=True)
    best = {"ours": [], "botorch": []}
    for s in range(args.seeds):
        with jax.enable_x64(True):
            best["ours"].append(bo_loop(ours, s, args.iterations, warm_start=True))
        best["botorch"].append(bo_loop(bt, s, args.iterations, warm_start=False))
        print(f"seed {s}: best ours {best['ours'][-1]:.4f}, botorch {best['botorch'][-1]:.4f}", flush=True)
    for s in range(args.seeds):
        rows.append({"seed": s, "iterations": args.iterations, "ours_best": round(best["ours"][s], 4),
                     "botorch_best": round(best["botorch"][s], 4), "optimum": HARTMANN6_MAX})
    claims = make_claims(rows, compile_ours, first_bt)
    print_claims(claims)
    path = write_results("lgbo_vs_botorch", rows=rows, claims=claims, wall_seconds=time.perf_counter() - start,
                         scale={"ns": ns, "repeats": args.repeats, "seeds": args.seeds,
                                "iterations": args.iterations, "candidates": N_CAND, "n_max": N_MAX,
                                "fit_steps": args.fit_steps, "torch": torch.__version__,
                                "machine": f"{os.cpu_count()} CPU cores, "
                                           f"1-min load average {load_at_start:.1f} at start"},
                         compile_seconds_ours=round(compile_ours, 2), first_call_seconds_botorch=round(first_bt, 2))
    print(f"wrote {path}")
    from lgbo import render_readme  # benchmarks/lgbo.py, beside this file

    render_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main())
