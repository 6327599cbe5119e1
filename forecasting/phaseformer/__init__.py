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
    runtimes={"tiny": "~30 s CPU time", "demo": "80 s CPU time (338 s wall on a heavily shared 2-core machine)",
              "etth1_96": "~10-20 min on a shared 2-core CPU", "ettm1_96": "an hour or more on a shared 2-core CPU",
              # epoch times from benchmarks/results/phaseformer_efficiency.json (2 loaded cores); up to 30 epochs
              "weather_96": "~760 s per epoch on 2 loaded CPU cores (GPU advised)",
              "electricity_96": "~3,600 s per epoch on 2 loaded CPU cores (GPU advised)",
              "traffic_96": "~7,500 s per epoch on 2 loaded CPU cores (GPU advised)",
              "traffic_720": "~13,400 s per epoch on 2 loaded CPU cores (D = 128; GPU advised)"},
)

__all__ = ["EXPERIMENT", "Config", "DLinear", "PhaseFormer", "SparseTSF", "count_params", "presets",
           "train_and_evaluate"]
