"""Scale analysis of feature learning (paper 15, "Mitigating the Curse of Detail", ICLR 2026).

The pattern-table calculator (`theory`), a Langevin posterior sampler vmapped over seeds and sample sizes
(`sample`), order parameters (`order_params`) and the P*-finding sweeps (`train`).
"""

from core.registry import Experiment
from interp.scale_analysis import configs, theory
from interp.scale_analysis.configs import Config, SamplerConfig
from interp.scale_analysis.theory import predict
from interp.scale_analysis.train import run

EXPERIMENT = Experiment(
    name="scale-analysis",
    paper=15,
    title="Scale analysis of feature learning: P* and patterns of 2- and 3-layer erf networks on He3",
    presets=configs.PRESETS,
    run=run,
    demo_preset="demo",
    runtimes={"tiny": "~20 s on 2 CPU cores", "demo": "~1 min on 2 CPU cores",
              "paper": "11 min on 2 idle CPU cores (674 s measured)", "gpu": "accelerator only"},
)

__all__ = ["EXPERIMENT", "Config", "SamplerConfig", "predict", "run", "theory"]
