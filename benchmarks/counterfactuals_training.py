"""Executable counterfactuals (paper 6): SFT versus RL from an execution-only base, in and out of distribution.

Per seed, the base decoder of `benchmarks/counterfactuals.py` (trained on factual + interventional items of
the if_else training programs and on the other families' execution; its params.npz and eval.json are reused
from that benchmark's workdir, or trained here when absent), then from it (`rl_tools/counterfactuals/sft_rl.py`):
SFT on the enumerating teacher's counterfactual traces of the if_else training programs, and GRPO on their
counterfactual questions with an exact-match set reward (G completions per prompt). Counterfactual exact
match on the unseen in-distribution programs (if_else) and on the OOD splits (if_else_long, while, multi_r,
math), beside the best chance guess on the same items, and the share of outputs with an explicit abduction
step.

    nice -n 10 .venv/bin/python benchmarks/counterfactuals_training.py --seeds 0 1 2 \\
        --base-root runs/bench_counterfactuals --steps 2000 --n-train 8000 --n-eval 150 --max-level 1 \\
        --seq-len 224 --width 128 --layers 4 --trace-style flow --number-init fourier \\
        --exec-families if_else_long while multi_r math --sft-steps 800 --sft-seq-len 352 --rl-steps 40 \\
        --rl-max-new-tokens 128 --eval-max-new-tokens 448 \\
        --workdir runs/bench_cf_training --fresh

    .venv/bin/python benchmarks/counterfactuals_training.py --claims-from-rows   # recompute the claims

`--reuse` (in place of `--fresh`) keeps a seed whose folder was finished by the same configuration and the same
committed rl_tools/counterfactuals tree, so seeds can be run one session at a time.

Writes benchmarks/results/counterfactuals_training.json. The issue's four claims, paired over seeds:
the base's drop beyond chance on every split; SFT raises in-distribution CF EM and lowers at least one OOD
split; RL raises OOD CF EM over the base on code and on math; RL's outputs show an explicit abduction step
more often than SFT's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from core.results import RESULTS_DIR, claim, paired_claim, recompute_claims, t_interval, verdict, write_results  # noqa: E402
from rl_tools.counterfactuals import sft_rl  # noqa: E402

MIN_GAP = 0.10
SPLITS = sft_rl.EVAL_SPLITS
OOD = ("if_else_long", "while", "multi_r", "math")


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def seed_rows(seed: int, out: dict) -> list[dict]:
    rows = []
    for model, per in out["models"].items():
        for s in SPLITS:
            m = per[s]
            row = {"seed": seed, "model": model, "split": s, "cf_em": m["em"], "cf_f1": m["f1"],
                   "cf_chance_em": out["chance"][s]["best_em"], "cf_chance_f1": out["chance"][s]["best_f1"],
                   "cf_set_size": out["chance"][s]["set_size"]}
            if model == "base":
                row["iv_em"] = m["iv_em"]
                row["iv_chance_em"] = out["iv_chance"][s]["best_em"]
            else:
                row["abduction_share"] = m["abduction_share"]
                if "abduction_right" in m:  # seeds run before it was recorded lack it
                    row["abduction_right"] = m["abduction_right"]
                    row["em_when_abduction_right"] = m["em_when_abduction_right"]
            rows.append(row)
    return rows


def three_any(verdicts) -> bool | None:
    verdicts = list(verdicts)
    if any(v is True for v in verdicts):
        return True
    return False if all(v is False for v in verdicts) else None


def all_of(verdicts) -> bool | None:
    verdicts = list(verdicts)
    if any(v is False for v in verdicts):
        return False
    return True if all(v is True for v in verdicts) else None


def make_claims(rows) -> list[dict]:
    seeds = sorted({r["seed"] for r in rows})
    get = {(r["model"], r["split"], r["seed"]): r for r in rows}

    def col(model, split, key):
        return [get[(model, split, s)][key] for s in seeds]

    def mean_col(model, splits, key):
        return [float(np.mean([get[(model, sp, s)][key] for sp in splits])) for s in seeds]

    fmt = {True: "held", False: "not held", None: "inconclusive"}
    claims = []
    # 1. the base's IV -> CF drop beyond chance, on every split (IV above chance there)
    def drop(sp):
        return [(a - b) - (c - d) for a, b, c, d in zip(col("base", sp, "iv_em"), col("base", sp, "iv_chance_em"),
                                                         col("base", sp, "cf_em"), col("base", sp, "cf_chance_em"))]

    parts, verdicts = [], []
    for sp in SPLITS:
        gap = drop(sp)
        exc = [a - b for a, b in zip(col("base", sp, "iv_em"), col("base", sp, "iv_chance_em"))]
        lo, hi = t_interval(gap)
        v = all_of((verdict((lo, hi), MIN_GAP), verdict(t_interval(exc), 0.0)))
        verdicts.append(v)
        parts.append(f"{sp}: IV {np.mean(col('base', sp, 'iv_em')):.3f} (chance "
                     f"{np.mean(col('base', sp, 'iv_chance_em')):.3f}), CF {np.mean(col('base', sp, 'cf_em')):.3f} "
                     f"(chance {np.mean(col('base', sp, 'cf_chance_em')):.3f}), drop beyond chance {np.mean(gap):.3f} "
                     f"[{lo:.3f}, {hi:.3f}] {fmt[v]}")
    wd = drop("if_else")
    claims.append(claim(
        "base_drop_beyond_chance_every_split",
        f"The base model's interventional-to-counterfactual drop exceeds chance's by > {MIN_GAP:.2f} EM on every "
        "split, where its interventional EM beats chance", all_of(verdicts),
        "; ".join(parts) + "; chance = the best of a random-latent guess, a uniform value and the prior set on the "
        "same items; shown: the if_else interval", n=len(seeds), effect=float(np.mean(wd)),
        interval=[float(x) for x in t_interval(wd)], test="per split t-intervals over seeds (three-valued AND)"))
    # 2. SFT up in distribution, down on at least one OOD split
    if "sft" in {r["model"] for r in rows}:
        up = paired_claim("sft_in_distribution_gain", "SFT raises counterfactual EM on unseen if_else programs over "
                          "the base", col("sft", "if_else", "cf_em"), col("base", "if_else", "cf_em"),
                          chance=float(np.mean(col("base", "if_else", "cf_chance_em"))), oracle=1.0)
        downs = {}
        for sp in OOD:  # paired_claim: a zero-width interval (every seed the same difference) is not evidence
            c = paired_claim(f"sft_lower_{sp}", "", col("sft", sp, "cf_em"), col("base", sp, "cf_em"),
                             higher_is_better=False)
            downs[sp] = (c["effect"], *c["interval"], c["held"])
        v_down = three_any(x[3] for x in downs.values())
        worst = min(downs, key=lambda s: downs[s][2])
        claims.append(claim(
            "sft_up_in_distribution_down_ood",
            "SFT raises in-distribution counterfactual EM and lowers it on at least one OOD split (the paper's "
            "finding)", all_of((up["held"], v_down)),
            f"in distribution: {up['evidence']}; OOD (SFT - base): " + "; ".join(
                f"{sp} {m:.3f} [{lo:.3f}, {hi:.3f}] {fmt[v] if v is not None else 'inconclusive'}"
                .replace("held", "lower held") for sp, (m, lo, hi, v) in downs.items()),
            n=len(seeds), effect=downs[worst][0], interval=[downs[worst][1], downs[worst][2]],
            test="paired t-intervals over seeds: if_else gain > 0 AND any OOD split's change < 0"))
        claims.append(up)
    # 3. RL up out of distribution, on code and on math
    if "rl" in {r["model"] for r in rows}:
        code = paired_claim("rl_ood_code_gain", "GRPO raises counterfactual EM over the base on the OOD code splits "
                            "(mean of if_else_long, while, multi_r)", mean_col("rl", OOD[:3], "cf_em"),
                            mean_col("base", OOD[:3], "cf_em"),
                            chance=float(np.mean(mean_col("base", OOD[:3], "cf_chance_em"))), oracle=1.0)
        math = paired_claim("rl_ood_math_gain", "GRPO raises counterfactual EM over the base on counterfactual math",
                            col("rl", "math", "cf_em"), col("base", "math", "cf_em"),
                            chance=float(np.mean(col("base", "math", "cf_chance_em"))), oracle=1.0)
        ratio_code = np.mean(mean_col("rl", OOD[:3], "cf_em")) / max(np.mean(mean_col("base", OOD[:3], "cf_em")), 1e-9)
        claims.append(claim(
            "rl_ood_gain_code_and_math", "GRPO raises OOD counterfactual EM over the base on code and on math "
            "(the paper: 1.5-2x)", all_of((code["held"], math["held"])),
            f"code: {code['evidence']} (ratio {ratio_code:.2f}x); math: {math['evidence']}", n=len(seeds),
            effect=min(code["effect"], math["effect"]),
            interval=code["interval"] if code["effect"] <= math["effect"] else math["interval"],
            test="paired t-intervals over seeds, both > 0"))
        claims += [code, math]
    # 4. trace analysis
    if {"rl", "sft"} <= {r["model"] for r in rows}:
        claims.append(paired_claim(
            "rl_abduction_share_vs_sft",
            "RL's outputs perform an explicit abduction step more often than SFT's (share of counterfactual "
            "outputs with the abduction marker, over all splits)", mean_col("rl", SPLITS, "abduction_share"),
            mean_col("sft", SPLITS, "abduction_share"),
            evidence="probe: teacher.has_abduction (the compact `abduce` step, or an English statement of which "
                     "latents fit); the paper used an LLM judge of planning; RL starts from the base, which never "
                     "saw the marker"))
    return claims


def print_claims(claims) -> None:
    for c in claims:
        print({True: "HELD         ", False: "NOT HELD     ", None: "INCONCLUSIVE "}[c["held"]] + c["id"] + ": "
              + c["evidence"][:600])


def _method_version() -> str:
    """The git tree of rl_tools/counterfactuals at HEAD, or "dirty" when it has uncommitted changes (a seed
    run on a changed teacher or trainer is then never reused)."""
    def git(*a):
        return subprocess.run(["git", *a], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    if git("status", "--porcelain", "rl_tools/counterfactuals"):
        return "dirty"
    return git("rev-parse", "HEAD:rl_tools/counterfactuals") or "unknown"


def _bench_config(cfg, method: str) -> dict:
    return json.loads(json.dumps({"config": dataclasses.asdict(cfg), "method": method}, sort_keys=True))


def _finished_with(wd: pathlib.Path, cfg, method: str) -> bool:
    """Whether `wd` holds a finished seed of exactly this configuration and method code (else it is rerun)."""
    saved = wd / "bench_config.json"
    if not (wd / "compare.json").exists() or not saved.exists():
        return False
    return method not in ("dirty", "unknown") and json.loads(saved.read_text()) == _bench_config(cfg, method)


def main() -> None:
    import counterfactuals as gap_bench

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--base-root", type=pathlib.Path, default=ROOT / "runs" / "bench_counterfactuals",
                   help="the gap benchmark's workdir (seed<k>/params.npz, eval.json); missing seeds are trained")
    p.add_argument("--steps", type=int, default=650, help="base training steps (must match the base-root run)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--n-train", type=int, default=8000)
    p.add_argument("--n-eval", type=int, default=150)
    p.add_argument("--max-level", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seq-len", type=int, default=160)
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--rl-steps", type=int, default=12)
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--rl-lr", type=float, default=5e-4)
    p.add_argument("--eval-max-new-tokens", type=int, default=160)
    p.add_argument("--rl-max-new-tokens", type=int, default=48)
    p.add_argument("--sft-seq-len", type=int, default=0, help="SFT row length (0: --seq-len)")
    p.add_argument("--trace-style", default="values", choices=("values", "steps", "flow"),
                   help="the base's trace form (must match the base-root run); SFT's teacher traces execute "
                        "every latent in this form")
    p.add_argument("--number-init", default="random", choices=("random", "fourier"))
    p.add_argument("--exec-families", nargs="*", default=[])
    p.add_argument("--n-exec", type=int, default=2000)
    p.add_argument("--workdir", type=pathlib.Path, default=ROOT / "runs" / "bench_cf_training")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--reuse", action="store_true",
                   help="take a seed whose compare.json was written by this same configuration instead of rerunning it")
    p.add_argument("--claims-from-rows", action="store_true")
    args = p.parse_args()
    if args.claims_from_rows:
        record = recompute_claims(RESULTS_DIR / "counterfactuals_training.json", lambda rec: make_claims(rec["rows"]))
        print_claims(record["claims"])
        return
    args.trace = True
    method = _method_version()  # the code this process imported, whatever is committed while it runs
    uptime_before = _uptime()
    t0 = time.perf_counter()
    rows, seconds = [], {}
    for seed in args.seeds:
        base_dir = args.base_root / f"seed{seed}"
        cfg = sft_rl.CFTrainConfig(
            base=gap_bench.bench_config(args, seed), arms=("sft", "rl"),
            base_dir=str(base_dir) if (base_dir / "params.npz").exists() else "", sft_steps=args.sft_steps,
            sft_lr=args.sft_lr, rl_steps=args.rl_steps, prompts_per_step=args.prompts_per_step,
            group_size=args.group_size, rl_lr=args.rl_lr, eval_max_new_tokens=args.eval_max_new_tokens,
            rl_max_new_tokens=args.rl_max_new_tokens, sft_seq_len=args.sft_seq_len)
        wd = args.workdir / f"seed{seed}"
        if args.fresh and wd.exists():
            shutil.rmtree(wd)
        if not (args.reuse and _finished_with(wd, cfg, method)):
            sft_rl.run(cfg, wd)
            (wd / "bench_config.json").write_text(json.dumps(_bench_config(cfg, method), sort_keys=True) + "\n")
        out = json.loads((wd / "compare.json").read_text())
        rows += seed_rows(seed, out)
        seconds[seed] = out["seconds"]
        print(f"seed {seed} done after {time.perf_counter() - t0:.0f} s: {out['seconds']}", flush=True)
    claims = make_claims(rows)
    scale = {"description": (f"base: decoder L={args.layers}, d={args.width}, {args.steps} steps on factual + "
                             f"interventional if_else items"
                             + (f" and on the execution of {', '.join(args.exec_families)}" if args.exec_families
                                else "")
                             + f", {args.trace_style} traces (from {args.base_root.name} where present); SFT "
                             f"{args.sft_steps} steps x 32 rows on teacher traces; GRPO {args.rl_steps} steps x "
                             f"{args.prompts_per_step} prompts x G={args.group_size}; {args.n_eval} items per "
                             f"split, level 1..{args.max_level}, seeds {args.seeds}; the paper: Qwen2.5-1.5B/3B/7B-"
                             "Instruct, SFT on R1-distill traces, GRPO 16 prompts x 24 rollouts"),
             **{k: getattr(args, k.replace("-", "_")) for k in ("steps", "sft_steps", "rl_steps", "group_size",
                                                                "prompts_per_step", "n_eval", "seeds",
                                                                "trace_style", "rl_max_new_tokens",
                                                                "eval_max_new_tokens", "sft_seq_len")}}
    write_results("counterfactuals_training", rows=rows, claims=claims, wall_seconds=time.perf_counter() - t0,
                  scale=scale, seconds=seconds, config=dataclasses.asdict(cfg),
                  uptime={"before": uptime_before, "after": _uptime()})
    print_claims(claims)


if __name__ == "__main__":
    main()
