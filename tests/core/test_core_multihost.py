"""Two processes x 4 fake CPU devices under jax.distributed (gloo) end where one process x 8 devices ends."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _final_params(*workdirs, devices=8):
    """The final parameters of each run folder's checkpoint, read in one fresh process (one jax start-up)."""
    script = f"""
import os, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count={devices}"
import jax, optax, numpy as np
from flax import nnx
from core import example
from core.checkpoint import Checkpointer
from core.train import init_train_state
c = example.PRESETS["tiny"]
_, params = nnx.split(example.MLP(c.features, c.hidden, rngs=nnx.Rngs(c.seed)), nnx.Param)
for workdir in {[str(w / "checkpoints") for w in workdirs]!r}:
    state, _ = Checkpointer(workdir, config=c).restore(init_train_state(params, optax.adam(c.lr),
                                                                        jax.random.key(c.seed)))
    print(json.dumps([np.asarray(x).tolist() for x in jax.tree.leaves(state.params)]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()[-len(workdirs):]
    return [[np.asarray(x) for x in json.loads(line)] for line in lines]


@pytest.mark.multiprocess
def test_two_processes_equal_one_process_with_eight_devices(tmp_path):
    base_env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "core.cli", "run", "regression", "--preset", "tiny"]
    single = subprocess.run(command + ["--workdir", str(tmp_path / "single")], capture_output=True, text=True,
                            env={**base_env, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    assert single.returncode == 0, single.stderr[-2000:]

    port = _free_port()
    procs = [subprocess.Popen(command + ["--workdir", str(tmp_path / "multi"), "--coordinator", f"127.0.0.1:{port}",
                                         "--num-processes", "2", "--process-id", str(i)],
                              env={**base_env, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    metrics = json.loads((tmp_path / "multi" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["devices"] == 8

    multi, single = _final_params(tmp_path / "multi", tmp_path / "single")
    assert len(multi) == len(single) > 0
    for a, b in zip(multi, single):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
