"""TRM in ToolWorld: per-call rewards from a tool-call reward model against outcome-only RL, paired over seeds.

Per seed (`rl_tools.trm.study.run_seed`): a 2-layer width-64 decoder behaviour-cloned on oracle + corrupted
traces; TRMs (the BC trunk + a linear head at each observation's last token) trained on necessity x quality,
quality-only and necessity-only labels; then from the same start, 32 RL steps (16 prompts x G = 8, T = 0.7, lr 1e-3) of
each run in `benchmark_runs()`: GRPO outcome-only, + TRM group-level (alpha 0.2), + TRM turn-level (alpha 0.2
and 1.0), trajectory-level ORM, oracle per-call labels, PPO outcome-only and + TRM (alpha 0.2 and 1.0). Then the
TRM AUC over data size x width (random-init trunks).

    nice -n 10 .venv/bin/python benchmarks/trm.py [--seeds 0,1,2] [--sweep-seeds 0]
    (seeds can run as separate processes, `--seeds 1 --sweep-seeds ''`; a last call with every seed finds them
    all in the cache and writes the results)
    .venv/bin/python benchmarks/trm.py --claims-from-rows      # recompute the claims from the stored rows

Finished runs are appended to benchmarks/results/trm_runs.jsonl (keyed by the git commit, the config and the
run), so an interrupted benchmark resumes where it stopped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from core.results import check, claim, paired_claim, t_interval, write_results  # noqa: E402

ALPHAS = (0.2, 1.0)
MAIN_ALPHA = 0.2
SIZES = (300, 1000, 3000)
WIDTHS = (32, 64)


def benchmark_runs():
    """The runs per seed, the claims' essentials first (a cut benchmark still has them): 9 of the 15 runs of
    `claim_runs()`; cut for CPU: alpha 0.05, the quality-only / necessity-only TRMs' RL runs (their AUCs stay)."""
    from rl_tools.trm.study import RunSpec
    a = MAIN_ALPHA
    return [RunSpec("grpo_outcome", "grpo_outcome"), RunSpec(f"grpo_trm_turn@{a:g}", "grpo_trm_turn", a),
            RunSpec("grpo_trm_group", "grpo_trm_group", a), RunSpec("grpo_oracle_turn", "grpo_oracle_turn", a),
            RunSpec("ppo_outcome", "ppo_outcome"), RunSpec(f"ppo_trm@{a:g}", "ppo_trm", a),
            RunSpec("ppo_trm@1", "ppo_trm", 1.0), RunSpec("grpo_trm_turn@1", "grpo_trm_turn", 1.0),
            RunSpec("grpo_orm", "grpo_orm", a)]
CACHE = ROOT / "benchmarks" / "results" / "trm_runs.jsonl"


def _by(rows, run, key):
    return {r["seed"]: r[key] for r in rows if r["run"] == run and key in r}


def _paired(rows, id_, statement, ours_run, base_run, key="exact_match", **kw):
    ours, base = _by(rows, ours_run, key), _by(rows, base_run, key)
    seeds = sorted(set(ours) & set(base))
    if not seeds:  # a run cut from this benchmark: no claim (the README lists the cut runs)
        return None, seeds
    return paired_claim(id_, statement, [ours[s] for s in seeds], [base[s] for s in seeds], **kw), seeds


