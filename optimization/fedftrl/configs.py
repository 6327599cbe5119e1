"""Configs and presets of the FedFTRL experiments.

Presets (each runs with `iclr26 run fedftrl --preset NAME --workdir DIR`):
  tiny               V=4, K=5, T=300, 4 seeds: seconds; the test smoke run.
  demo               V=9, K=10, T=1000, 16 seeds, stochastic, complete + grid: under a minute; regret PNGs.
  paper              the paper's synthetic setting (lr_scale SELECTED_LR_SCALE): T=3000, V=16, K=20, 50 runs,
                     complete / grid / RGG-0.5, FedFTRL, FedExp3, Gossip UCB, IND-FTRL, plus FedFTRL-eps for
                     eps in {0.1, 0.5, 5, 10}.
                     Expected: FedFTRL lowest final mean individual regret on every topology.
  adversarial_sweep  switching-best-arm instance, T=1e5, 10 seeds, complete graph, FedFTRL vs FedExp3;
                     log-log slope of regret vs T (theory: about 0.5 vs 0.67).
  constant_gap       the constant-gap switching instance (fixed best arm, gap 0.2, switching levels and ranks),
                     T=1e5, 10 seeds, complete graph: FedFTRL, FedExp3 (theory rates and the authors' default);
                     FedExp3's forced exploration costs order T^(2/3) here, FedFTRL's bound is sqrt(T).
  gpu                the constant-gap instance at T=1e6, 20 seeds, complete + grid (an accelerator; minutes).
  sensitivity        the paper's stochastic setting with FedFTRL's lr_scale swept over 8 ... 1/32 per topology.
"""

from __future__ import annotations

import dataclasses

from core.config import check

