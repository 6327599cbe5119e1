"""Decode throughput: core.lm generation vs HuggingFace transformers (torch, CPU), same weights and settings.

A 4-layer, width-256 Qwen2-style model (4 heads of 64, 2 KV heads, SwiGLU 768, vocab 4096) with seeded
random weights is saved as a HF folder by `core.lm.weights.save_hf` and loaded by
`transformers.AutoModelForCausalLM`. Both generate 64 new tokens greedily for the same batch of 8 left-padded
prompts of different lengths (no stop token). We time `repeats` runs after one warm-up (our compile time is
reported apart) and check the two produce the same tokens.

    nice -n 10 .venv/bin/python benchmarks/lm_decode.py     # needs the [torch] extra
    -> benchmarks/results/lm_decode.json, table in core/lm/README.md
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.lm import weights as weights_lib  # noqa: E402
from core.lm.configs import LMConfig  # noqa: E402
from core.lm.generate import SamplingConfig, generate, pad_prompts  # noqa: E402
from core.results import claim, write_results  # noqa: E402

CONFIG = LMConfig(architecture="qwen2", vocab_size=4096, hidden_size=256, intermediate_size=768, num_layers=4,
                  num_heads=4, num_kv_heads=2, head_dim=64, attention_bias=True, tie_word_embeddings=True,
                  rope_theta=1e6)
BATCH, NEW_TOKENS = 8, 64


def make_prompts(seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = np.linspace(6, 40, BATCH).astype(int)
    return [rng.integers(1, CONFIG.vocab_size, size=n).tolist() for n in lengths]


def ours_runner(graphdef, params, tokens, mask):
    """(run() -> tokens, compile seconds): our jitted generation, compiled here."""
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS)

    def run():
        out = generate(graphdef, params, tokens, mask, jax.random.key(0), sampling)
        return np.asarray(jax.block_until_ready(out.tokens))

    t0 = time.perf_counter()
    run()
    return run, time.perf_counter() - t0


def transformers_runner(folder, tokens, mask):
    """(run() -> tokens, backend name, probe timings). torch runs at its faster thread count (1 or 2: on a
    shared CPU, OpenMP spinning can make 2 threads far slower), chosen by a short probe."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    ids, am = torch.as_tensor(tokens, dtype=torch.long), torch.as_tensor(mask, dtype=torch.long)
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
              eos_token_id=None)

    def run(**over):
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=am, **{**kw, **over})
        return out[:, tokens.shape[1]:].numpy()

    probe = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        run(max_new_tokens=8, min_new_tokens=8)
        probe[threads] = time.perf_counter() - t0
    threads = min(probe, key=probe.get)
    torch.set_num_threads(threads)
    run()  # warm-up
    name = f"torch {torch.__version__} ({threads} thread(s)), transformers {transformers.__version__}"
    return run, name, {f"probe_8_tokens_{k}_threads_s": v for k, v in probe.items()}


def timed(run):
    t0 = time.perf_counter()
    out = run()
    return time.perf_counter() - t0, out


def kernel_timings(repeats: int = 20) -> dict | str:
    """On a GPU: the Pallas decode kernel vs the jitted pure-JAX reference at Qwen2.5-0.5B decode shapes
    (14 query heads, 2 KV heads, head_dim 64, batch 8) for several cache lengths. Not run on CPU."""
    if jax.default_backend() == "cpu":
        return "not measured: no GPU/TPU in this run (the kernel is tested in interpret mode on CPU)"
    from core.lm.kernels import decode_attention, decode_attention_reference

    ref = jax.jit(decode_attention_reference)
    out = {}
    for S in (1024, 4096, 16384):
        ks = jax.random.split(jax.random.key(S), 3)
        q = jax.random.normal(ks[0], (8, 14, 64), jax.numpy.bfloat16)
        k = jax.random.normal(ks[1], (8, S, 2, 64), jax.numpy.bfloat16)
        v = jax.random.normal(ks[2], (8, S, 2, 64), jax.numpy.bfloat16)
        mask = jax.numpy.ones((8, S), bool)
        row = {}
        for name, fn in (("pallas", lambda: decode_attention(q, k, v, mask, interpret=False)),
                         ("reference", lambda: ref(q, k, v, mask))):
            jax.block_until_ready(fn())
            t0 = time.perf_counter()
            for _ in range(repeats):
                res = fn()
            jax.block_until_ready(res)
            row[f"{name}_us"] = (time.perf_counter() - t0) / repeats * 1e6
        row["max_abs_diff"] = float(np.abs(np.asarray(decode_attention(q, k, v, mask, interpret=False), np.float32)
                                           - np.asarray(ref(q, k, v, mask), np.float32)).max())
        out[f"cache_{S}"] = row
    return out


