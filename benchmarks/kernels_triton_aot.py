"""The project's Pallas kernels compiled ahead of time for an H100 / H200 (sm_90a) on a machine without a GPU.

    pip install -c constraints.txt -e ".[triton]"     # the `triton` package (its wheel bundles ptxas)
    python benchmarks/kernels_triton_aot.py --previous 2fdf51c

jax lowers every Pallas kernel to Triton IR (TTIR) on any host (:func:`core.pallas.triton_modules`); the `triton`
package compiles that IR to PTX and a cubin for sm_90a, which needs no GPU. For each kernel and variant this
records the TTIR operation count, the compile's wall time (one subprocess per compile, under a time limit) and
ptxas's register use and spills, which is what a GPU lease would otherwise find out first. ``--previous REV`` adds
the PhaseFormer routing kernel as it was at REV (the fully unrolled one, whose compile did not finish in 150 s on
an H200), forward only, at the variant tried there.

The `triton` package is not the Triton inside jaxlib's CUDA plugin, so compile times are indicative, not the
GPU's. Nothing here runs a kernel: agreement and speed on a GPU are ``benchmarks/kernels_gpu.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROUTING_CONFIGS = ((8, 8, 1), (8, 8, 4), (4, 4, 1))  # (D, R, heads): the released D 8 and D 4 presets, 4 heads
ROUTING_VARIANTS = ((8, 8), (16, 8), (32, 8), (8, 4), (16, 4), (32, 4))  # (block_n, num_warps); the default first
DEFAULT_VARIANT = ROUTING_VARIANTS[0]  # = kernels.COMPILED_BLOCK_N, COMPILED_NUM_WARPS (checked in main)


def compile_one(path: str, num_warps: int) -> dict:
    """Compile one TTIR file for sm_90a (in this process); ptxas -v for registers and spills."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas

    t0 = time.perf_counter()
    kernel = triton.compile(path, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    out = {"compile_s": time.perf_counter() - t0}
    ptx = pathlib.Path(path).with_suffix(".ptx")
    ptx.write_text(kernel.asm["ptx"])
    log = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", str(ptx), "-o", "/dev/null"],
                         capture_output=True, text=True).stderr
    registers = [int(x) for x in re.findall(r"Used (\d+) registers", log)]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    out["registers"] = max(registers, default=None)
    out["spill_store_bytes"] = sum(int(a) for a, _ in spills) if spills else None
    out["spill_load_bytes"] = sum(int(b) for _, b in spills) if spills else None
    return out


