"""Configurations of the simulated-preference LGBO experiment (frozen, keyword-only, validated)."""

from __future__ import annotations

import dataclasses

from core.config import check as _check
from optimization.lgbo.data import PROBLEMS

ARMS = ("none", "aligned", "misaligned", "random", "aligned_soft", "pibo")
# aligned_soft: the aligned box with the reference code's sigmoid edges (smoothing 0.06) whatever its size;
# pibo: plain GP-BO whose LogEI is weighted by a Gaussian prior over the optimum's location, pi(x)^(beta/n)
# (Hvarfner et al. 2022), centred where the aligned box is (same information, drawn once per run)




@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Simulated-oracle BO runs: every (problem, arm, seed) is one BO loop of `iterations` rounds, the whole
    loop one `lax.scan`, arms and seeds vmapped. Defaults follow the paper's toy driver (q = 1 here)."""

    problems: tuple[str, ...] = ("hartmann6", "crossed_barrel", "hplc", "lnp3")  # benchmark functions / Olympus pools
    arms: tuple[str, ...] = ARMS  # preference arms: none, aligned, misaligned, random, aligned_soft, pibo
    seeds: int = 20
    seed_batch: int = 2  # seeds vmapped together (memory), the rest mapped sequentially
    iterations: int = 30  # BO rounds after the initial design
    n_init: int = 2  # initial design: uniform random points (pools: random rows)
    q: int = 1  # points proposed per BO round (q > 1: sequential greedy qLogEI)
    n_grid: int = 512  # the fixed Sobol grid G of the lift
    n_candidates: int = 8192  # Sobol candidates for continuous problems (pools use their rows)
    confidence: float = 0.8  # simulated oracle confidence c
    box_e: float = 16.0  # simulated box size as expected grid count E = n_grid * volume (>= 6: hard box)
    jitter: float = 0.25  # box-centre jitter, as a fraction of the box side, redrawn every round
    fit_steps: int = 40  # L-BFGS steps of the MAP fit
    pibo_beta: float = 10.0  # piBO: LogEI + (beta / n) log pi(x), n = BO iteration (1, 2, ...)
    pibo_sd: float = 0.5  # piBO prior sd per unit coordinate, as a fraction of the simulated box side
    ordinal: bool = True  # Olympus pools: numeric-level categoricals as ordinal features (False: all one-hot)
    target: float = 0.9  # "reached 90 % of the optimum"
    seed: int = 0

    def __post_init__(self):
        _check(len(self.problems) > 0 and all(p in PROBLEMS for p in self.problems), "problems", self.problems,
               f"a non-empty subset of {PROBLEMS}")
        _check(len(self.arms) > 0 and all(a in ARMS for a in self.arms), "arms", self.arms,
               f"a non-empty subset of {ARMS}")
        _check(self.seeds >= 1, "seeds", self.seeds, ">= 1")
        _check(self.seed_batch >= 1, "seed_batch", self.seed_batch, ">= 1")
        _check(self.iterations >= 1, "iterations", self.iterations, ">= 1")
        _check(self.n_init >= 1, "n_init", self.n_init, ">= 1")
        _check(self.q >= 1, "q", self.q, ">= 1")
        _check(self.n_grid >= 8, "n_grid", self.n_grid, ">= 8")
        _check(self.n_candidates >= 16, "n_candidates", self.n_candidates, ">= 16")
        _check(0.0 < self.confidence < 1.0, "confidence", self.confidence, "in (0, 1)")
        _check(self.box_e > 0.0, "box_e", self.box_e, "> 0")
        _check(0.0 <= self.jitter <= 1.0, "jitter", self.jitter, "in [0, 1]")
        _check(self.fit_steps >= 1, "fit_steps", self.fit_steps, ">= 1")
        _check(0.0 < self.target <= 1.0, "target", self.target, "in (0, 1]")
        _check(self.pibo_beta >= 0.0, "pibo_beta", self.pibo_beta, ">= 0")
        _check(self.pibo_sd > 0.0, "pibo_sd", self.pibo_sd, "> 0")

    @property
    def n_max(self) -> int:
        return self.n_init + self.iterations * self.q


def tiny() -> Config:
    """Seconds on a CPU (tests): `iclr26 run lgbo --preset tiny --workdir /tmp/lgbo_tiny`."""
    return Config(problems=("lnp3",), arms=("none", "aligned"), seeds=8, seed_batch=8, iterations=3, n_grid=64,
                  n_candidates=128, fit_steps=10)


def demo() -> Config:
    """About a minute on 2 idle CPU cores (mostly compile): the Olympus crossed_barrel pool, 4 arms x 4 seeds x
    10 rounds. `iclr26 run lgbo --preset demo --workdir /tmp/lgbo_demo`; expect the aligned arm to reach 90 %
    of the best toughness first."""
    return Config(problems=("crossed_barrel",), seeds=4, seed_batch=4, iterations=10, fit_steps=25)


def paper() -> Config:
    """The issue's acceptance scale: 4 problems x 4 arms x 20 seeds x 30 rounds (q = 1, 8192 candidates)."""
    return Config()


PRESETS = {"tiny": tiny(), "demo": demo(), "paper": paper()}
