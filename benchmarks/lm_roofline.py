"""How fast can XLA:CPU run issue #28's workloads at all? A floor from the matrix products alone.

`lm_decode.py` and `lm_train.py` ask core.lm to be 2x (decode) and 1.5x (a fine-tuning step) as fast as
transformers on torch CPU. Both workloads are dominated by matrix products whose sizes no implementation
can change, so the fastest any XLA:CPU program can be is bounded by how fast XLA multiplies those matrices on
this machine. This script measures that bound and compares it with the transformers times recorded in
`benchmarks/results/lm_decode.json` and `lm_train.json`:

- decode (per size): every weight matrix of one decode step (q, k, v, o, gate, up, down of every layer, and
  the tied LM head) multiplied by 8 rows, each matrix in the layout XLA streams fastest ((in, out), the head
  pre-transposed), all in one jitted program (independent products, so at least as fast as the real chain);
  and the same products with 256 rows for the prefill of 8 x 32 prompt tokens. Floor = prefill + 64 steps.
  Also the bandwidth floor: one read of every weight per step (a jitted sum), what a perfect kernel needs.
- train (full and LoRA): the forward, input-gradient and weight-gradient products of every linear map and of
  the tied head for 8 x 512 tokens (LoRA: no weight gradient of the frozen base and head; its rank-8
  products are left out). Attention products, norms, softmax, the optimizer and everything else are left
  out, so the floor is below what any implementation needs.

The largest speed-up over transformers that any XLA:CPU implementation could reach is then transformers'
time / floor; a goal above it cannot be met by tuning core.lm on this machine. Run it alone on an idle
machine, after the two benchmarks it reads.

    .venv/bin/python benchmarks/lm_roofline.py      -> benchmarks/results/lm_roofline.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
GOALS = {"decode": 2.0, "train": 1.5}


def linear_shapes(config) -> list[tuple[int, int]]:
    """(in, out) of every linear map of the trunk (q, k, v, o, gate, up, down per layer)."""
    c = config
    D, F, qd, kvd = c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    return [(D, qd), (D, kvd), (D, kvd), (qd, D), (D, F), (D, F), (F, D)] * c.num_layers


def _median_seconds(fn, args, repeats: int) -> tuple[float, float, float]:
    import jax

    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), min(times), max(times)


def decode_floor(config, batch: int, prompt: int, new_tokens: int, repeats: int, rng) -> dict:
    import jax
    import jax.numpy as jnp

    shapes = linear_shapes(config) + [(config.hidden_size, config.vocab_size)]  # the head, pre-transposed
    weights = [jnp.asarray(rng.standard_normal(s, np.float32) * 0.02) for s in shapes]
    products = jax.jit(lambda xs, ws: [x @ w for x, w in zip(xs, ws)])
    read = jax.jit(lambda ws: sum(w.sum() for w in ws))
    rows = {}
    for name, m in (("step", batch), ("prefill", batch * prompt)):
        xs = [jnp.asarray(rng.standard_normal((m, s[0]), np.float32)) for s in shapes]
        rows[name] = _median_seconds(products, (xs, weights), repeats)
    rows["read"] = _median_seconds(read, (weights,), repeats)
    mb = sum(int(np.prod(s)) for s in shapes) * 4 / 2**20
    step, prefill, read_s = rows["step"], rows["prefill"], rows["read"]
    floor = [prefill[i] + new_tokens * step[i] for i in range(3)]
    return {"weights_mb": mb, "step_products_s": step[0], "prefill_products_s": prefill[0],
            "weight_read_s": read_s[0], "floor_s": floor[0], "floor_min_s": floor[1], "floor_max_s": floor[2],
            "bandwidth_floor_s": prefill[0] + new_tokens * read_s[0],
            "streamed_gb_per_s": mb / 1024 / step[0], "read_gb_per_s": mb / 1024 / read_s[0]}


def train_floor(config, tokens: int, lora: bool, repeats: int, rng) -> dict:
    import jax
    import jax.numpy as jnp

    shapes = linear_shapes(config)
    head = (config.hidden_size, config.vocab_size)
    weights = [jnp.asarray(rng.standard_normal(s, np.float32) * 0.02) for s in shapes + [head]]
    xs = [jnp.asarray(rng.standard_normal((tokens, s[0]), np.float32)) for s in shapes + [head]]
    dys = [jnp.asarray(rng.standard_normal((tokens, s[1]), np.float32)) for s in shapes + [head]]

    def products(xs, dys, ws):
        out = []
        for x, dy, w in zip(xs, dys, ws):
            out += [x @ w, dy @ w.T]  # forward, input gradient
            if not lora:
                out.append(x.T @ dy)  # weight gradient (the base and head are frozen under LoRA)
        return out

    median, low, high = _median_seconds(jax.jit(products), (xs, dys, weights), repeats)
    flops = sum(2 * tokens * a * b * (2 if lora else 3) for a, b in shapes + [head])
    return {"floor_s": median, "floor_min_s": low, "floor_max_s": high, "gflop": flops / 1e9,
            "gflop_per_s": flops / 1e9 / median}


def _peer(path: pathlib.Path, match: dict) -> tuple[list[float], dict, str]:
    """transformers' and ours' rows of a results file matching `match`, and its commit."""
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if all(r.get(k) == v for k, v in match.items())]
    by = {r["implementation"]: r for r in rows}
    if "transformers" not in by or "ours" not in by:
        raise ValueError(f"{path.name}: expected ours and transformers rows for {match}, found {sorted(by)}")
    return by["transformers"], by["ours"], data["git_commit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each jitted program")
    args = parser.parse_args()
    if args.repeats < 1:
        raise ValueError(f"--repeats={args.repeats}: expected >= 1")

    import jax

    from benchmarks import lm_decode, lm_train
    from core.results import claim, write_results

    wall = time.perf_counter()
    load_before = os.getloadavg()
    rng = np.random.default_rng(0)
    rows, claims, sources = [], [], {}
    for size in lm_decode.SIZES:
        theirs, ours, commit = _peer(RESULTS / "lm_decode.json", {"size": size})
        sources["lm_decode"] = commit
        f = decode_floor(lm_decode.lm_config(size), lm_decode.BATCH, lm_decode.PROMPT_LEN, lm_decode.NEW_TOKENS,
                         args.repeats, rng)
        rows.append({"workload": f"decode {size}", "transformers_s": theirs["seconds"], "ours_s": ours["seconds"],
                     **f, "max_speedup": theirs["seconds"] / f["floor_s"],
                     "max_speedup_perfect_bandwidth": theirs["seconds"] / f["bandwidth_floor_s"],
                     "goal": GOALS["decode"]})
    for mode in ("full", "lora"):
        theirs, ours, commit = _peer(RESULTS / "lm_train.json", {"mode": mode})
        sources["lm_train"] = commit
        f = train_floor(lm_train.lm_config(), lm_train.BATCH * lm_train.SEQ, mode == "lora", args.repeats, rng)
        rows.append({"workload": f"train {mode}", "transformers_s": theirs["step_seconds"],
                     "ours_s": ours["step_seconds"], **f, "max_speedup": theirs["step_seconds"] / f["floor_s"],
                     "goal": GOALS["train"]})
    for r in rows:
        kind = r["workload"].split()[0]
        low, high = (r["transformers_s"] / r["floor_max_s"], r["transformers_s"] / r["floor_min_s"])
        name = r["workload"].replace(" ", "_")
        claims.append(claim(
            f"goal_within_floor_{name}", f"the {r['goal']}x {kind} goal ({r['workload']}) is within reach of an "
            "XLA:CPU program on this machine: transformers' recorded time over the floor of the matrix products "
            "alone is at least the goal", high >= r["goal"],
            f"transformers {r['transformers_s']:.3f} s / floor {r['floor_s']:.3f} s = {r['max_speedup']:.2f}x at "
            f"most (range over repeats {low:.2f}-{high:.2f}x); ours now {r['transformers_s'] / r['ours_s']:.2f}x; "
            "held if the most favourable end reaches the goal", n=args.repeats, interval=[low, high]))
    path = write_results("lm_roofline", rows=rows, claims=claims, wall_seconds=time.perf_counter() - wall,
                         scale="issue #28's decode (8 x 32 -> 64 tokens) and training (8 x 512 tokens) workloads, "
                               "float32, the 2-core CPU", peer_results=sources,
                         backend=f"jax {jax.__version__} ({jax.default_backend()})", loadavg_before=load_before,
                         loadavg_after=os.getloadavg())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