def render_readme() -> None:
    """Rewrite the lm_decode table in core/lm/README.md from the JSON (benchmarks/render.py's format)."""
    from benchmarks import render

    readme = ROOT / "core" / "lm" / "README.md"
    records = {k: v for k, v in render.load_all().items() if k == "lm_decode"}
    readme.write_text(render.render_text(readme.read_text(), records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--render-only", action="store_true", help="only re-render the README table")
    args = parser.parse_args()
    if args.render_only:
        render_readme()
        return
    wall = time.perf_counter()
    tensors = weights_lib.random_hf_tensors(CONFIG, seed=0, scale=0.05)
    graphdef, params = weights_lib.params_from_hf_tensors(CONFIG, tensors)
    tokens, mask = pad_prompts(make_prompts(), bucket=8)
    run_ours, compile_s = ours_runner(graphdef, params, tokens, mask)
    with tempfile.TemporaryDirectory() as tmp:
        weights_lib.save_hf(tmp, CONFIG, params)
        run_hf, versions, probe = transformers_runner(tmp, tokens, mask.astype(np.int64))
    # interleave the runs so both see the same (shared, fluctuating) machine load
    ours_times, hf_times = [], []
    for _ in range(args.repeats):
        t, ours_tokens = timed(run_ours)
        ours_times.append(t)
        t, hf_tokens = timed(run_hf)
        hf_times.append(t)
    ours_s, hf_s = float(np.median(ours_times)), float(np.median(hf_times))
    n = BATCH * NEW_TOKENS
    same = float((ours_tokens == hf_tokens).mean())
    setting = dict(batch=BATCH, new_tokens=NEW_TOKENS, prompt_bucket=int(tokens.shape[1]), layers=CONFIG.num_layers,
                   width=CONFIG.hidden_size, vocab=CONFIG.vocab_size, decoding="greedy", dtype="float32",
                   device="CPU (2 cores, shared)")
    rows = [
        {"implementation": "ours", "tokens_per_s": n / ours_s, "seconds": ours_s, "compile_seconds": compile_s,
         "backend": f"jax {jax.__version__} ({jax.default_backend()})", "all_seconds": ours_times, **setting},
        {"implementation": "transformers", "tokens_per_s": n / hf_s, "seconds": hf_s, "compile_seconds": 0.0,
         "backend": versions, "all_seconds": hf_times, **setting, **probe},
    ]
    ratio = hf_s / ours_s
    claims = [
        claim("ours_faster", "core.lm generation is faster than HF transformers (torch CPU) on the same weights "
              "and settings", ours_s < hf_s,
              f"{n / ours_s:.0f} vs {n / hf_s:.0f} tokens/s ({ratio:.2f}x; median of {args.repeats} interleaved runs, compile "
              f"{compile_s:.1f} s excluded)"),
        claim("same_greedy_tokens", "both implementations generate the same greedy tokens", same >= 0.99,
              f"{same:.2%} of {n} generated tokens identical"),
    ]
    path = write_results("lm_decode", rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall,
                         speedup=ratio, same_token_fraction=same, repeats=args.repeats, kernel=kernel_timings(),
                         scale="issue scale (4 layers, width 256, batch 8, 64 new tokens) on a shared 2-core CPU")
    render_readme()
    print(f"ours {n / ours_s:.0f} tok/s, transformers {n / hf_s:.0f} tok/s, ratio {ratio:.2f}x, "
          f"same tokens {same:.2%}; wrote {path}")


if __name__ == "__main__":
    main()
