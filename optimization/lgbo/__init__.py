"""LGBO (paper 7): LLM preferences over a region lift the GP surrogate's mean in every Bayesian-optimisation
round. Public pieces: the numpyro GP (`optimization.gp`), the lift (`model`), LogEI/qLogEI (`acquisition`),
the answer parser and prompts (`prompts`), preference oracles (`oracles`), the ask/tell `Campaign`
(`campaign`, CLI `iclr26 bo`) and the simulated-oracle experiment (`train`, `configs`)."""

from core.registry import Experiment
from optimization.lgbo.campaign import Campaign, CampaignFileError
from optimization.lgbo.configs import PRESETS, Config
from optimization.lgbo.space import Categorical, Continuous, Ordinal, Space
from optimization.lgbo.train import train_and_evaluate

EXPERIMENT = Experiment(
    name="lgbo",
    paper=7,
    title="LGBO: LLM-preference-guided Bayesian optimisation (simulated oracles)",
    presets=PRESETS,
    run=train_and_evaluate,
    runtimes={"tiny": "~1 min, compile-bound (2.2 min measured under a load of 20)",
              "demo": "~1 min idle (4.4 min measured under a load of 20)",
              "paper": "hours on 2 shared cores (4 problems x 4 arms x 20 seeds x 30 rounds)"},
)

__all__ = ["Campaign", "CampaignFileError", "Categorical", "Config", "Continuous", "Ordinal", "EXPERIMENT", "PRESETS",
           "Space", "train_and_evaluate"]
