"""PhaseFormer's efficiency table (issue 44): parameters, MACs, training seconds per epoch and the XLA memory of one
training step of PhaseFormer, SparseTSF and DLinear, all measured in one run.

Datasets: ETTh1 (the shipped file, through the loader; a whole epoch is timed) and generated series with the shapes
of Weather (21 variables), Electricity (321) and Traffic (862), which are not on this machine: cost does not depend on
the values. There a fraction of an epoch (``--batches`` batches) is timed after a warm-up call and scaled by the
epoch's batch count (the TSL 70 % training split of the real file's rows). Each model trains at its preset's batch
size (PhaseFormer 16, SparseTSF 256, DLinear 32). PhaseFormer uses the released configuration of each dataset at
H = 96 (D 4-32), and Traffic-720 the released D = 128 one, beside which the paper lists published counts.

Repeats are interleaved (repeat r times every model of a dataset before repeat r + 1); ``uptime`` is recorded before
and after. MACs are XLA's flop estimate / 2 of one forward pass over all channels of one window
(``train.count_macs``); memory is XLA's plan for the compiled epoch program (arguments + outputs + temporaries -
aliases - the input series: parameters, Adam state and one step's working set), on this CPU (no allocator peak to
read).

    nice -n 10 .venv/bin/python benchmarks/phaseformer_efficiency.py                  # ~10-15 min on 2 loaded cores
    .venv/bin/python benchmarks/phaseformer_efficiency.py --claims-from-rows
    -> benchmarks/results/phaseformer_efficiency.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import RESULTS_DIR, check, paired_claim, recompute_claims, write_results  # noqa: E402

NAME = "phaseformer_efficiency"
MODELS = ("phaseformer", "sparsetsf", "dlinear")
# the paper's Traffic L = H = 720 efficiency table (method notes): params, MACs, and the rounding they are given at
PUBLISHED_TRAFFIC_720 = {"sparsetsf": {"params": (930, 10), "macs": (34.1e6, 0.1e6)},
                         "dlinear": {"params": (1.04e6, 0.01e6), "macs": (896e6, 1e6)}}
# dataset label -> (shape name, horizon, PhaseFormer preset, SparseTSF period, timed batches (0: whole epoch))
SETTINGS = {
    "ETTh1-96": ("ETTh1", 96, "etth1_96", 24, 0),
    "Weather-96": ("Weather", 96, "weather_96", 4, None),
    "Electricity-96": ("Electricity", 96, "electricity_96", 24, None),
    "Traffic-96": ("Traffic", 96, "traffic_96", 24, None),
    "Traffic-720": ("Traffic", 720, "traffic_720", 24, None),
}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def model_configs(label: str):
    from forecasting.phaseformer import EXPERIMENT, configs
    shape, horizon, preset, period, _ = SETTINGS[label]
    pf = EXPERIMENT.presets[preset]
    return {"phaseformer": dataclasses.replace(pf, plot=False),
            "sparsetsf": configs.sparsetsf(pf.dataset, horizon, sparse_period=period, split=pf.split, plot=False),
            "dlinear": configs.dlinear(pf.dataset, horizon, split=pf.split, plot=False)}


def measure_setting(label: str, batches: dict[str, int], repeats: int, timing_batch: dict[str, int]) -> list[dict]:
    from forecasting import data as data_lib
    from forecasting.phaseformer import efficiency
    shape, horizon, _, _, whole = SETTINGS[label]
    full = efficiency.train_windows(shape, 720, horizon)
    rows_total, channels = efficiency.DATASET_SHAPES[shape]
    prepared = {}
    for name, config in model_configs(label).items():
        if whole == 0:  # the real file through the loader, a whole epoch
            series, timed, source = data_lib.load(shape, config.seq_len, horizon).train, full, "ETTh1.csv (loader)"
            assert data_lib.num_windows(len(series), config.seq_len, horizon) == full
        else:
            timed = batches[shape] * (timing_batch.get(shape) or config.batch_size)
            series = efficiency.generated_series(config.seq_len + horizon + timed - 1, channels)
            source = f"generated ({rows_total} rows x {channels} variables as {shape}; {timed} windows timed)"
        t0 = time.perf_counter()
        prepared[name] = (efficiency.prepare(config, series, full, timed, timing_batch.get(shape, 0)), source,
                          time.perf_counter() - t0)
        print(f"{label} {name}: prepared in {prepared[name][2]:.1f} s", flush=True)
    rows = []
    for r in range(repeats):
        for name in MODELS:
            m, source, prep_s = prepared[name]
            timing = m.time_epoch()
            row = {"setting": label, "dataset": shape, "horizon": horizon, "model": name, "repeat": r,
                   "source": source, "channels": m.channels, "params": m.params, "macs": m.macs,
                   "batch_size": m.config.batch_size, "timing_batch": m.timing_batch, "epoch_batches": m.batches_full,
                   "timed_batches": m.batches_timed,
                   "whole_epoch_timed": m.batches_timed == m.batches_full,
                   **{k: round(v, 4) for k, v in timing.items()},
                   "train_memory_bytes": m.step_memory.get("train"), "temp_bytes": m.step_memory.get("temp"),
                   "prepare_seconds": round(prep_s, 2), "load_1min": round(os.getloadavg()[0], 2)}
            if name == "phaseformer":
                row.update(latent_dim=m.config.latent_dim, layers=m.config.num_layers, routers=m.config.num_routers,
                           heads=m.config.num_heads)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _by(rows, setting, model, key):
    return [r[key] for r in sorted(rows, key=lambda r: r["repeat"]) if r["setting"] == setting and r["model"] == model]


def make_claims(record: dict) -> list[dict]:
    rows = record["rows"]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    first = {(r["setting"], r["model"]): r for r in rows if r["repeat"] == 0}
    claims = []
    for other in ("dlinear", "sparsetsf"):
        for key, what in (("params", "parameters"), ("macs", "MACs per window")):
            parts = [f"{s}: {first[s, 'phaseformer'][key]:,} vs {first[s, other][key]:,}" for s in settings]
            claims.append(check(
                f"fewer_{key}_than_{other}", f"PhaseFormer has fewer {what} than {other} on every measured dataset "
                "(exact counts, a sanity check of the configurations)",
                all(first[s, "phaseformer"][key] < first[s, other][key] for s in settings), "; ".join(parts)))
    if ("Traffic-720", "sparsetsf") in first:
        parts, ok = [], True
        for model, published in PUBLISHED_TRAFFIC_720.items():
            for key, (value, unit) in published.items():
                ours = first["Traffic-720", model][key]
                close = ours is not None and abs(ours - value) <= unit / 2
                ok &= close
                parts.append(f"{model} {key}: ours {ours:,} vs published {value:,.0f} (given to +/-{unit / 2:,.0f}): "
                             + ("matches" if close else "differs"))
        claims.append(check("traffic_720_counts_match_published",
                            "on Traffic L = H = 720 our SparseTSF and DLinear parameters and MACs equal the paper's "
                            "efficiency table at its rounding", ok, "; ".join(parts)))
    for s in settings:
        pf = _by(rows, s, "phaseformer", "epoch_seconds")
        for other in ("sparsetsf", "dlinear"):
            claims.append(paired_claim(
                f"faster_epoch_than_{other}_{s}", f"on {s} a PhaseFormer training epoch takes less time than a "
                f"{other} epoch on this CPU (each at its preset batch size; seconds, paired over interleaved repeats)",
                pf, _by(rows, s, other, "epoch_seconds"), higher_is_better=False, units="s"))
    return claims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--batches", nargs="*", default=["Weather=16", "Electricity=4", "Traffic=1"],
                        help="timed batches per generated dataset shape, NAME=N")
    parser.add_argument("--timing-batch", nargs="*", default=["Traffic=4"],
                        help="windows per timed step for a dataset shape, NAME=N (memory: SparseTSF at batch 256 on "
                        "862 variables needs ~18 GB); its epoch time is scaled per window")
    parser.add_argument("--reuse-log", type=pathlib.Path, help="keep the rows printed by an earlier invocation of this "
                        "script (its stdout) for the settings not measured now; recorded in the JSON")
    parser.add_argument("--claims-from-rows", action="store_true")
    args = parser.parse_args()
    if args.claims_from_rows:
        recompute_claims(RESULTS_DIR / f"{NAME}.json", make_claims)
        return
    batches = {k: int(v) for k, v in (b.split("=") for b in args.batches)}
    timing_batch = {k: int(v) for k, v in (b.split("=") for b in args.timing_batch)}
    t0 = time.time()
    before = uptime()
    print(before, flush=True)
    reused = []
    if args.reuse_log:
        reused = [json.loads(line) for line in args.reuse_log.read_text().splitlines() if line.startswith("{")]
        reused = [r for r in reused if r["setting"] not in args.settings]
    import jax
    rows = list(reused)
    for label in [None, *args.settings]:
        if label is not None:
            rows.extend(measure_setting(label, batches, args.repeats, timing_batch))
        elif not rows:
            continue
        # written first with the reused rows and after every setting, so a stopped run leaves what it finished
        scale = {"settings": sorted(set(r["setting"] for r in rows), key=list(SETTINGS).index),
                 "measured_now": args.settings, "repeats": args.repeats, "timed_batches": batches,
                 "timing_batch": timing_batch,
                 "uptime_before": before, "uptime_after": uptime(), "device": str(jax.devices()[0]),
                 "jax": jax.__version__, "values_matter": False,
                 "reused_rows": (f"{len(reused)} rows of {sorted(set(r['setting'] for r in reused))} from an earlier "
                                 f"invocation's printed rows ({args.reuse_log.name}), same code") if reused else None,
                 "note": "Weather / Electricity / Traffic are generated series of the real files' shapes (not on "
                         "this machine); efficiency does not depend on the values. Their epoch seconds are a timed "
                         "fraction (timed_batches) scaled to the epoch's batch count; ETTh1's are whole epochs of the "
                         "real file."}
        record = {"rows": rows, "scale": scale}
        write_results(NAME, rows=rows, claims=make_claims(record), wall_seconds=time.time() - t0, scale=scale)


if __name__ == "__main__":
    main()
