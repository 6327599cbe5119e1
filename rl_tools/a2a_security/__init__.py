"""A2ASecBench (paper 14): six attacks on agent-to-agent systems, with matched benign controls, run against a
naive and a hardened coordinator in an in-process lab built on the official A2A SDK (a2a-sdk 1.x)."""

import os

# a2a-sdk traces every call through OpenTelemetry when it is installed; the lab makes thousands of in-process
# calls and needs none of it (set the variable to "true" to trace anyway).
os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")

from core.registry import Experiment  # noqa: E402
from rl_tools.a2a_security.configs import PRESETS, Config  # noqa: E402
from rl_tools.a2a_security.train import evaluate, run  # noqa: E402

EXPERIMENT = Experiment(
    name="a2a_security", paper=14, title="A2ASecBench: attacks on agent-to-agent systems (a2a-sdk lab)",
    presets=PRESETS, run=run, runtimes={"tiny": "~30 s", "demo": "~30 s", "paper": "~15 min"})

__all__ = ["Config", "EXPERIMENT", "PRESETS", "evaluate", "run"]
