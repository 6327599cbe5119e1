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
    # measured after issue 39 on the 2 shared cores at a load average of about 5 (first run, compiles included)
    runtimes={"tiny": "not timed idle (the pipeline test runs it)",
              "demo": "~1-1.5 min idle with a cold compile cache (two readings, one defence; most of it compiling)",
              "bench": "see wall_seconds in benchmarks/results/deepfake_attack.json (3 seeds, loaded machine)",
              "paper": "hours on CPU", "faces64": "GPU; not run"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run", "train_and_evaluate"]
