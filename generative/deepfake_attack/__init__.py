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
    # the demo measured alone on the idle 2 cores with the compile cache off (2026-12-06: 46 s, 36 s compiling)
    runtimes={"tiny": "not timed idle (the pipeline test runs it)",
              "demo": "~45 s idle with a cold compile cache (three generators, black-box only, two readings, one "
                      "defence; mostly compiling)",
              "bench": "see wall_seconds in benchmarks/results/deepfake_attack.json (3 seeds, idle machine)",
              "paper": "hours on CPU", "faces64": "GPU; not run"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run", "train_and_evaluate"]
