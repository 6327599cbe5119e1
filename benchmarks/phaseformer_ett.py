"""PhaseFormer, SparseTSF and DLinear on the 16 ETT settings (L = 720), beside the published numbers.

    nice -n 10 .venv/bin/python benchmarks/phaseformer_ett.py --models sparsetsf --settings ETTh1-96,ETTh2-96,ETTm1-96
    nice -n 10 .venv/bin/python benchmarks/phaseformer_ett.py --models phaseformer --settings all --seeds 2021
    .venv/bin/python benchmarks/phaseformer_ett.py --models phaseformer --seeds 2021 --workers 2  # the speed run
    .venv/bin/python benchmarks/phaseformer_ett.py --render-only
    python benchmarks/phaseformer_ett.py --runs-dir /tmp/gpu_runs --no-aggregate --seeds 2022  # worker (GPU)

Every (model, setting, seed) run is stored on its own in ``benchmarks/results/phaseformer_ett_runs/`` as soon as it
finishes, so an interrupted benchmark resumes where it stopped (finished runs are skipped). After each run the
aggregate ``benchmarks/results/phaseformer_ett.json`` (rows: model, dataset, horizon, seed, mse, mae, params, macs,
train_seconds) and its claims are rewritten from all stored runs, and the README table is rendered from it.
Claims over settings that were not run (or have one seed) are inconclusive, with what is missing.

Each run records the device it trained on (``device``: ``cpu`` or the GPU's name). Accuracy claims use every run;
the 40-minute speed claim is about this 2-core machine, so it counts CPU runs only. ``--runs-dir`` and
``--no-aggregate`` let several worker processes share one accelerator (``benchmarks/device_h200.sh``); their runs are
copied into the runs folder afterwards and aggregated with ``--render-only``.

``--workers N`` trains N runs at a time in N child processes, each pinned to one core with a single-threaded XLA
(a PhaseFormer step at batch 16 is op-overhead bound: one core runs it as fast as two, so two processes double the
throughput); children claim jobs through lock files, longest first. A ``--workers`` invocation that trains all 16
PhaseFormer settings of one seed (and only that seed) on the CPU records its wall time in
``phaseformer_ett_runs/speed/``, which the speed claim reads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.results import claim, t_interval, verdict, write_results  # noqa: E402
from forecasting.phaseformer import configs  # noqa: E402

NAME = "phaseformer_ett"
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / f"{NAME}_runs"
README = ROOT / "forecasting" / "phaseformer" / "README.md"
SETTINGS = [(d, h) for d in configs.DATASETS for h in configs.HORIZONS]
MODELS = ("phaseformer", "sparsetsf", "dlinear")

# Published MSE / MAE at L = 720 (method notes; PhaseFormer from the paper, baselines from their papers / FITS logs).
PAPER = {
    "phaseformer": {
        ("ETTh1", 96): (.359, .382), ("ETTh1", 192): (.397, .404),
        ("ETTh1", 336): (.425, .424), ("ETTh1", 720): (.431, .450),
        ("ETTh2", 96): (.275, .338), ("ETTh2", 192): (.341, .376),
        ("ETTh2", 336): (.369, .405), ("ETTh2", 720): (.402, .436),
        ("ETTm1", 96): (.293, .344), ("ETTm1", 192): (.323, .361),
        ("ETTm1", 336): (.358, .381), ("ETTm1", 720): (.412, .410),
        ("ETTm2", 96): (.163, .256), ("ETTm2", 192): (.219, .293),
        ("ETTm2", 336): (.269, .326), ("ETTm2", 720): (.351, .379),
    },
    "sparsetsf": {
        ("ETTh1", 96): (.362, .389), ("ETTh1", 192): (.404, .412),
        ("ETTh1", 336): (.435, .428), ("ETTh1", 720): (.426, .448),
        ("ETTh2", 96): (.294, .346), ("ETTh2", 192): (.340, .377),
        ("ETTh2", 336): (.360, .398), ("ETTh2", 720): (.383, .425),
        ("ETTm1", 96): (.312, .354), ("ETTm1", 192): (.347, .376),
        ("ETTm1", 336): (.367, .386), ("ETTm1", 720): (.419, .413),
    },
    "dlinear": {
        ("ETTh1", 96): (.381, .407), ("ETTh1", 192): (.419, .430),
        ("ETTh1", 336): (.454, .456), ("ETTh1", 720): (.499, .512),
        ("ETTh2", 96): (.302, .367), ("ETTh2", 192): (.411, .437),
        ("ETTh2", 336): (.542, .514), ("ETTh2", 720): (.888, .670),
    },
}
PIPELINE_CHECKS = [("sparsetsf", "ETTh1", 96), ("sparsetsf", "ETTh2", 96), ("sparsetsf", "ETTm1", 96),
                   ("dlinear", "ETTh1", 96), ("dlinear", "ETTh2", 96)]  # DLinear ETTm1 at L=720 has no reference


def config_for(model: str, dataset: str, horizon: int, seed: int, ettm1_layers: str):
    if model == "phaseformer":
        return configs.phaseformer(dataset, horizon, ettm1_layers=ettm1_layers, seed=seed, plot=False)
    if model == "sparsetsf":
        return configs.sparsetsf(dataset, horizon, seed=seed, plot=False)
    return configs.dlinear(dataset, horizon, seed=seed, plot=False)


def run_path(model, dataset, horizon, seed, runs_dir=None):
    return (runs_dir or RUNS) / f"{model}_{dataset}_{horizon}_s{seed}.json"


def run_one(model, dataset, horizon, seed, ettm1_layers, runs_dir=None):
    import jax

    from core.config import to_dict
    from forecasting.phaseformer import train as train_lib

    config = config_for(model, dataset, horizon, seed, ettm1_layers)
    load_before = os.getloadavg()[0]
    result = train_lib.train(config, show_progress=False,
                             log=lambda row: print(f"  {model} {dataset}-{horizon} s{seed} {row}", flush=True))
    row = dict(result.metrics)
    row["macs"] = train_lib.count_macs(result.graphdef, result.params, config.seq_len, result.data.num_channels)
    row["load_avg_1min"] = [load_before, os.getloadavg()[0]]
    row["device"] = jax.devices()[0].device_kind.lower() if jax.default_backend() != "cpu" else "cpu"
    row["history"] = result.history
    row["config"] = to_dict(config)
    if model == "phaseformer":
        row["paper_params"] = configs.PAPER_PARAMS.get((dataset, horizon)) if config.num_layers == \
            configs.RELEASED[(dataset, horizon)][1] else None
    path = run_path(model, dataset, horizon, seed, runs_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(row, indent=1))
    path.with_suffix(".tmp").replace(path)  # a reader never sees half a file
    return row


def load_runs():
    rows = []
    for path in sorted(RUNS.glob("*.json")):
        rows.append(json.loads(path.read_text()))
    return rows


SPEED = RUNS / "speed"


def load_speed_records():
    return [json.loads(p.read_text()) for p in sorted(SPEED.glob("*.json"))] if SPEED.exists() else []


def job_cost(job) -> float:
    """Relative training cost for longest-first scheduling: training windows x routing layers (baselines: 0.2)."""
    model, dataset, horizon, _ = job
    windows = 8640 * (4 if dataset.startswith("ETTm") else 1) - 720 - horizon + 1
    layers = configs.RELEASED[(dataset, horizon)][1] if model == "phaseformer" else 0.2
    return windows * layers


def claim_job(claims_dir, job) -> bool:
    """True for exactly one process per job (an O_EXCL lock file)."""
    try:
        os.close(os.open(pathlib.Path(claims_dir) / "{}_{}_{}_s{}".format(*job), os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def run_workers(argv, jobs, workers: int):
    """Train ``jobs`` in ``workers`` child processes (one core and a single-threaded XLA each); returns wall seconds."""
    claims_dir = tempfile.mkdtemp(prefix="phaseformer_claims_")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
    child_argv, skip = [], False
    for a in argv:  # drop "--workers N" / "--workers=N"
        if skip or a.startswith("--workers"):
            skip = a == "--workers" and not skip
            continue
        child_argv.append(a)
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-u", __file__, *child_argv, "--no-aggregate", "--claims-dir",
                               claims_dir, "--worker-cpu", str(i)], env=env) for i in range(workers)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - start
    shutil.rmtree(claims_dir, ignore_errors=True)
    if any(codes):
        raise SystemExit(f"worker exit codes {codes}: see the log above; finished runs are stored, rerun to resume")
    return wall


def _mean(rows, key):
    return statistics.fmean(r[key] for r in rows) if rows else None


def _device(row) -> str:
    """'cpu' (this 2-core machine; runs from before the field existed are CPU runs) or the GPU's short name."""
    return row.get("device", "cpu").replace("nvidia ", "")


