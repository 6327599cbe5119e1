"""BalanceHead (paper 3): a tri-plane 3D-aware full-head GAN with camera vs view-invariant semantic conditioning."""

from core.registry import Experiment

from .configs import MODES, PRESETS, Config
from .train import run, train_and_evaluate

EXPERIMENT = Experiment(
    name="headgan",
    paper=3,
    title="Condition Matters in Full-head 3D GANs (BalanceHead): semantic vs camera conditioning, ViCiCo",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~6 min wall on the shared 2-core machine at load ~13 (the smoke test); about 1 min idle",
              "demo": "~50 s on 2 idle CPU cores with a cold compile cache (16 px, 2 arms, 16 steps)",
              "bench": "~16 min per seed at load ~15 on the 2-core machine (8 arms, 60 steps, 16 px; "
                       "benchmarks/headgan.py trains 3 seeds)",
              "gpu": "GPU (64 px, 20k steps of batch 32 per arm; unrun)",
              "paper": "GPU"},
)

__all__ = ["EXPERIMENT", "Config", "MODES", "PRESETS", "run", "train_and_evaluate"]
