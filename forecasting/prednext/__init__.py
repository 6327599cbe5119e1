"""PredNext (paper 11): cross-view temporal prediction for self-supervised spiking video networks."""

from core.registry import Experiment

from .configs import PRESETS, VARIANTS, Config
from .train import run, train_and_evaluate

EXPERIMENT = Experiment(
    name="prednext",
    paper=11,
    title="Explicit cross-view temporal prediction for unsupervised learning in spiking neural networks (PredNext)",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~40 s wall (compile-bound) on the shared 2-core machine",
              "demo": "~40 s on 2 idle CPU cores with a cold compile cache (half of it compiling)",
              "bench_simsiam": "~25 min on 2 CPU cores (9 runs x 150 steps)",
              "bench_simclr": "~25 min on 2 CPU cores (9 runs x 150 steps)",
              "bench_moco": "~25 min on 2 CPU cores (9 runs x 150 steps)",
              "bench_order": "~25 min on 2 CPU cores (9 runs x 150 steps)",
              "ucf101": "GPU; needs the user's UCF101 frames and split files"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "VARIANTS", "run", "train_and_evaluate"]