def summarise(rows):
    """{(model, dataset, horizon): {mse, mae, seeds, params, macs, train_seconds}} (means over seeds)."""
    table = {}
    for model in MODELS:
        for dataset, horizon in SETTINGS:
            sel = [r for r in rows if (r["model"], r["dataset"], r["horizon"]) == (model, dataset, horizon)]
            if sel:
                table[(model, dataset, horizon)] = {
                    "mse": _mean(sel, "mse"), "mae": _mean(sel, "mae"), "seeds": sorted(r["seed"] for r in sel),
                    "params": sel[0]["params"], "macs": sel[0].get("macs"),
                    "train_seconds": _mean(sel, "total_seconds"), "epochs": _mean(sel, "epochs_run"),
                    "mse_last": _mean(sel, "mse_last") if all("mse_last" in r for r in sel) else None,
                    "seconds_by_device": {dev: _mean([r for r in sel if _device(r) == dev], "total_seconds")
                                          for dev in sorted({_device(r) for r in sel})}}
    return table


def _seed_values(rows, model, dataset, horizon, key="mse"):
    """Per-seed values of one (model, setting), seed order."""
    sel = sorted((r for r in rows if (r["model"], r["dataset"], r["horizon"]) == (model, dataset, horizon)),
                 key=lambda r: r["seed"])
    return [float(r[key]) for r in sel]


