"""The verdicts of the two whole-process timing benchmarks (issues 45 and 47), on hand-made rows: the demo's
cold-vs-warm cache claims (benchmarks/compile_cache.py --demo) and the whole PhaseFormer run against the
official script (benchmarks/phaseformer_speed.py --whole-run). Each verdict is checked both ways, so a builder
that always says "held" fails here."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _demo_record(cold: dict, warm: dict, totals: tuple[float, float], warm_hits: int = 5) -> dict:
    rows = [{"arm": arm, "experiment": n, "preset": "demo", "seconds": s, "compile_seconds": s / 2,
             "backend_compiles": 9, "cache_hits": (warm_hits if arm == "warm" else 0)}
            for arm, seconds in (("cold", cold), ("warm", warm)) for n, s in seconds.items()]
    scale = {arm: {"process_seconds": total, "load_before": [1.0, 1.0, 1.0], "load_after": [1.0, 1.0, 1.0]}
             for arm, total in zip(("cold", "warm"), totals)}
    return {"rows": rows, "scale": scale}


def test_demo_claims_follow_the_measurements():
    bench = _bench("compile_cache")
    claims = {c["id"]: c for c in bench.make_demo_claims(
        _demo_record({"a": 60.0, "b": 100.0, "c": 40.0}, {"a": 20.0, "b": 58.0, "c": 2.0}, (210.0, 90.0)))}
    assert claims["warm_demo_faster_every_method"]["held"] is True
    assert claims["warm_demo_saves_seconds"]["held"] is True  # -40, -42, -38 s: the interval is below 0
    assert claims["demo_within_five_minutes_cold"]["held"] is True
    assert claims["warm_demo_hits_the_cache"]["held"] is True
    assert "b 100 s" in claims["demo_within_five_minutes_cold"]["evidence"]  # the slowest method is named

    claims = {c["id"]: c for c in bench.make_demo_claims(
        _demo_record({"a": 60.0, "b": 100.0}, {"a": 70.0, "b": 30.0}, (400.0, 301.0), warm_hits=0))}
    assert claims["warm_demo_faster_every_method"]["held"] is False  # method a got slower
    assert claims["demo_within_five_minutes_cold"]["held"] is False
    assert claims["demo_within_five_minutes_warm"]["held"] is False  # 301 s > 300 s
    assert claims["warm_demo_hits_the_cache"]["held"] is False


def _whole_row(pair: int, arm: str, seconds: float, epochs_run: int = 2, hits: int | None = None) -> dict:
    return {"pair": pair, "arm": arm, "dataset": "ETTh1", "batch_size": 256, "epochs": 2, "epochs_run": epochs_run,
            "params": 2072, "process_seconds": seconds,
            "cache_hits": hits if hits is not None else (40 if arm == "ours_warm" else 0)}


def test_whole_run_claims_follow_the_measurements():
    bench = _bench("phaseformer_speed")
    rows = [_whole_row(p, arm, s) for p in range(3) for arm, s in
            (("official", 17.0), ("ours_cold", 30.0 + p), ("ours_warm", 12.0 + p))]
    claims = {c["id"]: c for c in bench.make_whole_run_claims({"rows": rows})}
    assert claims["whole_run_ours_warm_faster_ETTh1_96_b256"]["held"] is True
    assert claims["whole_run_ours_cold_faster_ETTh1_96_b256"]["held"] is False
    assert claims["whole_run_same_work_ETTh1_96_b256"]["held"] is True
    assert claims["whole_run_warm_hits_cache_ETTh1_96_b256"]["held"] is True

    rows[2] = _whole_row(0, "ours_warm", 18.0, epochs_run=1, hits=0)  # one slower, short, uncached warm run
    claims = {c["id"]: c for c in bench.make_whole_run_claims({"rows": rows})}
    assert claims["whole_run_ours_warm_faster_ETTh1_96_b256"]["held"] is False
    assert claims["whole_run_same_work_ETTh1_96_b256"]["held"] is False
    assert claims["whole_run_warm_hits_cache_ETTh1_96_b256"]["held"] is False
