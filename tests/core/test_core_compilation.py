"""core.compilation: the persistent compilation cache the CLI turns on, and the compile-time accounting."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from core import cli, compilation

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, expected", [("off", None), ("OFF", None), ("0", None), ("", None),
                                             ("/tmp/some-cache", pathlib.Path("/tmp/some-cache"))])
def test_the_environment_variable_names_the_folder_or_turns_the_cache_off(monkeypatch, value, expected):
    monkeypatch.setenv(compilation.ENV_VAR, value)
    assert compilation.default_cache_dir() == expected
    if expected is None:
        assert compilation.enable_persistent_cache() is None


def test_default_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation.default_cache_dir() == tmp_path / "iclr26-jax" / "xla"


def test_timer_counts_a_compile_and_not_a_cached_call():
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + x.sum())
    x = jnp.arange(7.0)
    with compilation.CompileTimer() as timer:
        f(x).block_until_ready()
    assert timer.compiles == 1 and timer.compile_seconds > 0
    with compilation.CompileTimer() as again:
        f(x).block_until_ready()  # the in-memory cache: nothing is traced or compiled
    assert again.compiles == 0 and again.compile_seconds == 0
    assert set(timer.summary()) == {"compile_seconds", "backend_compiles", "compile_cache_hits",
                                    "compile_cache_misses"}


_PROGRAM = """
import json, sys
from core import compilation
folder = compilation.enable_persistent_cache(sys.argv[1])
import jax, jax.numpy as jnp
with compilation.CompileTimer() as timer:
    jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((16, 16))).block_until_ready()
print(json.dumps({"folder": str(folder), **timer.summary()}))
"""


def test_a_second_process_loads_the_first_ones_executables_from_the_cache(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _PROGRAM, str(tmp_path / "cache")], env=env,
                                      cwd=ROOT, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    first, second = runs
    assert first["compile_cache_misses"] >= 1 and first["compile_cache_hits"] == 0
    assert second["compile_cache_hits"] == first["compile_cache_misses"] and second["compile_cache_misses"] == 0
    assert any((tmp_path / "cache").iterdir())


def test_run_metrics_report_the_compile_seconds_and_the_flag_turns_the_cache_off(capsys, tmp_path, monkeypatch):
    enabled = []
    monkeypatch.setattr(compilation, "enable_persistent_cache", lambda *a, **k: enabled.append(1))
    assert cli.main(["run", "regression", "--preset", "tiny", "--no-compile-cache", "--set", "steps=20",
                     "--workdir", str(tmp_path)]) == 0
    assert enabled == []
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["compile_seconds"] >= 0 and metrics["backend_compiles"] >= 0
    assert "s of it compiling)" in capsys.readouterr().out
    assert cli.main(["run", "regression", "--preset", "tiny", "--set", "steps=20",
                     "--workdir", str(tmp_path)]) == 0
    assert enabled == [1]


def test_persistent_cache_block_writes_its_folder_and_restores_the_settings(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    with compilation.persistent_cache(tmp_path / "xla") as folder:
        assert jax.config.jax_compilation_cache_dir == str(folder)
        jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(5)).block_until_ready()
    assert any(folder.iterdir()), "the block's compile is written to its folder"
    assert jax.config.jax_compilation_cache_dir == before


def test_a_run_once_program_computes_what_eager_initialisation_does():
    from flax import nnx

    def init(key):  # an initialiser: what jit_run_once is for
        return nnx.split(nnx.Sequential(nnx.Conv(3, 8, (3, 3), rngs=nnx.Rngs(params=key)),
                                        nnx.Linear(8, 4, rngs=nnx.Rngs(params=jax.random.fold_in(key, 1)))),
                         nnx.Param)[1]

    key = jax.random.key(3)
    eager = init(key)  # the reference: every initialiser op dispatched on its own, no whole-program compile
    for a, b in zip(jax.tree.leaves(compilation.jit_run_once(init)(key)), jax.tree.leaves(eager)):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert float(jnp.max(jnp.abs(a - b))) <= 1e-6 * float(jnp.max(jnp.abs(b)))


def test_jit_run_once_hands_its_options_to_the_compiler(monkeypatch):
    seen = {}
    real_jit = jax.jit

    def spy(fn, **kwargs):
        seen.update(kwargs)
        return real_jit(fn, **kwargs)

    monkeypatch.setattr(jax, "jit", spy)
    assert float(compilation.jit_run_once(lambda x: x * 2.0, donate_argnums=())(jnp.float32(3.0))) == 6.0
    assert seen["compiler_options"] == {"xla_backend_optimization_level": 0,
                                        "xla_llvm_disable_expensive_passes": True}
    assert seen["donate_argnums"] == ()


@pytest.mark.parametrize("platforms, expected", [("cuda", 1), ("tpu", 1), ("cpu", None)])
def test_the_demo_runs_several_at_once_only_on_cpu(monkeypatch, platforms, expected):
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    assert cli.default_demo_jobs() == (expected or max(1, min(4, os.cpu_count() or 1)))


def _entry(folder, key, size, when):
    path = folder / f"{key}-cache"
    path.write_bytes(b"x" * size)
    (folder / f"{key}-atime").write_bytes(b"t" * 8)
    os.utime(path, (when, when))
    return path


def test_trim_removes_the_least_recently_used_entries_down_to_the_kept_fraction(tmp_path):
    for i, key in enumerate("abcdef"):  # a is the oldest, f the newest; 6 x 100 bytes
        _entry(tmp_path, key, 100, 1_000_000 + 10 * i)
    (tmp_path / "unrelated.txt").write_bytes(b"y" * 10_000)  # not an entry: never counted, never removed
    assert compilation.trim_cache(tmp_path, max_bytes=600) == 0  # at the cap: nothing to do
    assert compilation.trim_cache(tmp_path, max_bytes=500, keep_fraction=0.8) == 2  # 600 -> 400 <= 0.8 * 500
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["c-atime", "c-cache", "d-atime", "d-cache", "e-atime", "e-cache", "f-atime", "f-cache",
                    "unrelated.txt"]
    os.utime(tmp_path / "c-cache", (2_000_000, 1_000_020))  # c read recently (access time): now the newest
    assert compilation.trim_cache(tmp_path, max_bytes=300, keep_fraction=1.0) == 1
    assert not (tmp_path / "d-cache").exists() and (tmp_path / "c-cache").exists()


def test_enabling_trims_once_and_turns_off_jax_per_write_eviction(tmp_path, monkeypatch):
    """JAX's own cap scans the whole folder on every write (quadratic over a cold run): it must stay off."""
    for i in range(4):
        _entry(tmp_path, f"k{i}", 1000, 1_000_000 + i)
    before = {name: getattr(jax.config, name) for name in compilation._CACHE_OPTIONS}
    try:
        assert compilation.enable_persistent_cache(tmp_path, max_bytes=2500) == tmp_path
        assert jax.config.jax_compilation_cache_max_size == -1
        assert sorted(p.name for p in tmp_path.glob("*-cache")) == ["k2-cache", "k3-cache"]  # 4000 -> 2000 bytes
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