def _three_valued(lo, hi, inside) -> bool | None:
    """inside(lo, hi) -> True / False / None, or None when the interval is undefined."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return inside(lo, hi)


def _all_of(verdicts) -> bool | None:
    verdicts = list(verdicts)
    return False if False in verdicts else (True if verdicts and all(v is True for v in verdicts) else None)


def within_band(values, paper, tolerance):
    """Equivalence: the 95% t-interval of the per-seed relative error lies inside +/-tolerance (True), wholly
    outside it (False), or neither (None)."""
    rel = [v / paper - 1 for v in values]
    lo, hi = t_interval(rel)
    held = _three_valued(lo, hi, lambda a, b: True if -tolerance <= a and b <= tolerance
                         else (False if b < -tolerance or a > tolerance else None))
    return held, float(np.mean(rel)), (lo, hi), rel


def welch_interval(a, b, level=0.95):
    """Welch t-interval of mean(a) - mean(b) for two independent sets of seeds (different models' seeds are not
    paired); (nan, nan) when either side has fewer than two values."""
    from scipy import stats
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return float("nan"), float("nan")
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        d = float(a.mean() - b.mean())
        return d, d
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * se
    d = float(a.mean() - b.mean())
    return d - half, d + half


def _bounds(lo, hi):
    return [float(v) if math.isfinite(v) else None for v in (lo, hi)]


def make_claims(table, rows, speed_records=None):
    """Every claim, from the per-seed rows (and the stored speed records): intervals over seeds, three-valued
    verdicts (held / not held / inconclusive). `table` (the per-setting means) is kept for the callers' sake."""
    claims = []
    # 1. the pipeline proof: baselines within 2 % of their published MSE (equivalence per setting)
    parts, verdicts, ns, worst = [], [], [], None
    for model, dataset, horizon in PIPELINE_CHECKS:
        values = _seed_values(rows, model, dataset, horizon)
        paper = PAPER[model][(dataset, horizon)][0]
        if not values:
            verdicts.append(None)
            parts.append(f"{model} {dataset}-{horizon}: not run")
            continue
        held, mean_rel, (lo, hi), _ = within_band(values, paper, 0.02)
        verdicts.append(held)
        ns.append(len(values))
        parts.append(f"{model} {dataset}-{horizon}: {np.mean(values):.4f} vs {paper} ({mean_rel:+.1%}, 95% "
                     f"t-interval [{lo:+.1%}, {hi:+.1%}], n={len(values)}): "
                     + {True: "inside", False: "outside", None: "undecided"}[held])
        if worst is None or (held is not True and (worst[0] is True or held is False)):
            worst = (held, mean_rel, lo, hi, len(values))
    held = _all_of(verdicts)
    claims.append(claim("baselines_within_2pct", "SparseTSF (ETTh1/ETTh2/ETTm1-96) and DLinear (ETTh1/ETTh2-96) reach "
                        "their published MSE within 2% on this pipeline", held,
                        "per setting, the 95% t-interval over seeds of the relative error must lie inside +/-2% "
                        "(held), wholly outside it (not held), else undecided; " + "; ".join(parts)
                        + "; effect and interval of the deciding setting",
                        n=min(ns) if ns else 0, effect=worst[1] if worst else None,
                        interval=_bounds(worst[2], worst[3]) if worst else [None, None],
                        test="t-interval of the relative error inside +/-0.02 (equivalence), every setting"))
    # 2. PhaseFormer accuracy: one-sided per setting (MSE at most 3 % / 6 % above the paper's)
    within3, within6, parts, ns = [], [], [], []
    for dataset, horizon in SETTINGS:
        values = _seed_values(rows, "phaseformer", dataset, horizon)
        paper = PAPER["phaseformer"][(dataset, horizon)][0]
        if len(values) < 2:
            within3.append(None)
            within6.append(None)
            parts.append(f"{dataset}-{horizon}: {len(values)} seed(s)")
            continue
        rel = [v / paper - 1 for v in values]
        lo, hi = t_interval(rel)
        ns.append(len(values))
        within3.append(verdict((lo, hi), 0.03, higher_is_better=False))
        within6.append(verdict((lo, hi), 0.06, higher_is_better=False))
        parts.append(f"{dataset}-{horizon} {np.mean(rel):+.1%} [{lo:+.1%}, {hi:+.1%}]")
    surely3 = sum(v is True for v in within3)
    maybe3 = surely3 + sum(v is None for v in within3)
    point3 = sum(r["mse"] / PAPER["phaseformer"][(d, h)][0] <= 1.03
                 for (d, h), r in ((k[1:], e) for k, e in table.items() if k[0] == "phaseformer"))
    if surely3 >= 12 and all(v is True for v in within6):
        held = True
    elif maybe3 < 12 or False in within6:
        held = False
    else:
        held = None
    claims.append(claim(
        "phaseformer_within_3pct_12of16", "PhaseFormer (mean of 3 seeds) within 3% of the paper's MSE on >= 12 of "
        "16 settings and within 6% on all", held,
        f"per setting, the 95% t-interval over seeds of the relative error (ours / paper - 1) against +3% and +6%: "
        f"{surely3} settings surely within 3% (interval below +3%), {maybe3 - surely3} undecided, "
        f"{len(within3) - maybe3} surely above; within 6%: {sum(v is True for v in within6)} sure, "
        f"{sum(v is None for v in within6)} undecided, {sum(v is False for v in within6)} surely above; held needs "
        f">= 12 sure and every setting surely within 6%, not held when fewer than 12 can be or one is surely "
        f"above 6%; interval = [sure, sure + undecided] count within 3% (seed means: {point3}); " + "; ".join(parts),
        n=min(ns) if ns else 0, effect=float(point3), interval=[float(surely3), float(maybe3)],
        test="per-setting one-sided t-intervals vs +3% / +6%, counted against 12 of 16"))
    # 3. comparative claims: Welch intervals (different models' seeds are independent)
    for other, subset, cid in (("dlinear", SETTINGS, "beats_dlinear_everywhere"),
                               ("sparsetsf", [s for s in SETTINGS if s[0] == "ETTm1"], "beats_sparsetsf_ettm1")):
        parts, verdicts, one_seed, entries = [], [], [], []
        for dataset, horizon in subset:
            a = _seed_values(rows, "phaseformer", dataset, horizon)
            b = _seed_values(rows, other, dataset, horizon)
            if not a or not b:
                verdicts.append(None)
                parts.append(f"{dataset}-{horizon}: not run")
                continue
            lo, hi = welch_interval(a, b)
            v = verdict((lo, hi), 0.0, higher_is_better=False)
            verdicts.append(v)
            if len(b) < 2 or len(a) < 2:
                one_seed.append(f"{dataset}-{horizon}")
            parts.append(f"{dataset}-{horizon}: {np.mean(a):.4f} (n={len(a)}) vs {np.mean(b):.4f} (n={len(b)})"
                         + ("" if not math.isfinite(lo) else f", difference [{lo:+.4f}, {hi:+.4f}]"))
            entries.append((v, float(np.mean(a) - np.mean(b)), lo, hi, min(len(a), len(b))))
        held = _all_of(verdicts)
        # the deciding setting: one whose verdict is the claim's, preferring one with an interval
        same = sorted((e for e in entries if e[0] is held), key=lambda e: not math.isfinite(e[2]))
        decisive = same[0] if same else (entries[0] if entries else None)
        claims.append(claim(
            cid, f"PhaseFormer has lower MSE than {other} on " +
            ("every setting" if other == "dlinear" else "every ETTm1 horizon"), held,
            "per setting, Welch 95% t-interval of mean MSE difference (PhaseFormer - " + other + "); held when "
            "every setting's interval is below 0, not held when one is above; " + "; ".join(parts)
            + (f"; {other} has one seed on {len(one_seed)} settings ({', '.join(one_seed)}): no interval there, "
               f"rerun those with 3 seeds" if one_seed else "") + "; effect and interval of the deciding setting",
            n=decisive[4] if decisive else 0, effect=decisive[1] if decisive else None,
            interval=_bounds(decisive[2], decisive[3]) if decisive else [None, None],
            test="Welch t-interval per setting, all must hold"))
    # 4. speed: one seed of the 16 PhaseFormer settings in 40 minutes on this machine (CPU runs only)
    first_seed = {}
    for r in rows:
        if r["model"] == "phaseformer" and _device(r) == "cpu":
            key = (r["dataset"], r["horizon"])
            if key not in first_seed or r["seed"] < first_seed[key]["seed"]:
                first_seed[key] = r
    records = load_speed_records() if speed_records is None else speed_records
    if records:
        walls = [rec["wall_seconds"] for rec in records]
        best = min(records, key=lambda rec: rec["wall_seconds"])
        claims.append(claim(
            "speed_16_settings_40min", "one seed of all 16 PhaseFormer settings trains and evaluates in <= 40 min "
            "on this 2-core machine", max(walls) <= 2400,
            f"{len(walls)} invocation(s) that trained all 16 settings of one seed: wall "
            f"{', '.join(f'{w:.0f}' for w in walls)} s "
            f"against 2400 s, held only if every one is within it (best: seed {best['seed']}, {best['workers']} worker "
            f"processes, load average {best['load_avg_1min'][0]:.2f} before); per setting: "
            + "; ".join(f"{k}: {sec:.0f}s" for k, sec in best["runs_seconds"].items()),
            n=len(walls), effect=float(max(walls)), interval=[float(min(walls)), float(max(walls))],
            test="every measured invocation <= 2400 s"))
    else:
        measured = sum(r["total_seconds"] for r in first_seed.values())
        claims.append(claim(
            "speed_16_settings_40min", "one seed of all 16 PhaseFormer settings trains and evaluates in <= 40 min "
            "on this 2-core machine", None,
            f"no invocation timed all 16 settings together; the CPU runs' own seconds add up to {measured:.0f} s over "
            f"{len(first_seed)} settings (not a wall-clock measurement of one invocation): rerun with --workers 2",
            n=0, interval=[None, None], test="every measured invocation <= 2400 s"))
    return claims


