"""The process side of `iclr26 demo --jobs N`: each demo runs in a process forked from one server that has
imported the libraries every demo needs (about 2.5 CPU-s per process on 2 cores: JAX, Flax, Optax, Orbax,
SciPy, matplotlib), so N demos pay for those imports once instead of once each. The server imports only; it
never starts JAX's backend (no device, no XLA thread), so each forked demo starts its own, as a fresh process
would. Nothing here is for direct use: `core.cli` starts the server through `multiprocessing`'s forkserver.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # demos only write PNG files

import flax.nnx  # noqa: E402, F401
import jax  # noqa: E402, F401
import jax.numpy  # noqa: E402, F401
import matplotlib.pyplot  # noqa: E402, F401
import numpy  # noqa: E402, F401
import optax  # noqa: E402, F401
import orbax.checkpoint  # noqa: E402, F401
import scipy.linalg  # noqa: E402, F401
import scipy.stats  # noqa: E402, F401
import tqdm  # noqa: E402, F401

import core.cli  # noqa: E402, F401
import core.results  # noqa: E402, F401
import core.train  # noqa: E402, F401


def run_demo(argv: Sequence[str], log_path: str) -> None:
    """`iclr26 ARGV` with stdout and stderr in `log_path`; the process exits with the CLI's status."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own streams)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    try:
        code = core.cli.main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # a bug in a demo: its traceback goes to the log, as `python -m core.cli` would print
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)  # no interpreter teardown: the demo's outputs are written, and the parent reads the status