from .envs import SETTINGS
from .model import ALGORITHMS, AlgoConfig
from .networks import GOSSIP_RULES, TOPOLOGIES


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    # stochastic | corrupted | adversarial | constant_gap | ftl_trap | movielens
    setting: str = "stochastic"                  # bandit setting: how the arms' losses are produced
    T: int = 3000                                # horizon
    V: int = 16                                  # agents
    K: int = 20                                  # arms (ignored for movielens: the number of genres)
    seeds: int = 50                              # independent runs (new instance and randomness each)
    seed: int = 0
    topologies: tuple[str, ...] = ("complete", "grid", "rgg")   # communication graphs: complete, ring, grid, rgg
    algorithms: tuple[str, ...] = ALGORITHMS     # algorithms to run: fedftrl, fedexp3, fedexp3_default, gucb, ind_ftrl
    epsilons: tuple[float, ...] = (0.1, 0.5, 5.0, 10.0)   # FedFTRL-eps runs (C^P_t scaled by eps); () skips
    eps_topologies: tuple[str, ...] = ("grid",)   # graphs the FedFTRL-eps runs use
    lr_scales: tuple[float, ...] = ()            # FedFTRL-lr runs: algo.lr_scale replaced by each, every topology
    gossip: str = "max_degree"                   # gossip matrix rule: max_degree, metropolis, fastest
    rgg_radius: float = 0.5                      # random geometric graph: edge radius on the unit square
    rgg_seed: int = 0                            # random geometric graph: seed of its points
    noise_sd: float = 0.1                        # Gaussian feedback sd (variance 0.01), clipped to [0, 1]
    corruption_rounds: int = 300                 # setting "corrupted": losses flipped for t <= this
    gap: float = 0.2                             # "adversarial": gap of the current best arm; "constant_gap": its gap
    ratings_path: str = ""                       # setting "movielens": folder with ratings.csv + movies.csv
    missing_loss: float = 1.0                    # movielens: loss of a genre the user never rated
    slope_from: float = 0.1                      # slope fit over t in [slope_from * T, T] (log-spaced points)
    algo: AlgoConfig = AlgoConfig()

    def __post_init__(self):
        check(self.setting in SETTINGS, "setting", self.setting, f"one of {SETTINGS}")
        check(self.T >= 2, "T", self.T, "an integer >= 2")
        check(self.V >= 1, "V", self.V, "an integer >= 1")
        check(self.K >= 2, "K", self.K, "an integer >= 2 (a bandit needs two arms)")
        check(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        check(len(self.topologies) >= 1 and all(t in TOPOLOGIES for t in self.topologies), "topologies",
              self.topologies, f"a non-empty tuple of {TOPOLOGIES}")
        check(all(t in TOPOLOGIES for t in self.eps_topologies), "eps_topologies", self.eps_topologies,
              f"a tuple of {TOPOLOGIES}")
        check(len(self.algorithms) >= 1 and all(a in ALGORITHMS for a in self.algorithms), "algorithms",
              self.algorithms, f"a non-empty tuple of {ALGORITHMS}")
        check(all(e > 0 for e in self.epsilons), "epsilons", self.epsilons, "positive values")
        check(all(c > 0 for c in self.lr_scales), "lr_scales", self.lr_scales, "positive values")
        check(self.gossip in GOSSIP_RULES, "gossip", self.gossip, f"one of {GOSSIP_RULES}")
        check(self.rgg_radius > 0, "rgg_radius", self.rgg_radius, "> 0")
        check(self.noise_sd >= 0, "noise_sd", self.noise_sd, ">= 0")
        check(0 < self.slope_from < 1, "slope_from", self.slope_from, "in (0, 1)")
        check(self.setting != "movielens" or bool(self.ratings_path), "ratings_path", self.ratings_path,
              "a folder with MovieLens ratings.csv and movies.csv when setting='movielens'")


SELECTED_LR_SCALE = 0.03125
"""lr_scale c of 1/gamma_t = c V sqrt(C t / log K) selected by benchmarks/fedftrl.py on separate seeds (base seed
1000) from {8, 2, 1/2, 1/8, 1/32} in the paper setting (the notes' c = 8 plays almost uniformly at T = 3000);
the paper, demo, adversarial_sweep, constant_gap and gpu presets use it.  AlgoConfig's default stays the notes' 8."""


def tiny() -> Config:
    """`iclr26 run fedftrl --preset tiny`: seconds on a CPU."""
    return Config(T=300, V=4, K=5, seeds=4, topologies=("complete", "ring"), epsilons=(0.5, 5.0),
                  eps_topologies=("ring",))


def demo() -> Config:
    """`iclr26 run fedftrl --preset demo`: ~30 s on 2 CPU cores; regret curves per topology (PNG)."""
    return Config(T=1000, V=9, K=10, seeds=16, topologies=("complete", "grid"), epsilons=(),
                  algo=AlgoConfig(lr_scale=SELECTED_LR_SCALE))


def paper() -> Config:
    """The paper's synthetic setting (T=3000, V=16, K=20, 50 runs, three topologies, eps sweep), selected lr_scale."""
    return Config(algo=AlgoConfig(lr_scale=SELECTED_LR_SCALE))


def adversarial_sweep() -> Config:
    """Switching-best-arm instance up to T=1e5; regret-vs-T log-log slopes of FedFTRL and FedExp3."""
    return Config(setting="adversarial", T=100_000, seeds=10, topologies=("complete",),
                  algorithms=("fedftrl", "fedexp3"), epsilons=(), slope_from=0.01,
                  algo=AlgoConfig(lr_scale=SELECTED_LR_SCALE))


def constant_gap() -> Config:
    """Constant-gap switching instance up to T=1e5: regret-vs-T slopes of FedFTRL and both FedExp3 schedules."""
    return Config(setting="constant_gap", T=100_000, seeds=10, topologies=("complete",),
                  algorithms=("fedftrl", "fedexp3", "fedexp3_default"), epsilons=(), slope_from=0.01,
                  algo=AlgoConfig(lr_scale=SELECTED_LR_SCALE))


def gpu() -> Config:
    """The constant-gap instance at T=1e6 (the issue's accelerator scale): 20 seeds, complete and grid graphs."""
    return dataclasses.replace(constant_gap(), T=1_000_000, seeds=20, topologies=("complete", "grid"))


def sensitivity() -> Config:
    """The paper's stochastic setting with FedFTRL alone, lr_scale swept (the notes' 8 down to 1/32)."""
    return Config(algorithms=("fedftrl",), epsilons=(), lr_scales=(2.0, 0.5, 0.125, 0.03125))   # + the default 8


PRESETS = {"tiny": tiny(), "demo": demo(), "paper": paper(), "adversarial_sweep": adversarial_sweep(),
           "constant_gap": constant_gap(), "gpu": gpu(), "sensitivity": sensitivity()}
