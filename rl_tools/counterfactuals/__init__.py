"""Executable counterfactuals (paper 6): task generator, sandboxed executor and verifier, evaluation harness,
and the interventional-vs-counterfactual gap of a small decoder trained here. See README.md."""

from core.registry import Experiment
from rl_tools.counterfactuals.configs import CFConfig, presets


def _run(config, workdir):
    from rl_tools.counterfactuals.train import run
    return run(config, workdir)


EXPERIMENT = Experiment(
    name="counterfactuals",
    paper=6,
    title="Executable counterfactuals: interventional vs counterfactual accuracy of a small decoder",
    presets=presets(),
    run=_run,
    runtimes={"tiny": "~30 s on 2 CPU cores", "demo": "~2 min on 2 CPU cores", "paper": "hours on 2 CPU cores"},
)

__all__ = ["CFConfig", "EXPERIMENT", "presets"]