def claims_from_rows(rows: list[dict]) -> list[dict]:
    """Every claim from the stored rows alone."""
    claims = []
    start = {r["seed"]: r for r in rows if r["run"] == "start"}
    oracle = _by(rows, "grpo_oracle_turn", "exact_match")
    turn = f"grpo_trm_turn@{MAIN_ALPHA:g}"
    c, seeds = _paired(rows, "trm_turn_beats_outcome_grpo",
                       f"GRPO with TRM rewards and turn-level normalisation (alpha {MAIN_ALPHA:g}) beats outcome-only "
                       "GRPO on held-out answer exact match (paired over seeds)", turn, "grpo_outcome",
                       chance=0.0, oracle=float(np.mean(list(oracle.values()))) if oracle else None,
                       evidence="sampled EM (T = 0.7, 4 samples x 128 held-out questions); chance: a uniform "
                                "policy (about 0); oracle: GRPO with the exact per-call labels")
    claims.append(c)

    # drift in calls per question (held-out, after RL minus the BC start): group-level moves, turn-level not
    def drift(run):
        after = _by(rows, run, "calls_per_question")
        return {s: after[s] - start[s]["calls_per_question"] for s in after if s in start}
    dg, dt = drift("grpo_trm_group"), drift(turn)
    seeds = sorted(set(dg) & set(dt))
    if len(seeds) >= 2:
        lo_g, hi_g = t_interval([dg[s] for s in seeds])
        lo_t, hi_t = t_interval([dt[s] for s in seeds])
        group_moves = lo_g > 0 or hi_g < 0
        turn_still = lo_t <= 0 <= hi_t
        held = group_moves and turn_still
        claims.append(claim(
            "group_level_drifts_calls_turn_level_does_not",
            "group-level normalisation changes the number of tool calls per question (either direction: the 95 % "
            "interval of the drift excludes 0) while turn-level does not (its interval spans 0)",
            held if (group_moves or not turn_still) else None,
            f"drift in held-out calls per question after RL: group-level {np.mean([dg[s] for s in seeds]):+.3f} "
            f"[{lo_g:+.3f}, {hi_g:+.3f}], turn-level {np.mean([dt[s] for s in seeds]):+.3f} [{lo_t:+.3f}, {hi_t:+.3f}] "
            f"(t-intervals over {len(seeds)} seeds); BC start "
            f"{np.mean([start[s]['calls_per_question'] for s in seeds]):.3f} "
            "calls per question; the oracle plan needs 1-5", n=len(seeds),
            effect=float(np.mean([dg[s] for s in seeds])),
            interval=[lo_g, hi_g], turn_interval=[lo_t, hi_t], test="t-intervals of the drift vs 0"))
    c, _ = _paired(rows, "group_level_drifts_more_than_turn_level",
                   "the absolute drift in calls per question is larger under group-level than turn-level "
                   "normalisation (paired over seeds)", "grpo_trm_group", turn, key="calls_per_question")
    a = {s: abs(dg[s]) for s in dg}
    b = {s: abs(dt[s]) for s in dt}
    seeds = sorted(set(a) & set(b))
    claims.append(paired_claim("group_level_drifts_more_than_turn_level", c["statement"], [a[s] for s in seeds],
                               [b[s] for s in seeds], evidence="|held-out calls per question after RL - BC start|"))

    # PPO at the best alpha, and the alpha sensitivity of PPO vs GRPO
    ppo = {a_: _by(rows, f"ppo_trm@{a_:g}", "exact_match") for a_ in ALPHAS}
    grpo = {a_: _by(rows, f"grpo_trm_turn@{a_:g}", "exact_match") for a_ in ALPHAS}
    if all(ppo.values()):
        best = max(ALPHAS, key=lambda a_: np.mean(list(ppo[a_].values())))
        c, _ = _paired(rows, "trm_ppo_beats_outcome_ppo_at_best_alpha",
                       f"PPO with alpha x TRM score at each call's last token beats outcome-only PPO at the best "
                       f"alpha of {ALPHAS} (here {best:g}; picked on the same seeds, so optimistic)",
                       f"ppo_trm@{best:g}", "ppo_outcome", chance=0.0)
        claims.append(c)
    if all(ppo.values()) and all(grpo.values()):
        seeds = sorted(set.intersection(*[set(v) for v in [*ppo.values(), *grpo.values()]]))
        spread = lambda d, s: max(d[a_][s] for a_ in ALPHAS) - min(d[a_][s] for a_ in ALPHAS)  # noqa: E731
        claims.append(paired_claim(
            "ppo_more_alpha_sensitive_than_grpo",
            f"the spread of EM over alpha in {ALPHAS} is larger for PPO + TRM than for turn-level GRPO + TRM "
            "(paired over seeds)", [spread(ppo, s) for s in seeds], [spread(grpo, s) for s in seeds],
            evidence="per seed, max - min held-out EM across the alphas"))

    # labels: necessity x quality vs either alone, in AUC (on the BC policy's own calls) and downstream EM
    for kind in ("quality", "necessity"):
        ours = {s: r["auc_policy[product]"] for s, r in start.items() if "auc_policy[product]" in r}
        base = {s: r[f"auc_policy[{kind}]"] for s, r in start.items() if f"auc_policy[{kind}]" in r}
        seeds = sorted(set(ours) & set(base))
        claims.append(paired_claim(
            f"product_label_beats_{kind}_auc",
            f"a TRM trained on necessity x quality labels ranks the BC policy's calls (by their true necessity x "
            f"quality) better than one trained on {kind} alone (AUC, paired over seeds)",
            [ours[s] for s in seeds], [base[s] for s in seeds], chance=0.5, oracle=1.0))
        c, _ = _paired(rows, f"product_label_beats_{kind}_em",
                       f"turn-level GRPO with the necessity x quality TRM beats it with the {kind}-only TRM on EM",
                       turn, f"grpo_trm_turn[{kind}]")
        claims.append(c)

    # saturation of the AUC with data, over seeds x widths
    sweep = [r for r in rows if r["run"].startswith("auc_sweep")]
    if sweep:
        auc = {(r["seed"], r["width"], r["trajectories"]): r["auc"] for r in sweep}
        keys = sorted({(s, w) for s, w, _ in auc if all((s, w, n) in auc for n in SIZES)})
        early = [auc[(s, w, SIZES[1])] - auc[(s, w, SIZES[0])] for s, w in keys]
        late = [auc[(s, w, SIZES[2])] - auc[(s, w, SIZES[1])] for s, w in keys]
        c = paired_claim("trm_auc_saturates_with_data",
                         f"TRM AUC saturates with data: the gain from {SIZES[1]} to {SIZES[2]} trajectories is "
                         f"smaller than from {SIZES[0]} to {SIZES[1]} (paired over seeds x widths {WIDTHS})",
                         early, late, evidence="held-out scripted calls; random-init trunks")
        claims.append(c)
    c, _ = _paired(rows, "orm_below_outcome",
                   "outcome-only GRPO beats the trajectory-level ORM (mean TRM score added to the outcome): the "
                   "paper's 'trajectory-level ORM < answer-only reward'", "grpo_outcome", "grpo_orm")
    claims.append(c)
    c, _ = _paired(rows, "oracle_per_call_beats_outcome",
                   "the upper bound: GRPO with the exact per-call labels (turn-level) beats outcome-only GRPO",
                   "grpo_oracle_turn", "grpo_outcome")
    claims.append(c)
    em0 = [r["exact_match"] for r in start.values()]
    if em0:
        claims.append(check("bc_start_leaves_room", "the BC start's sampled EM is in 0.2-0.6 on every seed (the issue "
                            "asks for 30-50 %), so RL has room and signal", all(0.2 <= v <= 0.6 for v in em0),
                            ", ".join(f"{v:.3f}" for v in em0), n=len(em0)))
    return [c for c in claims if c is not None]


