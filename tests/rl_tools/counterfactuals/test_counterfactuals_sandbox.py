"""The sandbox: hostile programs end with a clear per-item error, nothing escapes, the rest is scored."""

import os
import pathlib
import time

import pytest

from rl_tools.counterfactuals.sandbox import Sandbox, SandboxConfig, SandboxViolation, validate_source

OK = "def f(x):\n    r = random.randint(1, 9)\n    return (x - r) % 7\n"
HOSTILE = {
    "infinite_loop": ("def f(x):\n    while True:\n        x = x + 1\n", "TimeoutError"),
    "huge_allocation": ("def f(x):\n    a = [0] * (10 ** 10)\n    return 1\n", "MemoryError"),
    "import_os": ("import os\ndef f(x):\n    return os.getpid()\n", "import of 'os'"),
    "file_write": ("def f(x):\n    open('pwned.txt', 'w').write('x')\n    return 1\n", "NameError: name 'open'"),
    "socket": ("import socket\ndef f(x):\n    s = socket.socket()\n    return 1\n", "import of 'socket'"),
    "fork_bomb": ("import os\ndef f(x):\n    while True:\n        os.fork()\n", "import of 'os'"),
    "deep_recursion": ("def f(x):\n    return f(x + 1)\n", "RecursionError"),
    "dunder_escape": ("def f(x):\n    return len(().__class__.__base__.__subclasses__())\n", "names starting with '_'"),
    "output_flood": ("def f(x):\n    while True:\n        print('spam' * 1000)\n", "OutputLimitError"),
    "dynamic_import": ("def f(x):\n    return __import__('os').getpid()\n", "names starting with '_'"),
    "eval": ("def f(x):\n    return eval('1')\n", "NameError: name 'eval'"),
}
# without the static check, the restricted builtins still stop these (fork and sockets need an import)
UNCHECKED = {"import_os": "ImportError", "socket": "ImportError", "fork_bomb": "ImportError",
             "file_write": "NameError", "dynamic_import": "NameError"}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(cpu_seconds=0.5, memory_mb=256)) as sb:
        yield sb


def test_worker_limits(sandbox):
    probe = sandbox.probe()
    lim = probe["limits"]
    assert lim["RLIMIT_NOFILE"] == 3  # no new file or socket descriptors at all
    assert lim["RLIMIT_FSIZE"] == 0 and lim["RLIMIT_NPROC"] == 0 and lim["RLIMIT_CORE"] == 0
    assert lim["RLIMIT_AS"] == 256 * 2 ** 20
    if os.geteuid() == 0 and sandbox.as_nobody:
        assert probe["uid"] == 65534  # RLIMIT_NPROC binds only non-root users


def test_hostile_programs_fail_cleanly_and_the_rest_is_scored(sandbox, tmp_path):
    names = list(HOSTILE)
    jobs = []
    for name in names:  # interleave good programs between hostile ones
        jobs += [(OK, [(3, [5])]), (HOSTILE[name][0], [(1, [1])])]
    t0 = time.perf_counter()
    results = sandbox.run_many(jobs)
    elapsed = time.perf_counter() - t0
    for i, name in enumerate(names):
        good, bad = results[2 * i], results[2 * i + 1]
        assert good.ok and good.values == (5,), (name, good)
        assert not bad.ok and HOSTILE[name][1] in bad.error, (name, bad.error)
        assert "\n" not in bad.error
    assert elapsed < 60
    assert not list(pathlib.Path(".").glob("pwned.txt"))


@pytest.mark.parametrize("name", sorted(UNCHECKED))
def test_restricted_builtins_hold_without_the_static_check(sandbox, name):
    res = sandbox.run(HOSTILE[name][0], [(1, [1])], validate=False)
    assert not res.ok and UNCHECKED[name] in res.error, res.error


def test_timeout_kills_a_program_that_survives_the_cpu_timer(sandbox):
    # the CPU timer raises inside the job; a job in C code that ignores it is killed on the wall clock
    res = sandbox.run("def f(x):\n    return 10 ** (10 ** 9) % 7\n", [(1, [1])])
    assert not res.ok and "Timeout" in res.error
    assert sandbox.run(OK, [(4, [2])]).values == (2,)  # restarted worker


def test_non_int_results_and_latent_bounds(sandbox):
    assert "expected int" in sandbox.run("def f(x):\n    return 'a'\n", [(1, [])]).error
    assert "outside randint" in sandbox.run(OK, [(1, [12])]).error
    assert "more latents" in sandbox.run(OK, [(1, [])]).error


def test_validate_source_messages():
    for code, msg in (("try:\n    pass\nexcept Exception:\n    pass\n", "try at line 1"),
                      ("f = lambda x: x\n", "lambda"), ("class A:\n    pass\n", "class"),
                      ("def f(x) return", "syntax error")):
        with pytest.raises(SandboxViolation, match=msg):
            validate_source(code)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxConfig(memory_mb=10)
