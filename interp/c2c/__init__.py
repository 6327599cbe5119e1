"""C2C (paper 17): cache-to-cache communication between two language models of different shapes. A fuser per
receiver layer projects the sharer's KV cache into the receiver's, gated per layer. See README.md."""

from core.registry import Experiment
from interp.c2c.configs import C2CConfig, FuserConfig, presets


def _run(config, workdir):
    from interp.c2c.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="c2c",
    paper=17,
    title="C2C: a receiver LM reads a sharer LM's KV cache through a trained fuser (knowledge-split world)",
    presets=presets(),
    run=_run,
    in_demo=False,  # minutes on 2 cores: `make demo` stays a quick tour (issue #45); run it by name
    runtimes={"tiny": "1 CPU-minute (6.5 min wall on the shared, loaded 2-core machine)",
              "demo": "~2 min on 2 idle CPU cores with a cold compile cache (120 s measured, 49 s of it compiling)",
              "paper": "GPU, local Qwen3-0.6B + Qwen2.5-0.5B-Instruct folders (not run here)"},
)

__all__ = ["C2CConfig", "EXPERIMENT", "FuserConfig", "presets"]
