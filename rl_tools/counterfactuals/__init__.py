"""Executable counterfactuals (paper 6): task generator, sandboxed executor and verifier, evaluation harness,
and the interventional-vs-counterfactual gap of a small decoder trained here. See README.md."""

from core.registry import Experiment
from rl_tools.counterfactuals.configs import CFConfig, presets, train_presets


def _run(config, workdir):
    from rl_tools.counterfactuals.train import run
    return run(config, workdir)


def _run_train(config, workdir):
    from rl_tools.counterfactuals.sft_rl import run
    return run(config, workdir)


_TRAIN = train_presets()
EXPERIMENT = [
    Experiment(
        name="counterfactuals",
        paper=6,
        title="Executable counterfactuals: interventional vs counterfactual accuracy of a small decoder",
        presets=presets(),
        run=_run,
        runtimes={"tiny": "~30 s on 2 CPU cores", "demo": "~40-60 s on 2 CPU cores", "paper": "hours on 2 CPU cores"},
    ),
    Experiment(
        name="cf_sft",
        paper=6,
        title="Executable counterfactuals: SFT on enumerating teacher traces from an execution-only base",
        presets=_TRAIN["sft"],
        run=_run_train,
        runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "under 10 min on 2 CPU cores", "paper": "GPU"},
        in_demo=False,
    ),
    Experiment(
        name="cf_rl",
        paper=6,
        title="Executable counterfactuals: GRPO with an exact-match set reward from an execution-only base",
        presets=_TRAIN["rl"],
        run=_run_train,
        runtimes={"tiny": "~1 min on 2 CPU cores", "demo": "under 10 min on 2 CPU cores", "paper": "GPU"},
        in_demo=False,
    ),
]

__all__ = ["CFConfig", "EXPERIMENT", "presets", "train_presets"]
