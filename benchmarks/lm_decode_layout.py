"""Decode with the KV cache in the stacked layout (L, B, S, KVH, Dh) against `core.lm.model.DecodeCache`'s
per-layer, KV-head-major layout, at the benchmark cache (96 slots) and a long one (1,024 slots).

The model is lm_decode's 8 x 512 Qwen2 (seeded random weights, float32); 8 prompts of 32 tokens -> 64 greedy
tokens, `cache_size` 96 or 1,024 (attention reads every slot, so a long cache is what a multi-turn rollout
decodes over). Each measurement is its own process (compile, then the median of `--repeats` generations); the
two layouts alternate, `--processes` pairs per cache size. Both must generate the same tokens.

    .venv/bin/python benchmarks/lm_decode_layout.py     -> benchmarks/results/lm_decode_layout.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import lm_decode  # noqa: E402

SIZE, CACHES, LAYOUTS, GOAL = "8x512", (96, 1024), ("stacked", "per_layer"), 1.1


def worker(layout: str, cache_size: int, repeats: int) -> dict:
    import jax

    from core.lm import weights as weights_lib

    gen = importlib.import_module("core.lm.generate")
    gen.PER_LAYER_DECODE_CACHE = layout == "per_layer"
    config = lm_decode.lm_config(SIZE)
    graphdef, params = weights_lib.params_from_hf_tensors(config, weights_lib.random_hf_tensors(config, seed=0,
                                                                                                 scale=0.05))
    tokens = lm_decode.prompts()
    mask = np.ones_like(tokens, bool)
    sampling = gen.SamplingConfig(max_new_tokens=lm_decode.NEW_TOKENS, min_new_tokens=lm_decode.NEW_TOKENS)

    def run():
        out = gen.generate(graphdef, params, tokens, mask, jax.random.key(0), sampling, cache_size=cache_size)
        return np.asarray(jax.block_until_ready(out.tokens))

    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return {"seconds": float(np.median(times)), "tokens": out.tolist()}


def run_worker(layout: str, cache_size: int, repeats: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", layout, "--cache", str(cache_size), "--repeats", str(repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{layout} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="measurement processes per layout and cache size")
    parser.add_argument("--repeats", type=int, default=3, help="timed generations per process")
    parser.add_argument("--worker", choices=LAYOUTS, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.cache, args.repeats)))
        return
    from core.results import claim, speedup_claim, write_results

    wall, load_before = time.perf_counter(), os.getloadavg()
    rows, claims = [], []
    for cache_size in CACHES:
        runs = {layout: [] for layout in LAYOUTS}
        for i in range(args.processes):
            for layout in LAYOUTS if i % 2 == 0 else LAYOUTS[::-1]:
                runs[layout].append(run_worker(layout, cache_size, args.repeats))
                print(f"cache {cache_size} {layout} process {i}: {runs[layout][-1]['seconds']:.3f} s", flush=True)
        ratios = [s["seconds"] / p["seconds"] for s, p in zip(runs["stacked"], runs["per_layer"])]
        same = all(s["tokens"] == p["tokens"] for s, p in zip(runs["stacked"], runs["per_layer"]))
        for layout in LAYOUTS:
            secs = [r["seconds"] for r in runs[layout]]
            rows.append({"cache_slots": cache_size, "layout": layout, "seconds": float(np.median(secs)),
                         "seconds_min": min(secs), "seconds_max": max(secs), "processes": len(secs),
                         "repeats": args.repeats, "model": SIZE, "new_tokens": lm_decode.NEW_TOKENS})
        claims.append(speedup_claim(
            f"per_layer_faster_{cache_size}_slots", f"decode over a {cache_size}-slot cache is at least {GOAL:g}x "
            "faster with the per-layer KV-head-major cache than with the stacked one", ratios, GOAL,
            label="stacked / per-layer time", excluded="compile time excluded"))
        claims.append(claim(f"same_tokens_{cache_size}_slots", f"both layouts generate the same greedy tokens "
                            f"({cache_size} slots)", same, "token lists compared process by process", kind="check"))
    path = write_results("lm_decode_layout", rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall,
                         scale=f"{SIZE} Qwen2, 8 x 32 -> 64 greedy tokens, float32, the 2-core CPU, each measurement "
                               "in its own process", loadavg_before=load_before, loadavg_after=os.getloadavg())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