def compile_in_subprocess(text: str, num_warps: int, limit_s: float, workdir: pathlib.Path, name: str) -> dict:
    path = workdir / f"{name}.ttir"
    path.write_text(text)
    cmd = [sys.executable, __file__, "--compile-one", str(path), "--warps", str(num_warps)]
    # a fresh cache directory per compile: Triton would otherwise return a kernel compiled by an earlier run
    env = {**os.environ, "TRITON_CACHE_DIR": tempfile.mkdtemp(dir=workdir), "TRITON_DEFAULT_FP_FUSION": "1"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, env=env)
    except subprocess.TimeoutExpired:
        return {"compile_s": time.perf_counter() - t0, "error": f"compile still running after {limit_s:.0f} s"}
    if proc.returncode:
        return {"error": proc.stderr.strip().splitlines()[-1][:400] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def routing_modules(kernels_module, d: int, r: int, h: int, block_n: int, num_warps: int, backward: bool):
    """TTIR of the routing kernel (forward, and the backward through its custom VJP), with dropout masks."""
    import jax
    import jax.numpy as jnp

    from core import pallas as core_pallas
    from forecasting.phaseformer import model

    n, p = 2 * block_n, 24
    layer = model.RoutingLayer(d, r, h, p, dropout=0.1, use_kernel=False, kernel_block=block_n,
                               kernel_interpret=False, key=jax.random.key(0))
    z = jax.random.normal(jax.random.key(1), (n, p, d))
    masks = kernels_module.attention_dropout_masks(jax.random.key(2), n, h, r, p, 0.1)

    def fwd(z, u, s, rw):
        return kernels_module.routing_attention(z, u, s, rw, masks, num_heads=h, block_n=block_n, interpret=False,
                                                num_warps=num_warps)

    fn = jax.grad(lambda *a: jnp.sum(fwd(*a) ** 2), argnums=(0, 1, 2, 3)) if backward else fwd
    return core_pallas.triton_modules(fn, z, layer.routers[...], layer.send.weights(), layer.receive.weights())


def decode_modules(block_size: int):
    import jax
    import jax.numpy as jnp

    from core import pallas as core_pallas
    from core.lm import kernels

    b, heads, kv_heads, dh, s = 8, 32, 8, 128, 2048
    ks = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(ks[0], (b, heads, dh), jnp.bfloat16)
    k = jax.random.normal(ks[1], (b, s, kv_heads, dh), jnp.bfloat16)
    mask = jnp.ones((b, s), bool)
    return core_pallas.triton_modules(
        lambda q, k, v, m: kernels.decode_attention(q, k, v, m, block_size=block_size, interpret=False), q, k, k, mask)


def load_previous_kernels(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:forecasting/phaseformer/kernels.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    path = pathlib.Path(tempfile.mkdtemp()) / f"kernels_{rev}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"kernels_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_claims(rows):
    """Engineering checks (compiles, spills, compile time at one variant, one compile each), not paper claims."""
    from core.results import check as claim

    def fmt(r):
        if "error" in r:
            return f"{r['pass']} {r['error']}"
        return (f"{r['pass']} {r['ttir_ops']} ops, {r['compile_s']:.1f} s, {r['registers']} registers, "
                f"{r['spill_store_bytes']} B spilled")

    routing = [r for r in rows if r["kernel"] == "phaseformer_routing" and r["impl"] == "router loop"]
    ok = [r for r in routing if "error" not in r and r["compile_s"] < 30]
    worst = max(ok, key=lambda r: r["compile_s"], default=None)
    claims = [claim(
        "routing_kernel_compiles_for_sm90", f"every routing-kernel variant ({len(ROUTING_CONFIGS)} configurations x "
        f"{len(ROUTING_VARIANTS)} blocks, forward and backward) compiles for sm_90a, each in under 30 s on this CPU",
        bool(routing) and len(ok) == len(routing),
        f"{len(ok)}/{len(routing)} compiled within 30 s"
        + (f"; slowest: D {worst['latent_dim']} h {worst['heads']} block {worst['block_n']}/{worst['num_warps']} "
           + fmt(worst) if worst else "")
        + "".join(f"; {r['latent_dim']}/{r['heads']}/{r['block_n']}/{r['num_warps']} " + fmt(r)
                  for r in routing if r not in ok))]
    default = [r for r in routing if (r["latent_dim"], r["routers"], r["heads"]) == ROUTING_CONFIGS[0]
               and (r["block_n"], r["num_warps"]) == DEFAULT_VARIANT]
    claims.append(claim(
        "routing_kernel_default_no_spills", f"at the released configuration (D 8, R 8, one head) and the default "
        f"block ({DEFAULT_VARIANT[0]} series, {DEFAULT_VARIANT[1]} warps), forward and backward fit in registers "
        "(ptxas reports no spills)", len(default) == 2 and all(r.get("spill_store_bytes") == 0 for r in default),
        "; ".join(fmt(r) for r in default)))
    previous = [r for r in rows if r["impl"].startswith("unrolled")]
    if previous:
        old = previous[0]
        same = ("latent_dim", "routers", "heads", "block_n", "num_warps", "pass")
        new = next((r for r in routing if all(r[k] == old[k] for k in same)), None)
        held = new is not None and "error" not in new and (
            "error" in old or old["compile_s"] > 10 * new["compile_s"])
        claims.append(claim(
            "router_loop_compiles_10x_faster", f"the router-loop kernel's forward compiles over 10x faster than the "
            f"{old['impl']} one at the variant that stalled on the H200 (D 8, R 8, 4 heads, block 32, 4 warps)",
            held, f"{old['impl']}: {fmt(old)}; router loop: {fmt(new) if new else 'not measured'}"))
    decode = [r for r in rows if r["kernel"] == "lm_decode_attention"]
    claims.append(claim(
        "decode_kernel_compiles_for_sm90", "the LM decode-attention kernel compiles for sm_90a at blocks 128 and 256",
        bool(decode) and all("error" not in r for r in decode), "; ".join(
            f"block {r['block_n']}: " + fmt(r) for r in decode)))
    return claims


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit of one compile")
    parser.add_argument("--previous", default=None, help="a git revision whose routing kernel to compile too")
    parser.add_argument("--previous-limit-s", type=float, default=600.0)
    parser.add_argument("--compile-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warps", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--claims-from-rows", action="store_true",
                        help="recompute the claims of the committed JSON from its stored rows (no compiles)")
    args = parser.parse_args(argv)
    if args.claims_from_rows:
        from core.results import git_commit

        path = pathlib.Path(args.out) / "kernels_triton_aot.json"
        record = json.loads(path.read_text())
        record["claims"] = make_claims(record["rows"])
        record["claims_recomputed"] = f"{git_commit()[:12]} (from the stored rows)"
        path.write_text(json.dumps(record, indent=2) + "\n")
        return
    if args.compile_one:
        print(json.dumps(compile_one(args.compile_one, args.warps)))
        return
    try:
        import triton  # noqa: F401
    except ImportError:
        raise SystemExit("kernels_triton_aot.py needs the `triton` package: pip install -c constraints.txt -e "
                         "'.[triton]'") from None
    import jax

    from core.pallas import op_count
    from core.results import write_results
    from forecasting.phaseformer import kernels

    jax.config.update("jax_platforms", "cpu")
    assert DEFAULT_VARIANT == (kernels.COMPILED_BLOCK_N, kernels.COMPILED_NUM_WARPS), "update DEFAULT_VARIANT"
    start = time.perf_counter()
    workdir = pathlib.Path(tempfile.mkdtemp())
    rows = []

    def add(base, module_text, num_warps, limit_s, name):
        row = {**base, "ttir_ops": op_count(module_text)}
        row.update(compile_in_subprocess(module_text, num_warps, limit_s, workdir, name))
        rows.append(row)
        print(row, flush=True)

    for d, r, h in ROUTING_CONFIGS:
        for block_n, warps in ROUTING_VARIANTS:
            fwd, bwd = routing_modules(kernels, d, r, h, block_n, warps, backward=True)
            base = {"kernel": "phaseformer_routing", "impl": "router loop", "latent_dim": d, "routers": r,
                    "heads": h, "block_n": block_n, "num_warps": warps}
            for kind, text in (("fwd", fwd), ("bwd", bwd)):
                add({**base, "pass": kind}, text, warps, args.limit_s, f"routing_{d}_{r}_{h}_{block_n}_{warps}_{kind}")
    for block in (128, 256):
        (text,) = decode_modules(block)
        add({"kernel": "lm_decode_attention", "impl": "split-K", "block_n": block, "num_warps": 4, "pass": "fwd"},
            text, 4, args.limit_s, f"decode_{block}")
    if args.previous:
        old = load_previous_kernels(args.previous)
        (fwd,) = routing_modules(old, 8, 8, 4, 32, 4, backward=False)
        add({"kernel": "phaseformer_routing", "impl": f"unrolled ({args.previous})", "latent_dim": 8, "routers": 8,
             "heads": 4, "block_n": 32, "num_warps": 4, "pass": "fwd"}, fwd, 4, args.previous_limit_s,
            "routing_previous_fwd")
    import triton

    command = "python benchmarks/kernels_triton_aot.py" + (f" --previous {args.previous}" if args.previous else "")
    path = write_results("kernels_triton_aot", rows=rows, claims=make_claims(rows),
                         wall_seconds=time.perf_counter() - start, directory=args.out, command=command,
                         target="sm_90a", triton_version=triton.__version__, jax_version=jax.__version__)
    print(f"wrote {path}")
    for c in make_claims(rows):
        print(("HELD  " if c["held"] else "FAILED") + f" {c['id']}: {c['evidence']}")


if __name__ == "__main__":
    main()
