"""DEDUCE (ICLR 2026, paper 16): detect negative transfer, decide, unlearn (LUM) and reclaim capacity (GUM),
on top of ER, DER++ and online EWC, in a vmapped continual-learning trainer."""

from core.registry import Experiment
from optimization.deduce.configs import ARMS, PRESETS, Config, DataConfig, DeduceConfig, ModelConfig, TrainConfig
from optimization.deduce.train import aggregate, make_runs, run, run_stream

EXPERIMENT = Experiment(
    name="deduce", paper=16,
    title="DEDUCE: detect, decide, unlearn: transfer-aware continual learning (ER / DER++ + LUM + GUM)",
    presets=PRESETS, run=run,
    runtimes={"tiny": "~1 min on 2 CPU cores (compile-bound)", "demo": "~1-2 min on 2 CPU cores (compile-bound)",
              "split_mnist": "~15-30 min on 2 CPU cores", "split_fmnist": "~1 h on 2 CPU cores",
              "perm_mnist": "~1 h on 2 CPU cores", "cifar100": "GPU; needs the user's tfds cifar100",
              "gpu": "GPU, hours (ResNet-18, 50 epochs x 10 tasks); needs CIFAR-100 in data.data_dir"})

__all__ = ["ARMS", "PRESETS", "Config", "DataConfig", "DeduceConfig", "ModelConfig", "TrainConfig",
           "EXPERIMENT", "aggregate", "make_runs", "run", "run_stream"]
