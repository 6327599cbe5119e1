"""Test session set-up: 8 fake CPU devices (set before jax is imported anywhere), shared fixtures."""

import os

os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    + ["--xla_force_host_platform_device_count=8"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
# `iclr26 run` / `demo` turn on JAX's persistent compilation cache; tests stay hermetic (tests of the cache
# point it at their own folder)
os.environ["ICLR26_COMPILE_CACHE"] = "off"

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def devices():
    assert jax.device_count() == 8, "tests expect 8 fake CPU devices (conftest sets XLA_FLAGS)"
    return jax.devices()
