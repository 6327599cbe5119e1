"""TRM (paper 2): a Tool-call Reward Model scoring every tool call, with refined PPO credit assignment and
turn-level GRPO advantages, measured against outcome-only RL in ToolWorld, where every call label is exact.
See README.md."""

from core.registry import Experiment
from rl_tools.trm.configs import TRMConfig, presets


def _run(config, workdir):
    from rl_tools.trm.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="trm",
    paper=2,
    title=("TRM: a tool-call reward model with turn-level GRPO and refined PPO credit, "
           "in an exactly labelled tool world"),
    presets=presets(),
    run=_run,
    in_demo=False,  # minutes on 2 cores: `make demo` stays a quick tour (issue #45); run it by name
    runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "a few minutes on 2 CPU cores",
              "paper": "hours on 2 CPU cores (GPU advised)"},
)

__all__ = ["TRMConfig", "EXPERIMENT", "presets"]
