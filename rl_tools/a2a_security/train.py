"""`run(config, workdir)`: the safety-utility table and the spoofing-vs-k sweep, with plots and a JSONL export."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

from core import plots
from core.train import progress
from rl_tools.a2a_security import scenarios
from rl_tools.a2a_security.configs import Config
from rl_tools.a2a_security.coordinator import HARDENED, NAIVE
from rl_tools.a2a_security.selector import train_selector


def evaluate(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    """Every attack x domain x coordinator (adversarial and control cases), and AS success against k."""
    workdir.mkdir(parents=True, exist_ok=True)
    cases = [c for attack in config.attacks for domain in config.domains
             for c in scenarios.generate_cases(attack, domain, config.cases_per_attack, seed=config.seed,
                                               k=config.spoofs)]
    scenarios.export_jsonl(cases, workdir / "cases.jsonl")
    rows = []
    bar = progress(total=2 * len(cases), desc="a2a cases")
    for policy in (NAIVE, HARDENED):
        results = scenarios.run_suite(cases, policy, progress=bar)
        for attack in config.attacks:
            for domain in config.domains:
                subset = [r for r in results if r.case.attack == attack and r.case.domain == domain]
                rows.append({"attack": attack, "domain": domain, "coordinator": policy.name,
                             **scenarios.summarise(subset)})
    bar.close()

    selectors = {"heuristic": scenarios.HeuristicSelector()}
    extra: dict[str, Any] = {}
    if config.learned_selector:
        selectors["learned"], extra = train_selector(config.selector, workdir / "selector")
    sweep = []
    bar = progress(total=len(config.k_sweep) * len(config.domains) * len(selectors), desc="spoofing vs k")
    for k in config.k_sweep:
        for domain in config.domains:
            attack_cases = [c for c in scenarios.generate_cases("AS", domain, config.k_sweep_cases,
                                                                seed=config.seed + 1, k=k) if not c.control]
            for name, selector in selectors.items():
                summary = scenarios.summarise(scenarios.run_suite(attack_cases, NAIVE, selector))
                sweep.append({"k": k, "domain": domain, "selector": name, "asr": summary["asr"],
                              "n": summary["n_attack"]})
                bar.update(1)
    bar.close()
    return {"rows": rows, "sweep": sweep, **extra}


def _mean(rows, **match) -> float:
    values = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return float(np.mean([v["asr"] if "asr" in v else np.nan for v in values])) if values else float("nan")


def safety_utility_table(rows: list[dict]) -> str:
    header = "| attack | domain | coordinator | ASR | benign utility | utility under attack | false-positive rate |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['attack']} | {r['domain']} | {r['coordinator']} | {r['asr']:.2f} | "
                     f"{r['benign_utility']:.2f} | {r['attacked_utility']:.2f} | {r['false_positive_rate']:.2f} |")
    return "\n".join(lines)


def run(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    out = evaluate(config, workdir)
    rows, sweep = out["rows"], out["sweep"]
    table = safety_utility_table(rows)
    (workdir / "safety_utility.md").write_text(table + "\n")
    (workdir / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    print(table)
    attacks = list(config.attacks)
    plots.bar_plot(workdir / "asr_by_attack.png",
                   {f"{a} {p}": _mean(rows, attack=a, coordinator=p) for a in attacks for p in ("naive", "hardened")},
                   title="attack success rate (mean over domains)", ylabel="ASR")
    curves = {}
    for name in sorted({s["selector"] for s in sweep}):
        ks = sorted({s["k"] for s in sweep})
        curves[name] = (ks, [_mean(sweep, k=k, selector=name) for k in ks])
    plots.line_plot(workdir / "spoofing_vs_k.png", curves, title="AgentCard spoofing success vs spoofs k",
                    xlabel="k (spoofed cards)", ylabel="ASR (naive coordinator)")
    metrics: dict[str, Any] = {}
    for a in attacks:
        for p in ("naive", "hardened"):
            metrics[f"asr/{a}/{p}"] = _mean(rows, attack=a, coordinator=p)
    for p in ("naive", "hardened"):
        subset = [r for r in rows if r["coordinator"] == p]
        metrics[f"benign_utility/{p}"] = float(np.mean([r["benign_utility"] for r in subset]))
        metrics[f"false_positive_rate/{p}"] = float(np.mean([r["false_positive_rate"] for r in subset]))
    for key in ("selector_test_accuracy",):
        if key in out:
            metrics[key] = out[key]
    return metrics
