"""DecAlign (paper 19): decoupled hierarchical cross-modal alignment for multimodal sentiment analysis."""

from core.registry import Experiment

from .configs import PRESETS, VARIANTS, Config
from .train import run, train_and_evaluate

EXPERIMENT = Experiment(
    name="decalign",
    paper=19,
    title="DecAlign: hierarchical cross-modal alignment for decoupled multimodal representation learning",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~30 s CPU time (131 s wall on the shared, overloaded 2-core machine)",
              "demo": "~20 s wall on 2 idle CPU cores with a cold compile cache (one seed)",
              "paper": "GPU; needs the user's MMSA MOSI pickle",
              "official": "GPU; needs the user's MMSA MOSI pickle (the official code's variants)"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "VARIANTS", "run", "train_and_evaluate"]
