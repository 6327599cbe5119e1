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
    # measured on the idle 2-core machine (2026-11-30); ~30 XLA compiles take about half of the demo
    runtimes={"tiny": "not timed idle (the pipeline test runs it)", "demo": "5 min (first run, compiles included)",
              "bench": "46 min (the committed benchmark)", "paper": "hours on CPU"},
    in_demo=False,  # six generators + four attributors + attacks: far longer than the combined demo's others
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run", "train_and_evaluate"]
