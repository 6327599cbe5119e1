"""Fine-tuning step throughput: core.lm + core.train vs transformers + torch, full and LoRA, same model and batch.

The standard model of issue #28 (Qwen2, 4 layers x width 256, 4 heads / 2 KV heads, SwiGLU 688, vocab 32000,
tied embeddings, float32), seeded random weights saved by `core.lm.weights.save_hf` and loaded by
transformers. One training step = next-token cross-entropy on a batch of 8 x 512 tokens, backward, AdamW
(lr 1e-4, weight decay 0.01). LoRA: rank 8, alpha 16, no dropout, on q/k/v/o/gate/up/down (PEFT's
`get_peft_model` on the torch side, `core.lm.lora` with the base weights in core.train's frozen slot on
ours). Each measurement is its own process (load, warm-up/compile, `--steps` timed steps, peak RSS); ours and
theirs alternate, `--processes` pairs per mode. The first step's loss is compared between the two (same
weights, same batch). Run it alone on an idle machine.

    .venv/bin/python benchmarks/lm_train.py      # needs the [torch] extra (torch, transformers, peft)
    -> benchmarks/results/lm_train.json, table in core/lm/README.md
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

BATCH, SEQ, VOCAB, LR, WEIGHT_DECAY, TORCH_THREADS = 8, 512, 32000, 1e-4, 0.01, 2
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_RANK, LORA_ALPHA = 8, 16.0


def lm_config():
    from core.lm.configs import LMConfig

    return LMConfig(architecture="qwen2", vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_layers=4,
                    num_heads=4, num_kv_heads=2, head_dim=64, attention_bias=True, tie_word_embeddings=True,
                    rope_theta=1e6)


def batch() -> np.ndarray:
    return np.random.default_rng(0).integers(1, VOCAB, size=(BATCH, SEQ + 1)).astype(np.int32)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time_steps(step, steps: int) -> tuple[float, float, list[float]]:
    """(first call seconds (compile / warm-up), median step seconds, the step losses)."""
    t0 = time.perf_counter()
    losses = [step()]
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times)), losses


def worker_ours(folder: str, mode: str, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import optax

    from core import train as train_lib
    from core.lm import lora as lora_lib
    from core.lm import weights as weights_lib
    from core.lm.logprobs import sequence_logprobs

    config, graphdef, params = weights_lib.load_hf(folder)
    rows = batch()
    data = {"inputs": jnp.asarray(rows[:, :-1]), "targets": jnp.asarray(rows[:, 1:]),
            "loss_mask": jnp.ones((BATCH, SEQ), jnp.float32)}
    tx = optax.adamw(LR, weight_decay=WEIGHT_DECAY)

    def nll(p, b, lora=None):
        lp = sequence_logprobs(graphdef, p, b["inputs"], b["targets"], chunk_size=8192, lora=lora)
        return -(lp * b["loss_mask"]).sum() / b["loss_mask"].sum(), {}

    if mode == "full":
        state = train_lib.init_train_state(params, tx, jax.random.key(0))
        step_fn = train_lib.make_train_step(lambda p, b, key: nll(p, b), tx)
    else:
        lcfg = lora_lib.LoraConfig(rank=LORA_RANK, alpha=LORA_ALPHA, targets=LORA_TARGETS)
        adapters = lora_lib.init_lora(config, lcfg, jax.random.key(1))
        state = train_lib.init_train_state(adapters, tx, jax.random.key(0), frozen=params)
        step_fn = train_lib.make_train_step(
            lambda a, b, key, base: nll(base, b, lora_lib.LoraInputs(adapters=a, config=lcfg)), tx)
    holder = {"state": state}

    def step():
        holder["state"], metrics = step_fn(holder["state"], data)
        return float(jax.block_until_ready(metrics["loss"]))

    first, median, losses = _time_steps(step, steps)
    trainable = sum(np.size(x) for x in jax.tree.leaves(state.params))
    return {"seconds": median, "first_call_seconds": first, "peak_rss_mb": _peak_rss_mb(), "losses": losses,
            "trainable_params": int(trainable), "backend": f"jax {jax.__version__} ({jax.default_backend()})"}


def worker_transformers(folder: str, mode: str, steps: int) -> dict:
    import torch
    import transformers

    torch.set_num_threads(TORCH_THREADS)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    if mode == "lora":
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
                                                           target_modules=list(LORA_TARGETS), bias="none",
                                                           task_type="CAUSAL_LM"))
    model.train()
    rows = torch.as_tensor(batch(), dtype=torch.long)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, weight_decay=WEIGHT_DECAY, eps=1e-8)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss.backward()
        opt.step()
        return float(loss.detach())

    first, median, losses = _time_steps(step, steps)
    return {"seconds": median, "first_call_seconds": first, "peak_rss_mb": _peak_rss_mb(), "losses": losses,
            "trainable_params": int(sum(p.numel() for p in trainable)),
            "backend": f"torch {torch.__version__} ({TORCH_THREADS} threads, sdpa), "
                       f"transformers {transformers.__version__}"}


def run_worker(kind: str, folder: str, mode: str, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--folder", folder, "--mode", mode, "--steps", str(steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {mode} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render_readme() -> None:
    from benchmarks import render

    readme = ROOT / "core" / "lm" / "README.md"
    records = render.load_all()  # every results block of the README, not only this one (the others stay filled)
    readme.write_text(render.render_text(readme.read_text(), records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3, help="measurement processes per implementation and mode")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process (after one warm-up step)")
    parser.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--render-only", action="store_true")
    parser.add_argument("--worker", choices=("ours", "transformers"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("full", "lora"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fn = worker_ours if args.worker == "ours" else worker_transformers
        print(json.dumps(fn(args.folder, args.mode, args.steps)))
        return
    if args.render_only:
        render_readme()
        return

    from core.lm import weights as weights_lib
    from core.results import claim, speedup_claim, write_results

    wall = time.perf_counter()
    load_before = os.getloadavg()
    config = lm_config()
    rows, claims, tokens = [], [], BATCH * SEQ
    with tempfile.TemporaryDirectory() as folder:
        graphdef, params = weights_lib.params_from_hf_tensors(
            config, weights_lib.random_hf_tensors(config, seed=0, scale=0.05))
        weights_lib.save_hf(folder, config, params)
        for mode in args.modes:
            results = {"ours": [], "transformers": []}
            for i in range(args.processes):
                for kind in (("ours", "transformers") if i % 2 == 0 else ("transformers", "ours")):
                    results[kind].append(run_worker(kind, folder, mode, args.steps))
                    print(f"{mode} {kind} process {i}: {tokens / results[kind][-1]['seconds']:.0f} tokens/s",
                          flush=True)
            ratios = [t["seconds"] / o["seconds"] for o, t in zip(results["ours"], results["transformers"])]
            loss_gap = max(abs(o["losses"][0] - t["losses"][0])
                           for o, t in zip(results["ours"], results["transformers"]))
            for kind, runs in results.items():
                secs = [r["seconds"] for r in runs]
                rows.append({"mode": mode, "implementation": kind, "tokens_per_s": tokens / float(np.median(secs)),
                             "step_seconds": float(np.median(secs)), "step_seconds_min": min(secs),
                             "step_seconds_max": max(secs),
                             "first_step_seconds": float(np.median([r["first_call_seconds"] for r in runs])),
                             "peak_rss_mb": float(np.median([r["peak_rss_mb"] for r in runs])),
                             "first_loss": runs[0]["losses"][0], "last_loss": runs[0]["losses"][-1],
                             "trainable_params": runs[0]["trainable_params"], "backend": runs[0]["backend"],
                             "processes": len(runs), "steps": args.steps, "batch": BATCH, "seq": SEQ})
            claims.append(speedup_claim(f"at_least_1.5x_{mode}", f"a core.lm {mode} fine-tuning step is at least "
                                        f"1.5x transformers + torch ({TORCH_THREADS} threads) on the same model and "
                                        "batch", ratios, 1.5, label="ours / transformers speed",
                                        excluded="the first (compile / warm-up) step excluded"))
            claims.append(claim(f"same_first_loss_{mode}", f"both compute the same first-step loss ({mode})",
                                loss_gap < 1e-3, f"largest first-step loss difference {loss_gap:.2e}", kind="check"))
    path = write_results("lm_train", rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall,
                         scale="issue #28's standard model (4 x 256, vocab 32000), batch 8 x 512 tokens, float32, "
                               "2-core CPU, each measurement in its own process",
                         loadavg_before=load_before, loadavg_after=os.getloadavg())
    render_readme()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
