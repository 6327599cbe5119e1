"""PhaseFormer (paper 10): phase tokens and cross-phase routing for long-term forecasting, with SparseTSF and
DLinear baselines on the same data protocol (``forecasting.data``)."""

from core.registry import Experiment
from forecasting.phaseformer.configs import Config, presets
from forecasting.phaseformer.model import DLinear, PhaseFormer, SparseTSF, count_params
from forecasting.phaseformer.train import train_and_evaluate

EXPERIMENT = Experiment(
    name="phaseformer",
    paper=10,
    title="PhaseFormer: From Patches to Phases for Efficient and Effective Time Series Forecasting",
    presets=presets(),
    run=train_and_evaluate,
    demo_preset="demo",
    runtimes={"tiny": "~10 s on 2 CPU cores", "demo": "~1 min on 2 shared CPU cores",
              "etth1_96": "~1-3 min on 2 CPU cores", "ettm1_96": "~5-10 min on 2 CPU cores"},
)

__all__ = ["EXPERIMENT", "Config", "DLinear", "PhaseFormer", "SparseTSF", "count_params", "presets",
           "train_and_evaluate"]
