"""The project's Pallas kernels compiled for real on a GPU: agreement with their pure-JAX references and speed.

    python benchmarks/kernels_gpu.py --out benchmarks/results   # on a CUDA machine (benchmarks/device_h200.sh)

- PhaseFormer's fused routing kernel (forward, and forward + backward through its custom VJP) against
  ``routing_attention_reference`` at a Traffic-sized batch (16 windows x 862 channels = 13,792 series, P = 24),
  for the small-D configurations (the released D 8, R 8 and D 4, R 4 with one head; D 8 with 4 heads), with the
  training path's dropout masks (every block of `kernels_triton_aot.py` for the released configuration, the
  default block for the others); then one jitted PhaseFormer training step with the kernel
  against the same step with the reference.
- The LM split-K decode-attention kernel against ``decode_attention_reference`` at a long cache.

Errors are ``||out - ref|| / ||ref||`` against a float32 reference at the highest matmul precision; times are
medians of ``--reps`` calls after warm-up, each synchronised. Writes ``kernels_gpu.json`` in the shared results
format after each section, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.kernels_triton_aot import DEFAULT_VARIANT, ROUTING_CONFIGS, ROUTING_VARIANTS  # noqa: E402
from core.results import check, speedup_claim, write_results  # noqa: E402


def timed(fn, *args, reps: int) -> float:
    """Median seconds of one synchronised call (after two warm-up calls, which also compile)."""
    for _ in range(2):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rel_err(actual, expected) -> float:
    """||a - e|| / ||e|| over all leaves together: a per-leaf ratio is undefined where a gradient is exactly zero
    (the stage-1 key bias: softmax ignores a shift shared by every phase)."""
    a = np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(actual)])
    e = np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(expected)])
    if not np.all(np.isfinite(a)):
        return float("inf")
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-30))


def routing_rows(reps: int, budget_s: float):
    from forecasting.phaseformer import kernels, model

    rows, start = [], time.perf_counter()
    n, p = 16 * 862, 24
    for d, r, h in ROUTING_CONFIGS:
        layer = model.RoutingLayer(d, r, h, p, dropout=0.1, use_kernel=False, kernel_block=0,
                                   kernel_interpret=False, key=jax.random.key(d))
        z = jax.random.normal(jax.random.key(1), (n, p, d))
        masks = kernels.attention_dropout_masks(jax.random.key(2), n, h, r, p, 0.1)
        args = (z, layer.routers[...], layer.send.weights(), layer.receive.weights(), masks)
        cot = jax.random.normal(jax.random.key(3), (n, p, d))

        def fwd_ref(*a):
            return kernels.routing_attention_reference(*a, num_heads=h)

        def grad_of(f):
            return jax.jit(jax.grad(lambda *a: jnp.vdot(f(*a), cot), argnums=(0, 1, 2, 3)))

        with jax.default_matmul_precision("highest"):
            exact_out = jax.jit(fwd_ref)(*args)
            exact_grad = grad_of(fwd_ref)(*args)
        ref_fwd = jax.jit(fwd_ref)
        ref_grad = grad_of(fwd_ref)
        base = {"kernel": "phaseformer_routing", "series": n, "phases": p, "latent_dim": d, "routers": r,
                "heads": h, "dropout_masks": True}
        t_ref_f, t_ref_g = timed(ref_fwd, *args, reps=reps), timed(ref_grad, *args, reps=reps)
        rows.append({**base, "impl": "reference (XLA)", "block_n": None, "num_warps": None,
                     "fwd_ms": 1e3 * t_ref_f, "fwd_bwd_ms": 1e3 * t_ref_g,
                     "fwd_rel_err": rel_err(ref_fwd(*args), exact_out),
                     "grad_rel_err": rel_err(ref_grad(*args), exact_grad)})
        print(rows[-1], flush=True)
        # every block for the released configuration, the default block for the others
        for block_n, warps in ROUTING_VARIANTS if (d, r, h) == ROUTING_CONFIGS[0] else (DEFAULT_VARIANT,):
            if time.perf_counter() - start > budget_s:
                print(f"routing: time budget {budget_s}s spent, skipping block_n={block_n} warps={warps}")
                continue
            row = {**base, "impl": "pallas (triton)", "block_n": block_n, "num_warps": warps}
            try:
                def fwd_k(*a, _b=block_n, _w=warps):
                    return kernels.routing_attention(*a, num_heads=h, block_n=_b, interpret=False, num_warps=_w)
                k_fwd, k_grad = jax.jit(fwd_k), grad_of(fwd_k)
                t0 = time.perf_counter()
                out = jax.block_until_ready(k_fwd(*args))
                grads = jax.block_until_ready(k_grad(*args))
                row["compile_s"] = time.perf_counter() - t0
                row["fwd_rel_err"], row["grad_rel_err"] = rel_err(out, exact_out), rel_err(grads, exact_grad)
                row["fwd_ms"] = 1e3 * timed(k_fwd, *args, reps=reps)
                row["fwd_bwd_ms"] = 1e3 * timed(k_grad, *args, reps=reps)
                row["fwd_speedup"] = t_ref_f / (row["fwd_ms"] / 1e3)
                row["fwd_bwd_speedup"] = t_ref_g / (row["fwd_bwd_ms"] / 1e3)
            except Exception as exc:  # noqa: BLE001 - a failed compile is a result to record
                row["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
            rows.append(row)
            print(row, flush=True)
    return rows


def train_step_rows(reps: int):
    """One jitted PhaseFormer training step (released ETTm1-96 config: D 8, 2 layers, R 8) with the reference and
    with the compiled kernel, at the ETT batch (16 x 7 channels) and a Traffic-sized one (16 x 862)."""
    from flax import nnx

    from forecasting.phaseformer import configs
    from forecasting.phaseformer import train as train_lib

    rows = []
    for channels in (7, 862):
        for use_kernel in (False, True):
            config = configs.phaseformer("ETTm1", 96, use_kernel=use_kernel, kernel_interpret=False)
            graphdef, params = nnx.split(train_lib.build_model(config, jax.random.key(0)), nnx.Param)
            tx = train_lib.make_optimizer(config)
            step = jax.jit(train_lib.make_train_step(config, graphdef, tx))
            b = config.batch_size
            x = jax.random.normal(jax.random.key(1), (b, config.seq_len, channels))
            y = jax.random.normal(jax.random.key(2), (b, config.pred_len, channels))
            args = (params, tx.init(params), x, y, jnp.ones(b), jax.random.key(3))
            row = {"kernel": "phaseformer_train_step", "config": "ETTm1-96 released (D 8, 2 layers, R 8)",
                   "batch": b, "channels": channels, "series": b * channels,
                   "impl": "pallas (triton)" if use_kernel else "reference (XLA)"}
            try:
                row["step_ms"] = 1e3 * timed(step, *args, reps=reps)
                row["loss"] = float(step(*args)[2])
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
            rows.append(row)
            print(row, flush=True)
    return rows


def decode_rows(reps: int):
    from core.lm import kernels

    rows = []
    b, heads, kv_heads, dh = 8, 32, 8, 128
    for s in (2048, 8192):
        ks = jax.random.split(jax.random.key(s), 4)
        q = jax.random.normal(ks[0], (b, heads, dh), jnp.bfloat16)
        k = jax.random.normal(ks[1], (b, s, kv_heads, dh), jnp.bfloat16)
        v = jax.random.normal(ks[2], (b, s, kv_heads, dh), jnp.bfloat16)
        mask = jnp.arange(s)[None, :] < jnp.array([s, s - 17, s // 2, 1, s, s, 3 * s // 4, s - 1])[:, None]
        with jax.default_matmul_precision("highest"):
            exact = jax.jit(kernels.decode_attention_reference)(q.astype(jnp.float32), k.astype(jnp.float32),
                                                                v.astype(jnp.float32), mask)
        ref = jax.jit(kernels.decode_attention_reference)
        base = {"kernel": "lm_decode_attention", "batch": b, "heads": heads, "kv_heads": kv_heads, "head_dim": dh,
                "cache_len": s, "dtype": "bfloat16"}
        t_ref = timed(ref, q, k, v, mask, reps=reps)
        rows.append({**base, "impl": "reference (XLA)", "block_size": None, "ms": 1e3 * t_ref,
                     "rel_err": rel_err(ref(q, k, v, mask).astype(jnp.float32), exact)})
        print(rows[-1], flush=True)
        for block in (128, 256):
            row = {**base, "impl": "pallas (triton)", "block_size": block}
            try:
                fn = jax.jit(lambda q, k, v, m, _b=block: kernels.decode_attention(q, k, v, m, block_size=_b,
                                                                                  interpret=False))
                row["rel_err"] = rel_err(fn(q, k, v, mask).astype(jnp.float32), exact)
                row["ms"] = 1e3 * timed(fn, q, k, v, mask, reps=reps)
                row["speedup"] = t_ref / (row["ms"] / 1e3)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
            rows.append(row)
            print(row, flush=True)
    return rows


def make_claims(rows, note: str = ""):
    claims = []
    routing = [r for r in rows if r["kernel"] == "phaseformer_routing" and r["impl"].startswith("pallas")]
    ok = [r for r in routing if "error" not in r]
    default_ok = any((r["block_n"], r["num_warps"]) == DEFAULT_VARIANT for r in ok)
    exact = default_ok and all(r["fwd_rel_err"] < 1e-5 and r["grad_rel_err"] < 1e-4 for r in ok)
    claims.append(check(
        "routing_kernel_compiles_and_matches", "the fused routing kernel compiles through Triton at its default "
        f"block ({DEFAULT_VARIANT[0]} series, {DEFAULT_VARIANT[1]} warps) and every compiled variant matches the "
        "float32 reference (forward rel. err < 1e-5, gradients < 1e-4)", exact,
        f"{len(ok)}/{len(routing)} variants compiled; max fwd err "
        f"{max((r['fwd_rel_err'] for r in ok), default=float('nan')):.2e}, max grad err "
        f"{max((r['grad_rel_err'] for r in ok), default=float('nan')):.2e}"
        + "".join(f"; error {r['block_n']}/{r['num_warps']}: {r['error'][:200]}" for r in routing if "error" in r)
        + (f"; {note}" if note else "")))
    for d, r, h in ROUTING_CONFIGS:
        sel = [x for x in ok if (x["latent_dim"], x["routers"], x["heads"]) == (d, r, h)]
        if sel:
            best = max(sel, key=lambda x: x["fwd_bwd_speedup"])
            claims.append(speedup_claim(
                f"routing_kernel_faster_d{d}_r{r}_h{h}", f"at a Traffic-sized batch (13,792 series), D = {d}, R = {r}, "
                f"{h} head(s), the kernel's forward + backward beats XLA's", [best["fwd_bwd_speedup"]], 1.0,
                label="XLA / kernel fwd+bwd time (medians of the timed repeats)",
                excluded=f"best block_n={best['block_n']} warps={best['num_warps']}: fwd {best['fwd_ms']:.2f} ms "
                f"({best['fwd_speedup']:.2f}x), fwd+bwd {best['fwd_bwd_ms']:.2f} ms ({best['fwd_bwd_speedup']:.2f}x)"))
    decode = [r for r in rows if r["kernel"] == "lm_decode_attention" and r["impl"].startswith("pallas")]
    dec_ok = [r for r in decode if "error" not in r]
    claims.append(check(
        "decode_kernel_compiles_and_matches", "the LM decode-attention kernel compiles through Triton and matches "
        "the float32 reference within bf16 rounding (rel. err < 1e-2)",
        bool(dec_ok) and all(r["rel_err"] < 1e-2 for r in dec_ok),
        f"{len(dec_ok)}/{len(decode)} compiled; "
        + "; ".join(f"S={r['cache_len']} block {r['block_size']}: err {r['rel_err']:.1e}, {r['ms']:.3f} ms "
                    f"({r['speedup']:.2f}x the reference)" for r in dec_ok)
        + "".join(f"; error: {r['error'][:200]}" for r in decode if "error" in r)
        + (f"; {note}" if note else "")))
    return claims


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--routing-budget-s", type=float, default=150.0)
    parser.add_argument("--git-commit", default=None, help="the commit that ran (the device copy has no .git)")
    parser.add_argument("--from-log", default=None,
                        help="rebuild the JSON from a device run's log (its printed rows), e.g. when the run was "
                             "stopped before it wrote the file")
    parser.add_argument("--note", default="", help="with --from-log: what stopped the run, kept in the claims")
    parser.add_argument("--wall-seconds", type=float, default=0.0, help="with --from-log: the run's wall time")
    parser.add_argument("--claims-from-rows", action="store_true",
                        help="recompute the claims of the committed JSON from its stored rows")
    args = parser.parse_args(argv)
    if args.claims_from_rows:
        import json

        from core.results import git_commit

        path = pathlib.Path(args.out) / "kernels_gpu.json"
        record = json.loads(path.read_text())
        record["claims"] = make_claims(record["rows"], record.get("note", ""))
        record["claims_recomputed"] = f"{git_commit()[:12]} (from the stored rows)"
        path.write_text(json.dumps(record, indent=2) + "\n")
        return
    if args.from_log:
        import ast

        text = pathlib.Path(args.from_log).read_text()
        rows = [ast.literal_eval(line) for line in text.splitlines() if line.startswith("{'kernel'")]
        path = write_results("kernels_gpu", rows=rows, claims=make_claims(rows, args.note),
                             wall_seconds=args.wall_seconds, directory=args.out,
                             command="bash benchmarks/device_h200.sh (python benchmarks/kernels_gpu.py)",
                             log=str(pathlib.Path(args.from_log).name), note=args.note,
                             **({"git_commit": args.git_commit} if args.git_commit else {}))
        print(f"wrote {path}")
        return
    if jax.default_backend() == "cpu":
        raise SystemExit("kernels_gpu.py compiles Pallas kernels for a GPU; this machine has none "
                         "(the CPU tests check their Triton lowering instead)")
    start = time.perf_counter()
    rows = []
    extra = {"git_commit": args.git_commit} if args.git_commit else {}
    for section in (lambda: routing_rows(args.reps, args.routing_budget_s), lambda: decode_rows(args.reps),
                    lambda: train_step_rows(args.reps)):
        try:
            rows += section()
        except Exception as exc:  # noqa: BLE001 - keep the other sections' results
            rows.append({"kernel": "section", "impl": "-", "error": f"{type(exc).__name__}: {str(exc)[:800]}"})
            print(rows[-1], flush=True)
        path = write_results("kernels_gpu", rows=rows, claims=make_claims(rows),
                             wall_seconds=time.perf_counter() - start, directory=args.out,
                             command="python benchmarks/kernels_gpu.py", device=jax.devices()[0].device_kind,
                             jax_version=jax.__version__, **extra)
    print(f"wrote {path}")
    for c in make_claims(rows):
        print(f"  {c['id']}: {'held' if c['held'] else 'NOT held'} - {c['evidence'][:400]}")


if __name__ == "__main__":
    main()
