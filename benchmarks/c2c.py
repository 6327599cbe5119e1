"""C2C (paper 17) on the knowledge-split world: does a receiver that reads a sharer's KV cache through a trained
fuser answer what neither model can alone, better than when the sharer writes it a hint, and faster?

    nice -n 10 .venv/bin/python benchmarks/c2c.py [--seeds 0 1 2] [--preset demo]
    .venv/bin/python benchmarks/c2c.py --claims-from-rows     # recompute the claims from the committed rows
                                                              # and rewrite them (the run's provenance kept)

Per seed: a new world, both models trained from scratch (receiver 4 x 128, 4 heads / 2 KV heads; sharer
6 x 192, 6 heads), the fuser trained with both frozen, and the role-swapped fuser. Held-out questions on
entities the fuser never saw: `city` (a fact only the sharer knows, asked in the shared QA format) and `two_hop`
(the sharer's city, then the receiver's colour). Claims are paired over seeds (95 % t-interval of the
per-seed differences); chance is 1 / cities or 1 / colours, the oracle the receiver's cache enriched with the
true hint. Latency: single-query wall time of T2T and C2C, interleaved in one process, on this world's task
(a 2-word hint, a one-token answer) and at the reference's lengths (a 64-token background text, a 64-token
answer).

Writes benchmarks/results/c2c.json and the table in interp/c2c/README.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from core.results import RESULTS_DIR, check, claim, paired_claim, write_results  # noqa: E402
from interp.c2c.configs import presets  # noqa: E402
from interp.c2c.train import CONDITIONS, run_world, with_seed  # noqa: E402

NAME = "c2c"
CLOSED_LOGIT_TOLERANCE = 1e-4  # float32 rounding of two separately compiled programs; an open gate moves logits ~0.1


def rows_of(result: dict, config) -> list[dict]:
    rows = []
    for direction in ("main", "swapped"):
        block = result.get(direction)
        if block is None:
            continue
        for kind in ("city", "two_hop"):
            row = {"seed": result["seed"], "direction": direction, "kind": kind,
                   **{c: block[kind].get(c) for c in (*CONDITIONS, "hint_exact")},
                   "closed_gate_max_abs_diff": block[kind]["closed_gate_max_abs_diff"],
                   "closed_gate_cache_max_abs_diff": block[kind].get("closed_gate_cache_max_abs_diff"),
                   "chance": 1 / (config.world.num_cities if kind == "city" else config.world.num_colours)}
            if kind == "two_hop":
                logits = np.asarray(block["gate_logits"])
                row["open_gates"] = int(np.sum(logits > 0))
                row["gates"] = len(logits[np.isfinite(logits)])
                row["gate_logits"] = block["gate_logits"]
                row["fuser_final_loss"] = block["fuser_loss"][-1][1]
            if direction == "main" and kind == "two_hop":
                row.update(block["latency"])
            rows.append(row)
    return rows


def _arm(rows, direction, kind, cond):
    sel = sorted((r for r in rows if r["direction"] == direction and r["kind"] == kind), key=lambda r: r["seed"])
    return [r[cond] for r in sel]


def _speed_claim(name: str, statement: str, lat: list[dict], suffix: str, how: str) -> dict:
    c2c_s, t2t_s = [r[f"c2c{suffix}_seconds"] for r in lat], [r[f"t2t{suffix}_seconds"] for r in lat]
    speed = [t / c for t, c in zip(t2t_s, c2c_s)]
    return paired_claim(
        name, statement, c2c_s, t2t_s, higher_is_better=False,
        evidence=f"median single-query seconds: C2C {np.mean(c2c_s) * 1e3:.2f} ms, T2T {np.mean(t2t_s) * 1e3:.2f} ms "
                 f"(speed-up {np.mean(speed):.2f}x, per seed {', '.join(f'{s:.2f}' for s in speed)}); {how}")


def claims_of(rows: list[dict]) -> list[dict]:
    out = []
    for kind, what in (("two_hop", "two-hop questions (the sharer's city, the receiver's colour)"),
                       ("city", "sharer-only facts asked in the shared QA format")):
        c2c = _arm(rows, "main", kind, "c2c")
        chance = _arm(rows, "main", kind, "chance")[0]
        oracle = _arm(rows, "main", kind, "oracle")
        for base, label in (("receiver", "the receiver alone"), ("sharer", "the sharer alone"),
                            ("t2t", "text-to-text (the sharer writes a hint the receiver reads)")):
            out.append(paired_claim(
                f"c2c_beats_{base}_{kind}", f"C2C exact match exceeds {label} on held-out {what}",
                c2c, _arm(rows, "main", kind, base), chance=chance, oracle=oracle,
                evidence=f"C2C {np.mean(c2c):.3f} vs {base} {np.mean(_arm(rows, 'main', kind, base)):.3f}; "
                         f"chance {chance:.3f}; cache-enrichment oracle {np.mean(oracle):.3f}"))
    lat = [r for r in rows if r["direction"] == "main" and r["kind"] == "two_hop"]
    lat.sort(key=lambda r: r["seed"])
    if "t2t_generate_seconds" in lat[0]:
        hint, answer = lat[0]["latency_hint_tokens"], lat[0]["latency_answer_tokens"]
        out.append(_speed_claim(
            "c2c_faster_than_t2t", "C2C is faster per query than text-to-text at the reference's lengths (the "
            "paper: about 2x-2.5x)", lat, "_generate",
            f"T2T: the sharer writes {hint} tokens, the receiver reads them with the question and writes {answer}; "
            f"C2C: both prefill the question, the fuser runs, the receiver writes {answer}. The reference's eval "
            "recipe caps the background text and the answer at max_new_tokens = 64; no stop token here, so each "
            "arm writes exactly that many"))
    out.append(_speed_claim(
        "c2c_faster_than_t2t_short_hint", "C2C is faster per query than text-to-text on this world's task (a "
        "2-word hint, a one-token answer)", lat, "",
        "T2T: the sharer prefills `BOS e lives in` and decodes `c . EOS` (3 steps), the receiver reads the 5-token "
        "hint + question; C2C: both prefill the section, the fuser runs, the receiver steps once"))
    main_rows = [r for r in rows if r["direction"] == "main"]
    diffs = [r["closed_gate_max_abs_diff"] for r in main_rows]
    cache = [r.get("closed_gate_cache_max_abs_diff") for r in main_rows]
    if None in cache:  # rows from before the cache was compared: the logits alone, bit for bit
        out.append(check("closed_gates_equal_receiver", "with every gate closed C2C gives exactly the receiver "
                         "alone", max(diffs) == 0.0, f"largest |logit difference| over seeds and question kinds: "
                         f"{max(diffs):g}", n=len(diffs)))
    else:
        out.append(check(
            "closed_gates_equal_receiver", "with every gate closed the fuser leaves the receiver's cache unchanged "
            "bit for bit, and C2C's logits are the receiver alone's to float rounding (< 1e-4)",
            max(cache) == 0.0 and max(diffs) < CLOSED_LOGIT_TOLERANCE,
            f"largest |cache difference| {max(cache):g}; largest |logit difference| {max(diffs):g} over seeds and "
            "question kinds (the closed-fuser program and the receiver-alone program are compiled apart, so their "
            "logits may round differently)", n=len(diffs)))
    opened = [(r["open_gates"], r["gates"]) for r in lat]
    subset = [0 < o < g for o, g in opened]
    out.append(claim(
        "gates_open_on_a_subset", "the learned hard gates open on a subset of the receiver's layers (not none, "
        "not all)", all(subset), f"open gates (of K and V per fused layer) per seed: "
        f"{', '.join(f'{o}/{g}' for o, g in opened)}", n=len(opened),
        interval=[min(o for o, _ in opened), max(o for o, _ in opened)]))
    if any(r["direction"] == "swapped" for r in rows):
        main_gain = np.subtract(_arm(rows, "main", "two_hop", "c2c"), _arm(rows, "main", "two_hop", "receiver"))
        swap_gain = np.subtract(_arm(rows, "swapped", "two_hop", "c2c"), _arm(rows, "swapped", "two_hop", "receiver"))
        out.append(paired_claim(
            "swap_gain_smaller", "with the roles swapped (the deeper model receives) C2C's gain over its receiver "
            "alone on two-hop questions is smaller than in the main direction", main_gain.tolist(),
            swap_gain.tolist(),
            evidence=f"gain over the receiver alone: main {main_gain.mean():+.3f}, swapped {swap_gain.mean():+.3f} "
                     "(swapped, the small sharer never saw the entity's city, so its cache cannot carry the colour; "
                     "a swapped gain can only come from the fuser memorising colours)"))
        out.append(paired_claim(
            "swap_c2c_beats_receiver", "with the roles swapped C2C still exceeds its receiver alone on two-hop",
            _arm(rows, "swapped", "two_hop", "c2c"), _arm(rows, "swapped", "two_hop", "receiver"),
            evidence=f"swapped C2C {np.mean(_arm(rows, 'swapped', 'two_hop', 'c2c')):.3f} vs receiver (the 6-layer "
                     f"model) alone {np.mean(_arm(rows, 'swapped', 'two_hop', 'receiver')):.3f}"))
    return out


def table(rows: list[dict]) -> str:
    lines = ["| direction | kind | receiver | sharer | T2T | C2C | oracle | hint exact | chance |",
             "|---|---|---|---|---|---|---|---|---|"]
    for direction in ("main", "swapped"):
        for kind in ("two_hop", "city"):
            sel = [r for r in rows if r["direction"] == direction and r["kind"] == kind]
            if not sel:
                continue
            def cell(c):
                values = [r[c] for r in sel if r.get(c) is not None]
                if not values:
                    return "-"
                sd = np.std(values, ddof=1) if len(values) > 1 else 0.0
                return f"{np.mean(values):.3f} ± {sd:.3f}"
            lines.append(f"| {direction} | {kind} | " + " | ".join(cell(c) for c in (*CONDITIONS, "hint_exact"))
                         + f" | {sel[0]['chance']:.3f} |")
    return "\n".join(lines)


def write_readme_table(rows: list[dict]) -> None:
    readme = ROOT / "interp" / "c2c" / "README.md"
    text = readme.read_text()
    start, end = "<!-- table:c2c -->", "<!-- /table:c2c -->"
    if start in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        readme.write_text(head + start + "\n" + table(rows) + "\n" + end + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--claims-from-rows", action="store_true")
    args = parser.parse_args()
    if args.claims_from_rows:
        path = RESULTS_DIR / f"{NAME}.json"
        record = json.loads(path.read_text())
        record["claims"] = claims_of(record["rows"])
        path.write_text(json.dumps(record, indent=2) + "\n")
        write_readme_table(record["rows"])
        for c in record["claims"]:
            print(c["id"], c["held"], c.get("interval"))
        return
    config = presets()[args.preset]
    t0 = time.time()
    rows, results = [], []
    for seed in args.seeds:
        result = run_world(with_seed(config, seed), progress_desc=f"[{len(results) + 1}/{len(args.seeds)}] ")
        results.append(result)
        rows += rows_of(result, config)
        print(table(rows), flush=True)
    claims = claims_of(rows)
    scale = {"preset": args.preset, "seeds": args.seeds, "receiver": "4 x 128, 4 heads / 2 KV heads (Qwen3-style)",
             "sharer": "6 x 192, 6 heads (Qwen2-style, rope theta 1e6)",
             "fuser": f"hidden {config.fuser.hidden}, {config.fuser.steps} steps, batch {config.fuser.batch_size}",
             "lm_steps": [config.receiver_train.steps, config.sharer_train.steps],
             "test_entities": config.world.num_test,
             "latency": f"{config.latency_queries} queries per arm, batch 1; generation lengths: hint "
                        f"{config.latency_hint_tokens}, answer {config.latency_answer_tokens} tokens"}
    path = write_results(NAME, rows=rows, claims=claims, wall_seconds=time.time() - t0, scale=scale,
                         training_curves=[{k: r[k] for k in ("seed", "receiver_loss", "sharer_loss")} for r in results])
    write_readme_table(rows)
    print(path)
    for c in claims:
        print(c["id"], c["held"], c.get("interval"), c["evidence"])


if __name__ == "__main__":
    main()
