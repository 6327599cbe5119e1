"""Brain-to-text decoding. Paper 1, BIT: a cross-species pretrained neural encoder and the phoneme-CTC + n-gram
cascade, on a simulator that writes the real Brain-to-Text '24 / '25 file formats."""

from core.registry import Experiment

from .configs import PRESETS, Config
from .train import run

EXPERIMENT = Experiment(
    name="bit",
    paper=1,
    title="BIT: a cross-species neural foundation model for end-to-end speech decoding (n-gram cascade)",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~1 min on 2 shared CPU cores", "demo": "~2-3 min on 2 shared CPU cores",
              "cpu": "~15 min on 2 CPU cores", "paper": "GPU; the real Dryad sessions"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run"]