def fmt(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def _seconds(entry) -> str:
    if entry is None:
        return "-"
    return "; ".join(f"{sec:.0f} ({dev})" for dev, sec in entry["seconds_by_device"].items())


def render_table(table):
    lines = ["| setting | PhaseFormer MSE / MAE (ours) | seeds | paper | MSE ratio | SparseTSF ours | SparseTSF paper "
             "| DLinear ours | DLinear paper | params | PF train+eval s (device) | PF MSE, last-epoch weights |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for dataset, horizon in SETTINGS:
        pf = table.get(("phaseformer", dataset, horizon))
        st = table.get(("sparsetsf", dataset, horizon))
        dl = table.get(("dlinear", dataset, horizon))
        pp = PAPER["phaseformer"][(dataset, horizon)]
        sp = PAPER["sparsetsf"].get((dataset, horizon))
        dp = PAPER["dlinear"].get((dataset, horizon))
        ratio = pf["mse"] / pp[0] if pf else None
        mark = "" if ratio is None else (" ok" if ratio <= 1.03 else (" miss>3%" if ratio <= 1.06 else " miss>6%"))
        pair = lambda e: "not run" if e is None else f"{e['mse']:.3f} / {e['mae']:.3f}"  # noqa: E731
        paper = lambda p: "n/a" if p is None else f"{p[0]:.3f} / {p[1]:.3f}"  # noqa: E731
        lines.append(f"| {dataset}-{horizon} | {pair(pf)} | {len(pf['seeds']) if pf else 0} | {paper(pp)} | "
                     f"{fmt(ratio)}{mark} | {pair(st)} | {paper(sp)} | {pair(dl)} | {paper(dp)} | "
                     f"{pf['params'] if pf else configs.PAPER_PARAMS[(dataset, horizon)]} | "
                     f"{_seconds(pf)} | {fmt(pf['mse_last'] if pf else None)} |")
    return "\n".join(lines)


def render_readme(table, claims):
    if not README.exists():
        return
    text = README.read_text()
    start, end = f"<!-- table:{NAME} -->", f"<!-- /table:{NAME} -->"
    if start not in text or end not in text:
        return
    body = [render_table(table), "", "Claims (from `benchmarks/results/phaseformer_ett.json`):", ""]
    for c in claims:
        result = {True: "held", False: "NOT held", None: "inconclusive"}[c["held"]]
        interval = ", ".join("-" if v is None else f"{v:.4g}" for v in c["interval"])
        effect = "" if c.get("effect") is None else f"effect {c['effect']:.4g} "
        body.append(f"- **{c['id']}**: {result} (n={c['n']}; {effect}[{interval}]; {c['test']}). {c['evidence']}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    README.write_text(head + start + "\n" + "\n".join(body) + "\n" + end + tail)


def aggregate(command, invocation_seconds):
    """Rows are every stored run (runs resume across invocations), so the recorded wall time is the sum of their
    own wall times; this invocation's time is kept beside it."""
    rows_full = load_runs()
    wall_seconds = sum(float(r.get("total_seconds") or 0.0) for r in rows_full)
    table = summarise(rows_full)
    claims = make_claims(table, rows_full)
    rows = [{k: r.get(k, "cpu" if k == "device" else None)
             for k in ("model", "dataset", "horizon", "seed", "mse", "mae", "params", "macs", "train_seconds",
                       "total_seconds", "epochs_run", "best_epoch", "weights", "mse_last", "mae_last",
                       "test_windows", "paper_params",
                       "load_avg_1min", "device")} for r in rows_full]
    for r in rows:
        paper = PAPER.get(r["model"], {}).get((r["dataset"], r["horizon"]))
        r["paper_mse"], r["paper_mae"] = paper if paper else (None, None)
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=wall_seconds, command=command,
                         scale={"settings_run": sorted({f"{r['model']}:{r['dataset']}-{r['horizon']}" for r in rows}),
                                "acceptance_scale": "16 settings x 3 models x 3 seeds",
                                "note": "runs are resumable; rows are exactly the runs stored in "
                                        "benchmarks/results/phaseformer_ett_runs/",
                                "macs": "XLA cost-analysis flops / 2 of one forward pass on one window (all 7 "
                                        "channels), batch 1",
                                "checkpoint": "best validation loss (weights='best'); mse_last / mae_last score "
                                              "the last epoch's weights (the Lightning code's convention), "
                                              "reported only",
                                "this_invocation_seconds": round(invocation_seconds, 1),
                                "ettm1_layers": "released (2, 2, 1, 2)"})
    render_readme(table, claims)
    return path, claims


def step_timing(datasets=("ETTh1",), reps: int = 5):
    """Process CPU time of one jitted PhaseFormer training step (released ETTh1-96 / ETTm1-96 configs, their batch
    sizes), with and without dropout, and of one epoch's worth of steps; writes phaseformer_ett_step_timing.json."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from forecasting.phaseformer import train as train_lib

    rows = []
    for dataset in datasets:
        for dropout in (0.1, 0.0):
            config = configs.phaseformer(dataset, 96, dropout=dropout)
            graphdef, params = nnx.split(train_lib.build_model(config, jax.random.key(0)), nnx.Param)
            tx = train_lib.make_optimizer(config)
            opt_state = tx.init(params)
            step = jax.jit(train_lib.make_train_step(config, graphdef, tx))
            b = config.batch_size
            x = jax.random.normal(jax.random.key(1), (b, 720, 7))
            y = jax.random.normal(jax.random.key(2), (b, 96, 7))
            args = (params, opt_state, x, y, jnp.ones(b), jax.random.key(3))
            jax.block_until_ready(step(*args))
            t_cpu, t_wall = time.process_time(), time.perf_counter()
            for _ in range(reps):
                jax.block_until_ready(step(*args))
            cpu = (time.process_time() - t_cpu) / reps
            wall = (time.perf_counter() - t_wall) / reps
            windows = 8640 * (4 if dataset == "ETTm1" else 1) - 720 - 96 + 1
            steps = -(-windows // b)
            rows.append({"dataset": dataset, "horizon": 96, "dropout": dropout, "batch_size": b,
                         "step_cpu_seconds": cpu, "step_wall_seconds": wall, "steps_per_epoch": steps,
                         "epoch_cpu_seconds_estimate": cpu * steps, "load_avg_1min": os.getloadavg()[0]})
            print(rows[-1], flush=True)
    write_results(f"{NAME}_step_timing", rows=rows, claims=[], wall_seconds=0.0,
                  command="python benchmarks/phaseformer_ett.py --step-timing",
                  note="process CPU time (all threads) per jitted training step; the machine was shared, so wall "
                       "time is inflated and CPU time includes thread-pool contention")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="phaseformer,sparsetsf,dlinear")
    parser.add_argument("--settings", default="all", help="'all' or a comma list like ETTh1-96,ETTm1-192")
    parser.add_argument("--seeds", default="2021", help="comma list of seeds")
    parser.add_argument("--ettm1-layers", default="released", choices=("released", "variant"))
    parser.add_argument("--render-only", action="store_true")
    parser.add_argument("--claims-from-rows", action="store_true",
                        help="recompute the claims (and the README table) from the rows in the committed JSON; "
                             "command, git_commit, wall_seconds and rows are kept as they were")
    parser.add_argument("--step-timing", action="store_true", help="only time one training step (CPU seconds)")
    parser.add_argument("--timing-datasets", default="ETTh1", help="datasets for --step-timing, e.g. ETTh1,ETTm1")
    parser.add_argument("--order", default="setting", choices=("setting", "model"),
                        help="loop settings outermost (setting) or models outermost (model)")
    parser.add_argument("--runs-dir", default=None, help="store runs here instead of the results runs folder")
    parser.add_argument("--no-aggregate", action="store_true",
                        help="only store runs (for worker processes sharing a device); aggregate later")
    parser.add_argument("--workers", type=int, default=1,
                        help="train this many runs at once, one child process per core (longest jobs first)")
    parser.add_argument("--claims-dir", default=None, help=argparse.SUPPRESS)  # set by --workers for its children
    parser.add_argument("--worker-cpu", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workers < 1:
        raise SystemExit(f"--workers {args.workers}: expected >= 1")
    if args.claims_from_rows:
        from core.results import git_commit
        path = RESULTS / f"{NAME}.json"
        rec = json.loads(path.read_text())
        # the stored rows carry null for fields a run did not record; the runs' own files omit them
        rows = [{k: v for k, v in r.items() if v is not None} for r in rec["rows"]]
        table = summarise(rows)
        rec["claims"] = make_claims(table, rows)
        rec["claims_recomputed"] = f"{git_commit()[:7]} (from the stored rows and phaseformer_ett_runs/speed/)"
        path.write_text(json.dumps(rec, indent=2) + "\n")
        render_readme(table, rec["claims"])
        for c in rec["claims"]:
            print({True: "HELD", False: "NOT HELD", None: "INCONCLUSIVE"}[c["held"]], c["id"], c.get("effect"),
                  c["interval"])
        return
    if args.step_timing:
        step_timing(tuple(d.strip() for d in args.timing_datasets.split(",")))
        return
    start = time.perf_counter()
    command = "python benchmarks/phaseformer_ett.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not args.render_only:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        for m in models:
            if m not in MODELS:
                raise SystemExit(f"--models: {m!r} is not one of {MODELS}")
        if args.settings == "all":
            settings = SETTINGS
        else:
            settings = []
            for item in args.settings.split(","):
                d, h = item.strip().rsplit("-", 1)
                if (d, int(h)) not in SETTINGS:
                    raise SystemExit(f"--settings: {item!r} is not an ETT setting like ETTh1-96")
                settings.append((d, int(h)))
        seeds = [int(s) for s in args.seeds.split(",")]
        jobs = ([(m, d, h, s) for s in seeds for (d, h) in settings for m in models] if args.order == "setting"
                else [(m, d, h, s) for s in seeds for m in models for (d, h) in settings])
        runs_dir = pathlib.Path(args.runs_dir) if args.runs_dir else None
        stored = lambda job: run_path(*job).exists() or (runs_dir and run_path(*job, runs_dir).exists())  # noqa: E731
        if args.workers > 1 or args.claims_dir:
            jobs = sorted(jobs, key=job_cost, reverse=True)
        if args.workers > 1:
            todo = [job for job in jobs if not stored(job)]
            load_before = list(os.getloadavg())
            wall = run_workers(argv if argv is not None else sys.argv[1:], jobs, args.workers)
            for seed in seeds:
                trained = {(d, h) for (m, d, h, s) in todo if m == "phaseformer" and s == seed}
                # the wall time is one seed's only when the invocation trained one seed
                if models == ["phaseformer"] and len(seeds) == 1 and trained == set(SETTINGS) and runs_dir is None:
                    rows = [json.loads(run_path("phaseformer", d, h, seed).read_text()) for d, h in SETTINGS]
                    if all(r.get("device") == "cpu" for r in rows):
                        SPEED.mkdir(parents=True, exist_ok=True)
                        (SPEED / f"phaseformer_s{seed}.json").write_text(json.dumps(
                            {"seed": seed, "workers": args.workers, "wall_seconds": wall, "seeds_in_invocation": seeds,
                             "load_avg_1min": [load_before[0], os.getloadavg()[0]], "command": command,
                             "runs_seconds": {f"{d}-{h}": r["total_seconds"] for (d, h), r in zip(SETTINGS, rows)}},
                            indent=1))
        else:
            if args.worker_cpu is not None and hasattr(os, "sched_setaffinity"):
                cpus = sorted(os.sched_getaffinity(0))
                os.sched_setaffinity(0, {cpus[args.worker_cpu % len(cpus)]})
            for model, dataset, horizon, seed in jobs:
                if stored((model, dataset, horizon, seed)):
                    if not args.claims_dir:
                        print(f"skip {model} {dataset}-{horizon} s{seed} (stored)", flush=True)
                    continue
                if args.claims_dir and not claim_job(args.claims_dir, (model, dataset, horizon, seed)):
                    continue
                t0 = time.perf_counter()
                row = run_one(model, dataset, horizon, seed, args.ettm1_layers, runs_dir)
                print(f"done {model} {dataset}-{horizon} s{seed}: mse {row['mse']:.4f} mae {row['mae']:.4f} "
                      f"({time.perf_counter() - t0:.0f}s, {row['device']})", flush=True)
                if not args.no_aggregate:
                    aggregate(command, time.perf_counter() - start)
        if args.no_aggregate:
            return
    path, claims = aggregate(command, time.perf_counter() - start)
    print(f"wrote {path}")
    for c in claims:
        print(f"  {c['id']}: {({True: 'held', False: 'NOT held', None: 'inconclusive'})[c['held']]} - "
              f"{c['evidence'][:300]}")


if __name__ == "__main__":
    main()
