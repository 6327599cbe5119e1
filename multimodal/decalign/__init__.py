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
    runtimes={"tiny": "~20 s on 2 CPU cores", "demo": "~1 min on 2 CPU cores",
              "paper": "GPU; needs the user's MMSA MOSI pickle"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "VARIANTS", "run", "train_and_evaluate"]
