"""Brain-to-text decoding. Paper 1, BIT: a cross-species pretrained neural encoder and the phoneme-CTC + n-gram
cascade, on a simulator that writes the real Brain-to-Text '24 / '25 file formats."""

from core.registry import Experiment

from .configs import PRESETS, Config
from .e2e.configs import PRESETS as E2E_PRESETS
from .train import run


def _run_e2e(config, workdir):
    from bit.e2e.train import run as run_e2e  # imports the LM stack only when it runs

    return run_e2e(config, workdir)


EXPERIMENT = [Experiment(
    name="bit",
    paper=1,
    title="BIT: a cross-species neural foundation model for end-to-end speech decoding (n-gram cascade)",
    presets=PRESETS,
    run=run,
    runtimes={"tiny": "~1 min on 2 shared CPU cores", "demo": "~40 s on 2 idle CPU cores (cold compile cache)",
              "cpu": "~15 min on 2 CPU cores",
              "paper": "GPU; simulated sessions at the T15 scale, or the real ones with --set data.data_dir=..."},
), Experiment(
    name="bit_e2e",
    paper=1,
    title="BIT end to end: the pretrained encoder's tokens -> projector -> LoRA LM with InfoNCE alignment",
    presets=E2E_PRESETS,
    run=_run_e2e,
    in_demo=False,  # five minutes on 2 cores (speech-LM pretraining, then end to end): run it by name
    runtimes={"tiny": "~1-2 min on 2 CPU cores", "demo": "~5 min on 2 CPU cores",
              "cpu": "benchmark base (benchmarks/bit_e2e.py)", "paper": "GPU; a local Qwen2.5-1.5B folder"},
)]

__all__ = ["EXPERIMENT", "Config", "PRESETS", "run"]
