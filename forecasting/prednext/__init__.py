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
    runtimes={"tiny": "~30 s on 2 CPU cores", "demo": "~1-2 min on 2 CPU cores",
              "bench_simsiam": "~15 min on 2 CPU cores", "bench_simclr": "~15 min on 2 CPU cores",
              "ucf101": "GPU; needs the user's UCF101 frames and split files"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "VARIANTS", "run", "train_and_evaluate"]
