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
    # measured on the idle 2-core machine (2026-11-30); compiles are about half of the demo, and the attack
    # trains in a background thread while the generator zoo trains
    runtimes={"tiny": "not timed idle (the pipeline test runs it)", "demo": "2.5 min (148 s, first run, compiles included)",
              "bench": "46 min (the committed benchmark)", "paper": "hours on CPU"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run", "train_and_evaluate"]
