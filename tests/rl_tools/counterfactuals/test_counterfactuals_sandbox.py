"""The sandbox: hostile programs end with a clear per-item error, nothing escapes, the rest is scored."""

import ast
import json
import logging
import os
import pathlib
import re
import subprocess
import time

import pytest

from core.config import BadInputError
from rl_tools.counterfactuals import hostile
from rl_tools.counterfactuals import sandbox as sandbox_lib
from rl_tools.counterfactuals.sandbox import Sandbox, SandboxConfig, SandboxViolation, active_layers, validate_source

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


# --- issue 48: defence in depth --------------------------------------------------------------------------

BENIGN_FORMATS = ("'{0}-{1}'.format(x, 2)", "'{}'.format(x)", "'{x}'.format_map({'x': x})", "'{0:>5}'.format(x)",
                  "'{0!r:{1}}'.format(x, 3)")


def test_the_format_route_is_closed_by_the_static_check(sandbox):
    results = sandbox.run_many([(h.source, [(1, [1])]) for h in hostile.STATIC])
    for h, res in zip(hostile.STATIC, results):
        assert not res.ok and re.search(h.expect, res.error), (h.name, res.error)
    for body in BENIGN_FORMATS:  # literal format strings with plain fields stay allowed
        res = sandbox.run(f"def f(x):\n    return len({body})\n", [(7, [])])
        assert res.ok and res.values[0] >= 1, (body, res)
    with pytest.raises(SandboxViolation, match=r"format\(\.\.\.\) with the field \{0\.__globals__\}"):
        validate_source("def f(x):\n    return '{0.__globals__}'.format(print)\n", sandbox)


def test_the_helpers_globals_hold_only_the_jobs_own_state(sandbox):
    # with the check bypassed, `print` and `random.randint` are Python functions: their globals are a private
    # namespace per job (safe builtins, this job's output and latents), not the worker's module globals
    code = ("def f(x):\n    print(sorted(print.__globals__), sorted(random.randint.__globals__['__builtins__']))\n"
            "    return int(print.__globals__ is random.randint.__globals__)\n")
    res = sandbox.run(code, [(1, [])], validate=False)
    assert res.values == (1,), res
    names, builtin_names = res.stdout.split("] [")
    assert set(ast.literal_eval(names + "]")) == {"__builtins__", "LAT", "OUT", "OutputLimitError", "print", "randint"}
    assert "open" not in builtin_names and "__import__" not in builtin_names and "getattr" not in builtin_names


# Inside a worker interpreter (`python -I -S`, the worker's helpers and its hardening): a breadth-first walk of
# every attribute / item chain without calls (what a format field can read) from the program's globals must not
# reach the worker's module globals, `sys`, or any module's globals dict. The builtins module and `_io` (the
# `__self__` of builtin functions, C modules) are walked through, not forbidden: `harden()` removed their
# `__loader__` / `__spec__`, through which the walk otherwise reaches `_frozen_importlib`'s globals and `sys`.
REACH = r'''
import json
harden()
env, state = make_env(100)
OPEN = {builtins, builtins.open.__self__}
FORBIDDEN = {id(globals()): "the worker's module globals", id(sys): "sys"}
for m in list(sys.modules.values()):
    if m not in OPEN:
        FORBIDDEN[id(m)] = "module " + m.__name__
        FORBIDDEN[id(m.__dict__)] = "the globals of module " + m.__name__
EDGES = {"__globals__", "__closure__", "cell_contents", "__func__", "__self__", "__wrapped__", "__dict__",
         "__class__", "__init__", "__call__", "__code__", "__defaults__", "__kwdefaults__", "__builtins__",
         "__loader__", "__spec__", "__objclass__", "__base__", "__bases__", "__mro__", "func", "args", "keywords",
         "loader", "__traceback__", "tb_frame", "f_globals", "f_back", "gi_frame"}
seen, keep, found, frontier = set(), [], [], [("env", env)]
for depth in range(7):
    nxt = []
    for path, obj in frontier:
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        keep.append(obj)
        if id(obj) in FORBIDDEN:
            found.append([path, FORBIDDEN[id(obj)]])
            continue
        if isinstance(obj, dict):
            nxt += [("%s[%r]" % (path, k), v) for k, v in list(obj.items())]
        elif isinstance(obj, (list, tuple)):
            nxt += [("%s[%d]" % (path, i), v) for i, v in enumerate(obj)]
        names = set(EDGES) if isinstance(obj, type) else EDGES | {n for n in dir(obj) if not n.startswith("_")}
        for n in sorted(names):
            try:
                v = getattr(obj, n)
            except Exception:
                continue
            if v is not None and not isinstance(v, (str, int, float, bytes)):
                nxt.append(("%s.%s" % (path, n), v))
    frontier = nxt
print(json.dumps({"found": found[:10], "seen": len(seen), "reached_state": id(state) in seen}))
'''


