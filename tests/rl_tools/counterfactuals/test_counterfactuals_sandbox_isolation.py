"""The sandbox's process isolation (issue 46, item 5): workers are spawned (no Python code runs between fork
and exec, so a multithreaded JAX parent cannot deadlock), untrusted source is parsed only inside the worker
(a huge or deeply nested program costs its job, never the parent), and a root parent that cannot switch
the worker to `nobody` (so RLIMIT_NPROC, the no-fork limit, would not bind) refuses to run programs."""

import ast
import os
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import pytest

from core.config import BadInputError
from rl_tools.counterfactuals import sandbox as sandbox_lib
from rl_tools.counterfactuals.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    SandboxViolation,
    validate_source,
)

OK = "def f(x):\n    r = random.randint(1, 9)\n    return (x - r) % 7\n"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(cpu_seconds=1.0, memory_mb=256)) as sb:
        yield sb


def test_workers_start_without_python_code_between_fork_and_exec(monkeypatch):
    seen = []
    real = subprocess.Popen

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    sandbox_lib.active_layers()  # the kernel probe (once per process) is done before the spy
    monkeypatch.setattr(sandbox_lib.subprocess, "Popen", spy)
    # a parent with JAX's threads running and another Python thread busy while the worker starts
    stop = threading.Event()
    busy = threading.Thread(target=lambda: [jnp.sum(jnp.ones(64)).block_until_ready()
                                            for _ in iter(lambda: stop.is_set(), True)], daemon=True)
    busy.start()
    try:
        with Sandbox(SandboxConfig(cpu_seconds=1.0, memory_mb=256)) as sb:
            assert sb.run(OK, [(3, [5])]).values == (5,)
            limits = sb.probe()["limits"]
    finally:
        stop.set()
        busy.join(timeout=10)
    assert len(seen) == 1 and seen[0].get("preexec_fn") is None, seen
    assert seen[0]["start_new_session"] and seen[0]["env"] == {"TMPDIR": seen[0]["cwd"]}  # nothing else
    assert not os.access(seen[0]["cwd"], os.W_OK) or os.geteuid() == 0  # a read-only folder (root writes anyway)
    # the limits the child used to get from preexec_fn are set by the worker itself before any job
    assert limits["RLIMIT_AS"] == 256 * 2 ** 20 and limits["RLIMIT_NPROC"] == 0 and limits["RLIMIT_NOFILE"] == 3
    assert jax.device_count() >= 1  # JAX was initialised in this (multithreaded) parent


def test_the_parent_never_parses_untrusted_source(sandbox, monkeypatch):
    def no_parse(*args, **kwargs):
        raise AssertionError("the parent parsed untrusted source")

    monkeypatch.setattr(ast, "parse", no_parse)
    assert sandbox.run(OK, [(4, [2])]).values == (2,)
    res = sandbox.run("import os\ndef f(x):\n    return 1\n", [(1, [1])])
    assert res.error == "SandboxViolation: import of 'os' at line 1: imports are not allowed"
    with pytest.raises(SandboxViolation, match="lambda at line 1"):
        validate_source("f = lambda x: x\n", sandbox)


@pytest.mark.parametrize("name, code, error", [
    ("nested_parentheses", "def f(x):\n    return " + "(" * 5000 + "x" + ")" * 5000 + "\n",
     "SandboxViolation: syntax error at line 2: too many nested parentheses"),
    # 40k-term chain: the parser's recursion limit; 100k unary minuses: ast.parse runs out of memory (in the
    # parent, before this fix, that was a MemoryError of the evaluation itself)
    ("long_chain", "def f(x):\n    return " + " + ".join(["x"] * 40000) + "\n",
     "RecursionError: maximum recursion depth exceeded during ast construction"),
    ("deep_unary", "def f(x):\n    return " + "-" * 100000 + "x\n", "MemoryError"),
])
def test_a_deeply_nested_program_costs_its_job_not_the_parent(sandbox, name, code, error):
    res = sandbox.run(code, [(1, [1])])
    assert res.error == error, (name, res)
    assert sandbox.run(OK, [(3, [5])]).values == (5,)  # the same (or a restarted) worker runs the next job


def test_a_huge_program_is_refused_before_it_is_sent(sandbox):
    code = "def f(x):\n    return 1\n" + "y = 1\n" * 100_000
    res = sandbox.run(code, [(1, [1])])
    assert res.error == (f"SandboxViolation: a source of {len(code)} characters: expected at most 200000 "
                         "(max_source_chars)")
    assert sandbox.run(OK, [(3, [5])]).values == (5,)
    assert "expected str" in sandbox.run(b"def f(x): return 1", [(1, [])]).error


def test_root_without_the_no_fork_limit_refuses_to_run(monkeypatch):
    monkeypatch.setattr(sandbox_lib, "_is_root", lambda: True)
    monkeypatch.setattr(sandbox_lib, "_worker_python", lambda drop: (sys.executable, False))
    with pytest.raises(SandboxUnavailable) as err:
        Sandbox(SandboxConfig())
    message = str(err.value)
    assert "\n" not in message and "RLIMIT_NPROC does not bind root" in message
    assert "no interpreter readable by nobody" in message
    with pytest.raises(SandboxUnavailable, match=r"drop_privileges=False"):
        Sandbox(SandboxConfig(drop_privileges=False))
    assert isinstance(err.value, BadInputError)  # the CLI prints it as one line, exit 2
    Sandbox(SandboxConfig(allow_root_without_nproc=True)).close()  # an explicit opt-in, for trusted code


@pytest.mark.skipif(not sandbox_lib._is_root(), reason="needs a root parent")
def test_a_real_root_parent_with_drop_privileges_off_refuses():
    with pytest.raises(SandboxUnavailable, match="would run programs as root"):
        Sandbox(SandboxConfig(drop_privileges=False))


def test_bad_sandbox_config_values_are_one_line():
    with pytest.raises(BadInputError, match=r"max_source_chars=0: expected > 0"):
        SandboxConfig(max_source_chars=0)
