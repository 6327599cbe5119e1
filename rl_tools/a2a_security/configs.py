"""Configs and presets for the A2ASecBench lab."""

from __future__ import annotations

import dataclasses

from core.config import check
from rl_tools.a2a_security.scenarios import ATTACKS, DOMAINS
from rl_tools.a2a_security.selector import SelectorConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """The joint safety-utility evaluation: every attack x domain x coordinator, plus spoofing success vs k.

    tiny:  `iclr26 run a2a_security --preset tiny` (~30 s on 2 CPU cores): 2 cases per attack in one domain.
    demo:  `iclr26 run a2a_security --preset demo` (~30 s): 4 cases per attack and domain, a short k sweep.
    paper: `iclr26 run a2a_security --preset paper`: 100 adversarial + 100 control cases per attack and domain
           (the released suite's size), k = 1..10.
    """

    cases_per_attack: int = 100  # adversarial cases (each with a matched benign control) per attack and domain
    domains: tuple[str, ...] = tuple(DOMAINS)  # request domains to evaluate: travel, healthcare, finance
    attacks: tuple[str, ...] = ATTACKS  # attacks to evaluate: AS, CC, CO, HOTF, ASRF, ATSI (see scenarios.py)
    spoofs: int = 10  # spoofed AgentCards k per AS (AgentCard spoofing) case in the main table
    k_sweep: tuple[int, ...] = tuple(range(1, 11))  # spoof counts k of the spoofing-success-vs-k sweep
    k_sweep_cases: int = 100  # AS attack cases per domain and k in the sweep
    learned_selector: bool = True  # also train the learned card selector and sweep it next to the heuristic one
    selector: SelectorConfig = SelectorConfig()  # the learned card selector's model and training
    seed: int = 0

    def __post_init__(self):
        check(self.cases_per_attack >= 1, "cases_per_attack", self.cases_per_attack, "at least 1")
        check(self.k_sweep_cases >= 1, "k_sweep_cases", self.k_sweep_cases, "at least 1")
        check(1 <= self.spoofs <= 50, "spoofs", self.spoofs, "between 1 and 50")
        check(all(1 <= k <= 50 for k in self.k_sweep), "k_sweep", self.k_sweep, "values between 1 and 50")
        check(bool(self.domains) and set(self.domains) <= set(DOMAINS), "domains", self.domains,
              f"a non-empty subset of {tuple(DOMAINS)}")
        check(bool(self.attacks) and set(self.attacks) <= set(ATTACKS), "attacks", self.attacks,
              f"a non-empty subset of {ATTACKS}")


PRESETS = {
    "tiny": Config(cases_per_attack=2, domains=("travel",), k_sweep=(1, 5), k_sweep_cases=4,
                   selector=SelectorConfig(train_pairs=64, steps=20, batch_size=32)),
    # the learned selector reaches test accuracy 1.0 by step 60 (idle 2 cores: 19 s warm, 30 s at 150 steps)
    "demo": Config(cases_per_attack=4, k_sweep=(1, 3, 10), k_sweep_cases=6,
                   selector=SelectorConfig(train_pairs=512, steps=60)),
    "paper": Config(),
}
