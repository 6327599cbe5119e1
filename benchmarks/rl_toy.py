"""rl_toy: GRPO and PPO each raise a noisy-SFT model's greedy exact match on string reversal, with bounded KL.

Runs the `rl_toy` demo preset (3 seeds; per seed: SFT on reversals of which half copy instead, then
60 steps of GRPO and of PPO from the same SFT start, 16 prompts x 8 samples per step, KL penalty 0.1 to the
SFT model) and records per seed the greedy exact match on 256 held-out prompts before and after RL and the
exact per-token KL(policy || SFT) on the policy's own samples.

    .venv/bin/python benchmarks/rl_toy.py      -> benchmarks/results/rl_toy.json, table in core/rl/README.md
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.results import check, claim, git_commit, paired_claim, write_results  # noqa: E402
from core.rl.toy import presets, run  # noqa: E402


def render_readme() -> None:
    from benchmarks import render

    readme = ROOT / "core" / "rl" / "README.md"
    records = render.load_all()  # every results block of the README, not only this one (the others stay filled)
    readme.write_text(render.render_text(readme.read_text(), records))


def claims_from_rows(rows: list[dict], config) -> list[dict]:
    """The claims, from the stored rows alone (so `--claims-from-rows` recomputes them without a rerun)."""
    def exact_match(policy: str) -> dict[int, float]:
        return {r["seed"]: r["greedy_exact_match"] for r in rows if r["policy"] == policy}

    sft = exact_match("sft start")
    seeds = sorted(sft)
    claims = []
    for a in config.algorithms:
        ours = exact_match(a)
        claims.append(paired_claim(
            f"{a}_beats_sft", f"{a.upper()} raises greedy exact match above the SFT start (paired over seeds)",
            [ours[s] for s in seeds], [sft[s] for s in seeds], chance=0.0, oracle=1.0,
            evidence="greedy exact match on the held-out prompts; chance: a uniform policy (about 0), oracle: the "
                     "target rule (1.0)"))
    kls = [r["kl_to_sft"] for r in rows if r["policy"] != "sft start"]
    claims.append(claim("kl_bounded", f"the final per-token KL(policy || SFT) stays under {config.kl_bound} nats "
                        "for every seed and algorithm", max(kls) < config.kl_bound,
                        f"largest {max(kls):.3f}, smallest {min(kls):.3f}", n=len(kls), effect=max(kls),
                        interval=[min(kls), max(kls)], test=f"every run below {config.kl_bound}"))
    claims.append(check("sft_start_is_imperfect", "the SFT start leaves room to improve (greedy exact match below "
                        "0.8 on every seed; the oracle is 1.0, a uniform policy about 0)",
                        all(v < 0.8 for v in sft.values()), ", ".join(f"{sft[s]:.3f}" for s in seeds)))
    return claims


def recompute_claims() -> None:
    path = ROOT / "benchmarks" / "results" / "rl_toy.json"
    record = json.loads(path.read_text())
    record["claims"] = claims_from_rows(record["rows"], presets()["demo"])
    record["claims_recomputed"] = f"{git_commit()[:12]} (from the stored rows)"
    path.write_text(json.dumps(record, indent=2) + "\n")


def main() -> None:
    if "--render-only" in sys.argv:
        render_readme()
        return
    if "--claims-from-rows" in sys.argv:
        recompute_claims()
        render_readme()
        return
    config = presets()["demo"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        metrics = run(config, tmp)
    rows, claims = [], []
    for r in metrics["per_seed"]:
        rows.append({"seed": r["seed"], "policy": "sft start", "greedy_exact_match": r["sft_exact_match"],
                     "kl_to_sft": 0.0})
        for a in config.algorithms:
            rows.append({"seed": r["seed"], "policy": a, "greedy_exact_match": r[f"{a}_exact_match"],
                         "kl_to_sft": r[f"{a}_kl"], "final_sampled_reward": r[f"{a}_final_reward"]})
    claims = claims_from_rows(rows, config)
    path = write_results("rl_toy", rows=rows, claims=claims, wall_seconds=time.perf_counter() - t0,
                         command=".venv/bin/python benchmarks/rl_toy.py",
                         scale="the rl_toy demo preset: 2-layer width-64 decoder, 3 seeds, 60 RL steps each, "
                               "2-core CPU")
    render_readme()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
