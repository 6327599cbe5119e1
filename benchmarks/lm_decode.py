"""Decode throughput: core.lm generation vs HuggingFace transformers (torch, CPU), same weights and settings.

The standard workload (issue #28): a Qwen2 model, 4 layers x width 256 (4 heads of 64, 2 KV heads, SwiGLU
688, vocab 32000, tied embeddings, float32), and the same at 8 layers x 512 (8 heads, 2 KV heads, SwiGLU
1376). Seeded random weights are saved by `core.lm.weights.save_hf` and loaded by
`transformers.AutoModelForCausalLM` (sdpa attention, 2 torch threads). Both generate 64 new tokens greedily
(`min_new_tokens` 64) for 8 unpadded prompts of 32 tokens. Every measurement is its own process (load,
warm-up/compile, `--repeats` timed runs, peak RSS); ours and theirs alternate, `--processes` pairs per size,
so both see the same machine. Run it alone on an idle machine (`uptime` is recorded before and after).

    .venv/bin/python benchmarks/lm_decode.py      # needs the [torch] extra
    -> benchmarks/results/lm_decode.json, table in core/lm/README.md
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZES = {
    "4x256": dict(num_layers=4, hidden_size=256, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=688),
    "8x512": dict(num_layers=8, hidden_size=512, num_heads=8, num_kv_heads=2, head_dim=64, intermediate_size=1376),
}
BATCH, PROMPT_LEN, NEW_TOKENS, VOCAB, TORCH_THREADS = 8, 32, 64, 32000, 2


def lm_config(size: str):
    from core.lm.configs import LMConfig

    return LMConfig(architecture="qwen2", vocab_size=VOCAB, attention_bias=True, tie_word_embeddings=True,
                    rope_theta=1e6, **SIZES[size])


def prompts() -> np.ndarray:
    return np.random.default_rng(0).integers(1, VOCAB, size=(BATCH, PROMPT_LEN)).astype(np.int32)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_ours(folder: str, repeats: int) -> dict:
    import jax

    from core.lm import weights as weights_lib
    from core.lm.generate import SamplingConfig, generate

    config, graphdef, params = weights_lib.load_hf(folder)
    tokens = prompts()
    mask = np.ones_like(tokens, bool)
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)

    def run():
        out = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling)
        return np.asarray(jax.block_until_ready(out.tokens))

    t0 = time.perf_counter()
    run()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return {"seconds": float(np.median(times)), "compile_seconds": compile_s, "peak_rss_mb": _peak_rss_mb(),
            "tokens": out.tolist(), "backend": f"jax {jax.__version__} ({jax.default_backend()})"}


def worker_transformers(folder: str, repeats: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(TORCH_THREADS)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    ids = torch.as_tensor(prompts(), dtype=torch.long)
    am = torch.ones_like(ids)
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
              eos_token_id=None)

    def run():
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=am, **kw)
        return out[:, PROMPT_LEN:].numpy()

    t0 = time.perf_counter()
    run()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return {"seconds": float(np.median(times)), "compile_seconds": 0.0, "first_call_seconds": warm_s,
            "peak_rss_mb": _peak_rss_mb(), "tokens": out.tolist(),
            "backend": f"torch {torch.__version__} ({TORCH_THREADS} threads, sdpa), "
                       f"transformers {transformers.__version__}"}


def run_worker(kind: str, folder: str, repeats: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--folder", folder, "--repeats", str(repeats)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render_readme() -> None:
    """Rewrite the lm_decode table in core/lm/README.md from the JSON (benchmarks/render.py's format)."""
    from benchmarks import render

    readme = ROOT / "core" / "lm" / "README.md"
    records = render.load_all()  # every results block of the README, not only this one (the others stay filled)
    readme.write_text(render.render_text(readme.read_text(), records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="measurement processes per implementation and size")
    parser.add_argument("--repeats", type=int, default=3, help="timed generations per process")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--render-only", action="store_true", help="only re-render the README table")
    parser.add_argument("--worker", choices=("ours", "transformers"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fn = worker_ours if args.worker == "ours" else worker_transformers
        print(json.dumps(fn(args.folder, args.repeats)))
        return
    if args.render_only:
        render_readme()
        return

    import jax

    from core.lm import weights as weights_lib
    from core.results import claim, speedup_claim, write_results

    wall = time.perf_counter()
    uptime_before = os.getloadavg()
    rows, claims, n = [], [], BATCH * NEW_TOKENS
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            config = lm_config(size)
            folder = str(pathlib.Path(tmp) / size)
            graphdef, params = weights_lib.params_from_hf_tensors(
                config, weights_lib.random_hf_tensors(config, seed=0, scale=0.05))
            weights_lib.save_hf(folder, config, params)
            results = {"ours": [], "transformers": []}
            for i in range(args.processes):
                order = ("ours", "transformers") if i % 2 == 0 else ("transformers", "ours")
                for kind in order:
                    results[kind].append(run_worker(kind, folder, args.repeats))
                    print(f"{size} {kind} process {i}: {n / results[kind][-1]['seconds']:.0f} tokens/s", flush=True)
            pair_ratios = [t["seconds"] / o["seconds"] for o, t in zip(results["ours"], results["transformers"])]
            same = float(np.mean([np.mean(np.asarray(o["tokens"]) == np.asarray(t["tokens"]))
                                  for o, t in zip(results["ours"], results["transformers"])]))
            for kind, runs in results.items():
                secs = [r["seconds"] for r in runs]
                rows.append({"size": size, "implementation": kind, "tokens_per_s": n / float(np.median(secs)),
                             "seconds": float(np.median(secs)), "seconds_min": min(secs), "seconds_max": max(secs),
                             "compile_seconds": float(np.median([r["compile_seconds"] for r in runs])),
                             "peak_rss_mb": float(np.median([r["peak_rss_mb"] for r in runs])),
                             "backend": runs[0]["backend"], "processes": len(runs), "repeats": args.repeats,
                             "batch": BATCH, "prompt_tokens": PROMPT_LEN, "new_tokens": NEW_TOKENS,
                             "vocab": VOCAB, "params_m": round(sum(np.size(x) for x in jax.tree.leaves(params)) / 1e6,
                                                               2)})
            claims.append(speedup_claim(f"at_least_2x_{size}", f"core.lm greedy decoding is at least 2x "
                                        f"transformers (torch CPU, {TORCH_THREADS} threads, sdpa) at {size}",
                                        pair_ratios, 2.0, label="ours / transformers speed",
                                        excluded="compile time excluded"))
            claims.append(claim(f"same_greedy_tokens_{size}", f"both implementations generate the same greedy "
                                f"tokens at {size}", same >= 0.99, f"{same:.2%} of {n} generated tokens identical",
                                kind="check"))
    load = {"loadavg_before": uptime_before, "loadavg_after": os.getloadavg()}
    path = write_results("lm_decode", rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall,
                         scale="issue #28's standard workload (8 prompts x 32 tokens -> 64 new, greedy, float32) "
                               "on the 2-core CPU, each measurement in its own process",
                         kernel="not measured: no GPU in this run (the Pallas decode kernel is tested in "
                                "interpret mode on CPU)", **load)
    render_readme()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
