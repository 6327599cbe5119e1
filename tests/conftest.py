"""Test session set-up: 8 fake CPU devices (set before jax is imported anywhere), shared fixtures."""

import os

_flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
          if not f.startswith("--xla_force_host_platform_device_count")]
# Tests run a few steps of tiny models, so compiling is most of their time: XLA:CPU's optimisation passes off
# (bit_e2e's tests 105 -> 78 s, deduce + hoi's 122 -> 82 s on 2 cores). Values change only by rounding; a test
# that compares two computations compiles both this way. XLA_FLAGS with an optimisation level of its own wins.
if not any(f.startswith("--xla_backend_optimization_level") for f in _flags):
    _flags.append("--xla_backend_optimization_level=0")
os.environ["XLA_FLAGS"] = " ".join(_flags + ["--xla_force_host_platform_device_count=8"])
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")
# `iclr26 run` / `demo` turn on JAX's persistent compilation cache; tests stay hermetic (tests of the cache
# point it at their own folder)
os.environ["ICLR26_COMPILE_CACHE"] = "off"

import gc  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program when a test module ends. Each XLA:CPU executable holds ~5 memory mappings
    and jit caches keep them for the process' life; a worker running half the suite reached 61k of the kernel's
    65,530 (vm.max_map_count), and the next compile died with SIGSEGV inside XLA (CI's stop 57, and here)."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture(scope="session")
def devices():
    assert jax.device_count() == 8, "tests expect 8 fake CPU devices (conftest sets XLA_FLAGS)"
    return jax.devices()


@pytest.fixture
def compile_cache(tmp_path):
    """JAX's persistent compilation cache in this test's own folder (previous settings restored after): a rerun
    of a trainer loads the executables of programs equal to an earlier run's instead of compiling them again."""
    from core.compilation import persistent_cache
    with persistent_cache(tmp_path / "xla") as folder:
        yield folder


@pytest.fixture(scope="module")
def module_compile_cache(tmp_path_factory):
    """The same, shared by the tests of one module (they train the same small preset again and again)."""
    from core.compilation import persistent_cache
    with persistent_cache(tmp_path_factory.mktemp("xla")) as folder:
        yield folder