@pytest.mark.parametrize("hardened", [True, False])
def test_no_module_globals_are_reachable_without_a_call(sandbox, hardened):
    source = sandbox_lib._POLICY + sandbox_lib._HELPERS + (REACH if hardened else REACH.replace("harden()", ""))
    proc = subprocess.run([sandbox.python, "-I", "-S", "-c", source], capture_output=True, text=True, env={},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["reached_state"] and out["seen"] > 1000  # the walk does reach the helpers' private namespace
    if hardened:
        assert out["found"] == [], out["found"]
    else:  # the control: without the hardening the walk finds the import system's globals (hence sys)
        assert any("_frozen_importlib" in what for _, what in out["found"]), out["found"]


def _fs_modes():
    mode, why = sandbox_lib._fs_mode(*sandbox_lib._worker_python(True))
    modes = [m for m in ("landlock", "userns") if m == mode or _fs_layer_works(m)]
    return modes, why


def _fs_layer_works(mode):
    with Sandbox(SandboxConfig(fs_layer=mode, memory_mb=256)) as sb:
        return sb.probe().get("fs_layer") is not None


@pytest.fixture(scope="module")
def fs_modes():
    return _fs_modes()


@pytest.mark.parametrize("mode", ["landlock", "userns"])
def test_without_the_static_check_the_os_layer_stops_writes(mode, fs_modes):
    modes, why = fs_modes
    if mode not in modes:
        pytest.skip(f"{mode} is not available on this kernel ({why})")
    tag = f"{os.getpid()}-{mode}"
    routes = hostile.os_routes(tag)
    with Sandbox(SandboxConfig(fs_layer=mode, cpu_seconds=1.0, memory_mb=256)) as sb:
        results = sb.run_many([(h.source, [(1, [1])]) for h in routes], validate=False)
        folder = sb._dir
        assert sb.restarts == 0  # no job was caught by the post-job check: the kernel stopped each one
        assert any(layer.startswith(("landlock(abi", "userns")) for layer in sb.layers), sb.layers
    for h, res in zip(routes, results):
        assert not res.ok and re.search(h.expect, res.error), (h.name, res.error)
        if h.target:
            path = h.target if h.target.startswith("/") else os.path.join(folder, h.target)
            assert not os.path.lexists(path), (h.name, path)
    assert not list(pathlib.Path("/tmp").glob(f"cf-hostile-{tag}-*"))


def test_the_post_job_check_reports_what_appeared_outside_the_jobs_folder():
    target = f"/tmp/cf-hostile-{os.getpid()}-escape"
    code = hostile.RECOVER_OS + f"\ndef f(x):\n    real_os()['mkdir']({target!r})\n    return 1\n"
    cwd_code = hostile.RECOVER_OS + "\ndef f(x):\n    real_os()['mkdir']('in-cwd')\n    return 1\n"
    try:
        with Sandbox(SandboxConfig(fs_layer="none", memory_mb=256)) as sb:  # the OS layer off: the check remains
            assert sb.run(OK, [(3, [5])]).ok and "post-job-check" in sb.layers
            assert not any(layer.startswith(("landlock", "userns")) for layer in sb.layers), sb.layers
            res = sb.run(code, [(1, [1])], validate=False)
            assert res.error == f"SandboxEscape: the job created {target} outside its folder (the worker was " \
                                "replaced)", res
            assert sb.restarts == 1 and sb.run(OK, [(3, [5])]).values == (5,)
            # the worker's own folder is not writable even without the OS layer
            res = sb.run(cwd_code, [(1, [1])], validate=False)
            assert not res.ok and "PermissionError" in res.error, res
    finally:
        if os.path.isdir(target):
            os.rmdir(target)


def test_active_layers_are_probed_once_and_logged(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_lib, "_logged", set())
    with caplog.at_level(logging.INFO, logger=sandbox_lib.__name__):
        layers = active_layers()
        assert active_layers() == layers
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sandbox layers: ")]
    assert len(lines) == 1 and lines[0].startswith("sandbox layers: " + ", ".join(layers)), lines
    assert layers[0] == "static-check" and "rlimits" in layers and "private-ro-cwd" in layers
    mode = sandbox_lib._fs_mode(*sandbox_lib._worker_python(True))[0]
    assert any(layer.startswith({"landlock": "landlock(abi ", "userns": "userns", "none": "private"}[mode])
               for layer in layers), (mode, layers)
    with Sandbox(SandboxConfig(memory_mb=256)) as sb:  # a worker reports the layer it applied to itself
        assert sb.probe()["fs_layer"] == (None if mode == "none" else next(
            la for la in layers if la.startswith(("landlock", "userns"))))
        assert sb.layers == layers
    with pytest.raises(BadInputError, match=r"fs_layer='seccomp': expected one of auto, landlock, userns, none"):
        SandboxConfig(fs_layer="seccomp")