def _load_cache(key: str) -> list[dict]:
    if not CACHE.exists():
        return []
    out = []
    for line in CACHE.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("key") == key:
            out.append(rec["row"])
    return out


def render_readme() -> None:
    from benchmarks import render

    for readme in (ROOT / "rl_tools" / "trm" / "README.md",):
        if readme.exists():
            readme.write_text(render.render_text(readme.read_text(), render.load_all()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sweep-seeds", default="0")
    parser.add_argument("--claims-from-rows", action="store_true")
    parser.add_argument("--collect-only", action="store_true",
                        help="write the results from the cached rows of these settings without running anything")
    args = parser.parse_args()
    if args.claims_from_rows:
        path = ROOT / "benchmarks" / "results" / "trm.json"
        record = json.loads(path.read_text())
        record["claims"] = claims_from_rows(record["rows"])
        path.write_text(json.dumps(record, indent=2) + "\n")
        render_readme()
        return
    from rl_tools.trm.configs import presets
    from rl_tools.trm.study import auc_sweep, run_seed

    config = presets()["demo"]
    runs = benchmark_runs()
    # the cache is keyed by the method's code and the settings (not the tree's git state, which other work changes)
    code = "".join(p.read_text() for p in sorted((ROOT / "rl_tools" / "trm").glob("*.py")))
    key = hashlib.sha256(f"{code}|{config!r}|{runs!r}|{SIZES}|{WIDTHS}".encode()).hexdigest()[:16]
    rows = _load_cache(key)
    t0 = time.perf_counter()

    def keep(row):
        rows.append(row)
        with CACHE.open("a") as f:
            f.write(json.dumps({"key": key, "row": row}) + "\n")

    if args.collect_only:
        args.seeds = args.sweep_seeds = ""
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",") if s]:
            done = {r["run"] for r in rows if r["seed"] == seed}
            run_seed(config, seed, runs, pathlib.Path(tmp) / f"seed{seed}", skip=done, on_row=keep)
        for seed in [int(s) for s in args.sweep_seeds.split(",") if s]:
            done = {r["run"] for r in rows if r["seed"] == seed}
            auc_sweep(config, seed, SIZES, WIDTHS, pathlib.Path(tmp) / f"sweep{seed}", skip=done, on_row=keep)
    claims = claims_from_rows(rows)
    compute = sum(r.get("seconds", 0.0) for r in rows)
    seeds = ",".join(str(x) for x in sorted({r["seed"] for r in rows if r["run"] == "start"}))
    sweep_seeds = ",".join(str(x) for x in sorted({r["seed"] for r in rows if r["run"].startswith("auc_sweep")}))
    path = write_results("trm", rows=rows, claims=claims, wall_seconds=time.perf_counter() - t0 if not
                         args.collect_only else compute, run_seconds_total=compute,
                         command=("nice -n 10 .venv/bin/python benchmarks/trm.py --seeds S --sweep-seeds '' "
                                  "for S in 0, 1, 2 "
                                  "and --seeds '' --sweep-seeds 0, as four parallel processes; then --collect-only"
                                  if args.collect_only else
                                  "nice -n 10 .venv/bin/python benchmarks/trm.py " + " ".join(sys.argv[1:])),
                         scale=f"ToolWorld (32 entities, values 0-49), 2-layer width-64 decoder, seeds {seeds}, "
                               f"32 RL steps x 16 prompts x G=8 per run, AUC sweep seeds {sweep_seeds}; 2-core "
                               "CPU shared with about six other jobs (load 15-26); seeds and the sweep ran as parallel "
                               "processes; "
                               "run_seconds_total sums each row's own wall time")
    render_readme()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
