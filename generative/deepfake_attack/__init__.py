"""Multiplicative vs additive trace-removal attacks on DeepFake attribution (paper 9), on MNIST digits.

The attack is our reconstruction of an unpublished formulation; generators, attribution models, defences and
the protocol are standard.
"""

from core.registry import Experiment

from .configs import PRESETS, Config
from .train import run, train_and_evaluate

EXPERIMENT = Experiment(
    name="deepfake_attack",
    paper=9,
    title="Multiplicative attack on DeepFake attribution (our reconstruction), MNIST generator zoo",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~1-2 min on 2 CPU cores (compiling dominates)", "demo": "~3 min on 2 CPU cores",
              "bench": "< 60 min on 2 CPU cores", "paper": "hours on CPU"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run", "train_and_evaluate"]
