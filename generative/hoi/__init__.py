"""RMD (paper 13): relative-movement-dynamics plans between human parts and object parts, compiled into one
jitted reward and goal-state tracker for RL, with an offline template planner standing in for the VLM, an
OpenAI-compatible LLM planner, a pure-JAX 2D scene, an MJX scene (optional extra `hoi`), PPO on core.rl, and
the hand-engineered and chain-of-contacts comparison rewards. See README.md."""

from core.registry import Experiment
from generative.hoi.configs import HOIConfig, presets


def _run(config, workdir):
    from generative.hoi.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="hoi",
    paper=13,
    title="RMD: compiled relative-movement-dynamics rewards vs hand-engineered and chain-of-contacts (PPO, 2D scene)",
    presets=presets(),
    run=_run,
    in_demo=False,  # minutes of PPO on 2 cores: run it by name
    runtimes={"tiny": "~1 min on 2 CPU cores (mostly the compile)", "demo": "~6 min on 2 loaded CPU cores",
              "paper": "GPU: 4096 envs, ~100 M env steps per run"},
)

__all__ = ["EXPERIMENT", "HOIConfig", "presets"]
