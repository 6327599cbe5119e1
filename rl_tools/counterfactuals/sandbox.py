"""A sandboxed executor for benchmark programs (and anything else untrusted that claims to be one).

Layers, outermost first (`active_layers()` names those active on this machine; it is logged once per process
as `sandbox layers: ...`):

1. a separate worker process (`python -I -S`, an environment of only `TMPDIR`, a fresh working folder that
   is also its `TMPDIR` and that nobody can write, mode 0555), started in its own session and killed (the
   whole process group) when a job runs past its wall-clock limit; when the parent runs as root and the
   interpreter is readable by `nobody`, the worker runs as `nobody`. The worker is spawned, never forked with
   Python code in the child: no `preexec_fn`, so the child runs only the C fork-exec of `subprocess` (the
   `spawn` guarantee) and a multithreaded JAX parent cannot deadlock in it;
2. an OS filesystem restriction the worker applies to itself first (`SandboxConfig.fs_layer`, by default
   the strongest the kernel allows, probed once per process): Landlock with read and execute rights only (no
   write, mkdir, symlink, mknod, remove, rename, link or truncate anywhere; from ABI 4 no TCP, from ABI 6 no
   signals to processes outside the worker), else an unprivileged user + mount namespace whose mounts are
   all read-only (and a nested user namespace that cannot remount them); seccomp is not used (it would need
   libseccomp or a hand-built BPF filter);
3. resource limits the worker sets on itself before it reads any job: address space (`RLIMIT_AS`),
   file size 0 (`RLIMIT_FSIZE`: no file writes), no new processes (`RLIMIT_NPROC` 0; the kernel ignores it
   for root, hence layer 1's user switch, and a root parent that cannot switch refuses to start a worker
   unless `allow_root_without_nproc`), no core dumps, total CPU seconds, and `RLIMIT_NOFILE` = 3: no file,
   socket or pipe can be opened at all (no network, no file access);
4. a per-job CPU timer (`ITIMER_PROF`) that raises `TimeoutError` inside the job, a recursion limit, and an
   output cap on `print`;
5. restricted builtins (no `__import__`, `open`, `eval`, `exec`, `compile`, `getattr`, `globals`, ...);
   `print` and `random.randint` are compiled into a private namespace per job (safe builtins, the job's own
   output and latents), so no function the program can reach carries the worker's globals, and the C
   modules whose functions it can reach lose their `__loader__` / `__spec__` (the import system's globals);
6. a static check of the source (an allow-list of syntax: no import, try, with, lambda, class, global; no
   name or attribute that starts with an underscore, which closes the `().__class__.__subclasses__()` route;
   `.format` / `.format_map` only on a string literal whose fields are plain names or positions, which
   closes `'{0.__globals__}'.format(f)`). The check parses the untrusted source inside the worker, under its
   limits and CPU timer: a huge or deeply nested program costs that job (a MemoryError, RecursionError or a
   dead worker), never the parent; the parent only caps the source's length before sending it;
7. after each job, a check that nothing appeared outside the job's folder: the folder itself must still be
   empty, and `/tmp`, `/var/tmp`, `/dev/shm` (when their mtime moved) must hold no entry of the worker's uid
   changed during the job; a hit is that job's `SandboxEscape` error and the worker is replaced. (When the
   worker shares the parent's uid, an entry the parent's own user made in /tmp during the job counts too.)

Each job ends with values or with one clear error line; a job that kills its worker costs only that job (the
worker is restarted). The latent draw `random.randint(lo, hi)` is served by a shim that returns the latent
values the caller fixes, so one program can be run under every r (`verify.py`). `hostile.py` lists the hostile
programs tried so far, one per route.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import platform
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from core.config import BadInputError

NOBODY = 65534

# The static check, run inside the worker (stdlib only): the parent never parses untrusted source.
_POLICY = r'''
import ast
import string

ALLOWED_NODES = (
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign, ast.If,
    ast.While, ast.For, ast.Break, ast.Continue, ast.Pass, ast.Expr, ast.Call, ast.Name, ast.Load, ast.Store,
    ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.IfExp, ast.Attribute, ast.Subscript,
    ast.Slice, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.SetComp, ast.DictComp,
    ast.comprehension, ast.keyword, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context,
)
NODE_NAMES = {ast.Import: "import", ast.ImportFrom: "import", ast.Try: "try", ast.With: "with",
              ast.Lambda: "lambda", ast.ClassDef: "class", ast.Global: "global", ast.Nonlocal: "nonlocal",
              ast.Yield: "yield", ast.YieldFrom: "yield", ast.AsyncFunctionDef: "async", ast.Await: "await",
              ast.Raise: "raise", ast.Delete: "del", ast.Assert: "assert", ast.NamedExpr: "walrus (:=)"}


def violation(code):
    """Why `code` is outside the allowed subset (naming the construct and its line), or None."""
    if not isinstance(code, str):
        return "code of type %s: expected str" % type(code).__name__
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        return "syntax error at line %s: %s" % (err.lineno, err.msg)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = ", ".join(a.name for a in node.names) if isinstance(node, ast.Import) else node.module
            return "import of %r at line %s: imports are not allowed" % (names, line)
        if not isinstance(node, ALLOWED_NODES):
            what = NODE_NAMES.get(type(node), type(node).__name__)
            return "%s at line %s: not allowed in benchmark programs" % (what, line)
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else \
            node.name if isinstance(node, ast.FunctionDef) else node.arg if isinstance(node, ast.arg) else None
        if name is not None and name.startswith("_"):
            return "name %r at line %s: names starting with '_' are not allowed" % (name, line)
        if isinstance(node, ast.Attribute) and node.attr in FORMAT_METHODS:
            problem = format_violation(node)
            if problem is not None:
                return "%s at line %s" % (problem, line)
    return None


FORMAT_METHODS = ("format", "format_map")


def format_fields(text, depth=0):
    """Every replacement field name in a format string, nested specs included (`{0:{1}}`)."""
    if depth > 2:
        raise ValueError("fields nested deeper than str.format allows")
    for _, field, spec, _ in string.Formatter().parse(text):
        if field is not None:
            yield field
        if spec:
            yield from format_fields(spec, depth + 1)


def format_violation(node):
    """`.format` / `.format_map` reads attributes and items of its arguments (`'{0.x[k]}'`), past the name
    check: only a string literal receiver whose fields are plain names or positions is allowed."""
    what = "%s(...)" % node.attr
    if not (isinstance(node.value, ast.Constant) and type(node.value.value) is str):
        return "%s on a non-literal receiver: only a string literal may be formatted" % what
    try:
        fields = list(format_fields(node.value.value))
    except ValueError as err:
        return "%s with a malformed format string (%s)" % (what, err)
    for field in fields:
        if "." in field or "[" in field:
            return "%s with the field {%s}: attribute and index chains are not allowed" % (what, field)
    return None
'''


class SandboxViolation(ValueError):
    """The source uses something the sandbox does not allow (raised by `validate_source`)."""


class SandboxUnavailable(BadInputError):
    """The sandbox cannot run hostile code safely here (root without the no-fork limit)."""


def validate_source(code: str, sandbox: Sandbox | None = None) -> None:
    """Reject source outside the allowed subset, naming the construct and its line. The source is parsed in
    a sandbox worker (`sandbox`, or a short-lived one), so a huge or deeply nested program cannot crash us."""
    if not isinstance(code, str):
        raise SandboxViolation(f"code of type {type(code).__name__}: expected str")
    own = sandbox is None
    sandbox = Sandbox() if own else sandbox
    try:
        res = sandbox.check(code)
    finally:
        if own:
            sandbox.close()
    if res is not None:
        raise SandboxViolation(res.removeprefix("SandboxViolation: "))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SandboxConfig:
    """Per-job CPU seconds, worker memory (MiB), printed characters, recursion depth; wall clock per job
    defaults to 3 x cpu + 2 s."""

    cpu_seconds: float = 1.0
    memory_mb: int = 512
    output_chars: int = 10_000
    recursion_limit: int = 200
    wall_seconds: float | None = None
    total_cpu_seconds: int = 600  # the worker's lifetime CPU budget (RLIMIT_CPU); it is restarted after
    drop_privileges: bool = True
    max_source_chars: int = 200_000  # longer sources are refused before they reach the worker
    # Under root RLIMIT_NPROC does not bind: without the switch to `nobody` a program that escaped the other
    # layers could fork. Such a sandbox refuses to start unless this is set (trusted code only).
    allow_root_without_nproc: bool = False
    fs_layer: str = "auto"  # OS filesystem restriction: auto (the strongest the kernel allows), landlock, userns, none
    check_outside: bool = True  # after each job, check that nothing appeared outside the job's folder

    def __post_init__(self):
        for name in ("cpu_seconds", "memory_mb", "output_chars", "recursion_limit", "total_cpu_seconds",
                     "max_source_chars"):
            if getattr(self, name) <= 0:
                raise BadInputError(f"{name}={getattr(self, name)}: expected > 0")
        if self.fs_layer not in ("auto", *_FS_MODES):
            raise BadInputError(f"fs_layer={self.fs_layer!r}: expected one of auto, {', '.join(_FS_MODES)}")
        if self.memory_mb < 64:
            raise BadInputError(f"memory_mb={self.memory_mb}: expected >= 64 (the interpreter itself needs ~30)")

    @property
    def wall(self) -> float:
        return self.wall_seconds if self.wall_seconds is not None else 3 * self.cpu_seconds + 2.0


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """values: one per call (ints), or error: one line ("TimeoutError: ...")."""

    values: tuple | None
    error: str | None = None
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


# What the program can reach, built so that nothing in it carries the worker's globals: the safe builtins
# (C functions and types), and `print` / `random.randint` compiled into a private namespace per job whose
# globals hold only the safe builtins, the job's own output and latents, and an exception class without
# Python methods. `harden()` also removes `__loader__` / `__spec__` (Python objects whose functions carry
# the import system's globals, hence `sys`) from the C modules that builtin functions expose as `__self__`.
_HELPERS = r'''
import builtins

SAFE = ["abs", "min", "max", "sum", "len", "range", "int", "bool", "list", "tuple", "dict", "set", "sorted",
        "reversed", "enumerate", "zip", "divmod", "all", "any", "isinstance", "round", "str", "float",
        "ValueError", "TypeError", "ZeroDivisionError", "IndexError", "KeyError", "True", "False", "None"]
BASE = {name: getattr(builtins, name) for name in SAFE if hasattr(builtins, name)}
OutputLimitError = type("OutputLimitError", (Exception,), {"__module__": "sandbox"})
import sys
Namespace = type(sys.implementation)  # types.SimpleNamespace, a C type

HELPER_CODE = compile("""
def print(*args, sep=" ", end="\\n"):
    text = sep.join([str(a) for a in args]) + end
    OUT[1] += len(text)
    if OUT[1] > OUT[2]:
        raise OutputLimitError("output limit of %d characters exceeded" % OUT[2])
    OUT[0].append(text)

def randint(lo, hi):
    # random.randint(lo, hi) returns the fixed latents in draw order (the hidden r of the program)
    lat = LAT
    i = lat[1]
    try:
        v = lat[0][i]
    except IndexError:
        raise ValueError("the program draws more latents than were given") from None
    lat[1] = i + 1
    if lo <= v <= hi:
        return v
    raise ValueError("latent %r outside randint(%r, %r)" % (v, lo, hi))
""", "<sandbox helpers>", "exec")


HELPER_NS = {"__builtins__": {}}
exec(HELPER_CODE, HELPER_NS)  # once, for the code objects; each job binds them to its own namespace
PRINT_CODE, RANDINT_CODE = HELPER_NS["print"].__code__, HELPER_NS["randint"].__code__
PRINT_KWDEFAULTS = dict(HELPER_NS["print"].__kwdefaults__)
del HELPER_NS


def make_env(output_chars):
    """(the program's globals, the job's private state: OUT = [texts, used, limit], LAT = [latents, pos])."""
    state = {"__builtins__": dict(BASE), "OutputLimitError": OutputLimitError, "OUT": [[], 0, output_chars],
             "LAT": [(), 0]}
    function = type(make_env)
    state["print"] = safe_print = function(PRINT_CODE, state, "print")
    safe_print.__kwdefaults__ = dict(PRINT_KWDEFAULTS)
    state["randint"] = randint = function(RANDINT_CODE, state, "randint")
    env = {"__builtins__": dict(BASE, print=safe_print), "random": Namespace(randint=randint)}
    return env, state


def harden():
    for module in {builtins, getattr(builtins.open, "__self__", None)} - {None}:
        for name in ("__loader__", "__spec__"):
            module.__dict__.pop(name, None)
'''

# The OS filesystem layer, applied by the worker to itself before its resource limits (it needs two file
# descriptors and ctypes' memory for a moment): Landlock (read and execute only: no write, make, remove,
# rename, link or truncate anywhere; from ABI 4 no TCP bind/connect; from ABI 6 no signals to, or abstract
# sockets of, processes outside the worker), else an unprivileged user + mount namespace whose mounts are all
# remounted read-only, then a nested user namespace that does not own the mounts (so it cannot remount them).
_FS_LAYER = r'''
def apply_fs_layer(mode):
    """Restrict this process's filesystem access (`mode`: landlock, userns or none); the layer's name."""
    if mode == "none":
        return None
    import ctypes
    import os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    u32, u64, size_t, c_int = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int

    def check(result, what):
        if result < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, "%s failed: %s" % (what, os.strerror(errno)))
        return result

    check(libc.prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if mode == "landlock":
        abi = check(libc.syscall(444, None, size_t(0), u32(1)), "landlock_create_ruleset(VERSION)")
        fs = (1 << 13) - 1  # ABI 1: execute, write, read, read dir, remove, make char/dir/reg/sock/fifo/block/sym
        fs |= (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)

        class Ruleset(ctypes.Structure):
            _fields_ = [("fs", u64), ("net", u64), ("scoped", u64)]

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed", u64), ("fd", ctypes.c_int32)]

        attr = Ruleset(fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        ruleset = check(libc.syscall(444, ctypes.byref(attr), size_t(size), u32(0)), "landlock_create_ruleset")
        root = os.open("/", os.O_PATH | os.O_CLOEXEC)
        rule = PathBeneath(1 | 4 | 8, root)  # execute, read_file, read_dir beneath /
        check(libc.syscall(445, c_int(ruleset), c_int(1), ctypes.byref(rule), u32(0)), "landlock_add_rule")
        os.close(root)
        check(libc.syscall(446, c_int(ruleset), u32(0)), "landlock_restrict_self")
        os.close(ruleset)
        return "landlock(abi %d)" % abi
    if mode == "userns":
        newuser, newns = 0x10000000, 0x00020000
        uid, gid = os.getuid(), os.getgid()
        check(libc.unshare(newuser | newns), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        for name, text in (("uid_map", "%d %d 1" % (uid, uid)), ("setgroups", "deny"),
                           ("gid_map", "%d %d 1" % (gid, gid))):  # own ids only (a nested namespace needs them)
            fd = os.open("/proc/self/" + name, os.O_WRONLY)
            os.write(fd, text.encode())
            os.close(fd)

        class MountAttr(ctypes.Structure):
            _fields_ = [("set", u64), ("clear", u64), ("propagation", u64), ("userns", u64)]

        attr = MountAttr(1, 0, 1 << 18, 0)  # MOUNT_ATTR_RDONLY, MS_PRIVATE
        check(libc.syscall(442, c_int(-100), b"/", ctypes.c_uint(0x8000), ctypes.byref(attr), size_t(32)),
              "mount_setattr(/, AT_RECURSIVE, RDONLY)")
        check(libc.unshare(newuser), "unshare(CLONE_NEWUSER)")  # caps here do not own the mounts
        return "userns-ro-mounts"
    raise ValueError("fs_layer %r: expected landlock, userns or none" % mode)
'''

# The worker: stdlib only, restricts and limits itself before anything else, says which layers it has (one
# JSON line), then reads one JSON job per line and writes one JSON result per line. `_POLICY` (the static
# check), `_HELPERS` and `_FS_LAYER` are prepended to it.
_WORKER_MAIN = r'''
import json, os, resource, signal, sys
cfg = json.loads(sys.argv[1])
try:
    fs_layer = apply_fs_layer(cfg["fs_layer"])
except BaseException as err:
    sys.stdout.write(json.dumps({"fatal": "%s: %s" % (type(err).__name__, err)}) + "\n")
    sys.stdout.flush()
    sys.exit(3)
for name, value in (("RLIMIT_AS", cfg["memory_bytes"]), ("RLIMIT_FSIZE", 0), ("RLIMIT_CORE", 0),
                    ("RLIMIT_CPU", cfg["total_cpu_seconds"]), ("RLIMIT_NPROC", 0), ("RLIMIT_NOFILE", 3)):
    hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL one second later
    resource.setrlimit(getattr(resource, name), (value, hard))
sys.setrecursionlimit(cfg["recursion_limit"] + 50)
harden()

def on_timer(signum, frame):
    raise TimeoutError("CPU time limit of %g s exceeded" % cfg["cpu_seconds"])

signal.signal(signal.SIGPROF, on_timer)
try:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
except (AttributeError, ValueError):
    pass

def run_job(job):
    env, state = make_env(cfg["output_chars"])
    out, latents = state["OUT"][0], state["LAT"]
    values = []
    signal.setitimer(signal.ITIMER_PROF, cfg["cpu_seconds"])
    try:
        if job.get("validate", True):
            problem = violation(job["code"])  # parsed here, under the limits and the CPU timer
            if problem is not None:
                signal.setitimer(signal.ITIMER_PROF, 0)
                return {"error": "SandboxViolation: " + problem, "stdout": ""}
            if job.get("check_only"):
                signal.setitimer(signal.ITIMER_PROF, 0)
                return {"values": []}
        code = compile(job["code"], "<program>", "exec")
        exec(code, env)
        fn = env.get(job.get("entry", "f"))
        if not callable(fn):
            raise NameError("the program defines no function %r" % job.get("entry", "f"))
        for x, lat in job["calls"]:
            latents[0], latents[1] = tuple(lat), 0
            v = fn(x)
            if type(v) is bool or type(v) is not int:
                raise TypeError("result %.60r of type %s: expected int" % (v, type(v).__name__))
            if abs(v) > 10 ** 15:
                raise OverflowError("result of %d bits: expected |result| <= 10**15" % v.bit_length())
            values.append(v)
    except BaseException as err:
        signal.setitimer(signal.ITIMER_PROF, 0)
        msg = str(err).splitlines()[0][:300] if str(err) else ""
        return {"error": "%s: %s" % (type(err).__name__, msg) if msg else type(err).__name__,
                "stdout": "".join(out)[: cfg["output_chars"]]}
    signal.setitimer(signal.ITIMER_PROF, 0)
    return {"values": values, "stdout": "".join(out)}

LIMITS = ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_CORE")
sys.stdout.write(json.dumps({"uid": os.getuid(), "fs_layer": fs_layer}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    job = json.loads(line)
    if job.get("probe"):
        res = {"uid": os.getuid(), "fs_layer": fs_layer,
               "limits": {n: resource.getrlimit(getattr(resource, n))[0] for n in LIMITS}}
    else:
        res = run_job(job)
    try:
        text = json.dumps(res)
    except (TypeError, ValueError) as err:
        text = json.dumps({"error": "ResultError: %s" % err})
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
'''
_WORKER = _POLICY + _HELPERS + _FS_LAYER + _WORKER_MAIN


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _readable_by_all(path: pathlib.Path) -> bool:
    """Every folder on the way is world-searchable and the file world-readable and executable."""
    path = path.resolve()
    try:
        for parent in path.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
        mode = path.stat().st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IROTH and mode & stat.S_IXOTH)


def _worker_python(drop: bool) -> tuple[str, bool]:
    """(interpreter, run as nobody). The worker needs only the standard library."""
    if not (drop and _is_root()):
        return sys.executable, False
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if candidate and _readable_by_all(pathlib.Path(candidate)):
            return str(pathlib.Path(candidate).resolve()), True
    return sys.executable, False


_FS_MODES = ("landlock", "userns", "none")
_WATCHED = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable folders checked after each job
_log = logging.getLogger(__name__)
_fs_cache: dict[tuple[str, bool], tuple[str, str]] = {}
_logged: set[tuple[str, ...]] = set()


def _spawn_kwargs(as_nobody: bool) -> dict[str, Any]:
    return dict(user=NOBODY, group=NOBODY, extra_groups=[]) if as_nobody else {}


def _fs_mode(python: str, as_nobody: bool) -> tuple[str, str]:
    """(the strongest filesystem layer a worker of `python` can apply to itself here, why not the stronger
    ones): tried once per process in a throw-away child, Landlock first, then a user + mount namespace."""
    key = (python, as_nobody)
    if key not in _fs_cache:
        why = []
        mode = "none"
        if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
            why.append(f"no syscall numbers for {sys.platform}/{platform.machine()}")
        else:
            for candidate in ("landlock", "userns"):
                try:
                    proc = subprocess.run([python, "-I", "-S", "-c", _FS_LAYER + f"\napply_fs_layer({candidate!r})\n"],
                                          stdin=subprocess.DEVNULL, capture_output=True, env={}, cwd="/",
                                          timeout=30, **_spawn_kwargs(as_nobody))
                except (OSError, subprocess.TimeoutExpired) as err:
                    why.append(f"{candidate}: {type(err).__name__}")
                    continue
                if proc.returncode == 0:
                    mode = candidate
                    break
                last = proc.stderr.decode(errors="replace").strip().splitlines()
                why.append(f"{candidate}: {last[-1] if last else f'exit status {proc.returncode}'}")
        _fs_cache[key] = (mode, "; ".join(why))
    return _fs_cache[key]


def _layers(as_nobody: bool, fs_layer: str | None, check_outside: bool) -> tuple[str, ...]:
    names = ["static-check", "restricted-builtins", "spawned-worker", "rlimits", "cpu-timer"]
    names += ["uid-nobody"] if as_nobody else []
    names += [fs_layer] if fs_layer else []
    names += ["private-ro-cwd"] + (["post-job-check"] if check_outside else [])
    return tuple(names)


def active_layers(config: SandboxConfig | None = None) -> tuple[str, ...]:
    """The layers a sandbox with `config` (default: `SandboxConfig()`) has on this machine, e.g.
    `('static-check', ..., 'landlock(abi 7)', 'private-ro-cwd', 'post-job-check')`. The kernel is probed
    once per process and the result logged once (`sandbox layers: ...`)."""
    config = SandboxConfig() if config is None else config
    python, as_nobody = _worker_python(config.drop_privileges)
    mode = config.fs_layer if config.fs_layer != "auto" else _fs_mode(python, as_nobody)[0]
    fs_name = _FS_NAMES.get(mode)
    if mode == "landlock":
        fs_name = _landlock_name(python, as_nobody)
    return _log_layers(_layers(as_nobody, fs_name, config.check_outside), python, as_nobody)


_FS_NAMES = {"userns": "userns-ro-mounts", "none": None}
_landlock_names: dict[tuple[str, bool], str] = {}


def _landlock_name(python: str, as_nobody: bool) -> str:
    key = (python, as_nobody)
    if key not in _landlock_names:  # the ABI version, read by a worker that applied it
        with Sandbox(SandboxConfig(fs_layer="landlock")) as sb:
            fs_layer = sb.probe().get("fs_layer")
        _landlock_names[key] = fs_layer or "landlock"
    return _landlock_names[key]


def _log_layers(layers: tuple[str, ...], python: str, as_nobody: bool) -> tuple[str, ...]:
    if layers not in _logged:
        _logged.add(layers)
        why = _fs_cache.get((python, as_nobody), ("", ""))[1]
        tail = "" if not why else f" (not available: {why}; seccomp is not used: it needs libseccomp or a " \
                                  "hand-built BPF filter)"
        _log.info("sandbox layers: %s%s", ", ".join(layers), tail)
    return layers


class Sandbox:
    """A restartable worker process; use as a context manager or call `close()`.

    `run(code, calls)` executes `code` (which must define `f(x)`) once per call `(x, latents)` and returns an
    `ExecResult`; `run_many` does that for a list of jobs. Violations of the static check are errors of the
    job (the worker never sees such code) unless `validate=False`. `layers` names the layers of the running
    worker (see `active_layers`).
    """

    def __init__(self, config: SandboxConfig = SandboxConfig()):
        self.config = config
        self.python, self.as_nobody = _worker_python(config.drop_privileges)
        if _is_root() and not self.as_nobody and not config.allow_root_without_nproc:
            why = ("drop_privileges=False" if not config.drop_privileges else
                   f"no interpreter readable by nobody (uid {NOBODY}) was found; tried {sys.executable}")
            raise SandboxUnavailable(
                f"the sandbox would run programs as root ({why}): RLIMIT_NPROC does not bind root, so nothing "
                "would stop a fork; run as a non-root user, make python3 readable by all, or set "
                "SandboxConfig(allow_root_without_nproc=True) for trusted code only")
        self._proc: subprocess.Popen | None = None
        self._dir: str | None = None
        self._buffer = b""
        self._watched: list[tuple[str, int]] = []  # (folder, O_PATH descriptor) for the post-job check
        self._marks: tuple[int, ...] = ()  # their mtimes after the last job
        self._uid = NOBODY if self.as_nobody else os.getuid() if hasattr(os, "getuid") else -1
        self.restarts = 0
        self.layers: tuple[str, ...] = ()

    # -- process management --------------------------------------------------------------------------
    def _fs_layer(self) -> str:
        if self.config.fs_layer != "auto":
            return self.config.fs_layer
        return _fs_mode(self.python, self.as_nobody)[0]

    def _start(self) -> subprocess.Popen | dict:
        """A fresh worker in a fresh folder (readable, writable by nobody), or the error of a failed start."""
        mode = self._fs_layer()
        self._dir = tempfile.mkdtemp(prefix="cf-sandbox-")
        os.chmod(self._dir, 0o555)  # the worker's cwd and TMPDIR: it can read it, nobody can write it
        cfg = {"cpu_seconds": self.config.cpu_seconds, "output_chars": self.config.output_chars,
               "recursion_limit": self.config.recursion_limit,
               "memory_bytes": self.config.memory_mb * 1024 * 1024,
               "total_cpu_seconds": int(self.config.total_cpu_seconds), "fs_layer": mode}
        # No preexec_fn: the user switch, new session and fd closing are done by subprocess's C fork-exec,
        # and the worker restricts and limits itself before reading a job (see the module docstring).
        self._proc = subprocess.Popen(
            [self.python, "-I", "-S", "-c", _WORKER, json.dumps(cfg)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self._dir, env={"TMPDIR": self._dir},
            close_fds=True, start_new_session=True, **_spawn_kwargs(self.as_nobody))
        self._buffer = b""
        hello = self._reply(self.config.wall + 10.0)
        if "fatal" in hello or "error" in hello:
            self._kill()
            self.restarts += 1
            why = hello.get("fatal") or hello.get("error")
            return {"error": f"SandboxError: the worker could not start with fs_layer={mode!r} ({why})"}
        if self.config.check_outside:
            self._watch(kernel_layer=hello.get("fs_layer") is not None)
            self._marks = self._take_marks()
        self.layers = _log_layers(_layers(self.as_nobody, hello.get("fs_layer"), self.config.check_outside),
                                  self.python, self.as_nobody)
        return self._proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        self._kill()
        self._unwatch()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._kill()
            self._unwatch()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- one exchange ------------------------------------------------------------------------------------
    def _reply(self, wall: float) -> dict:
        """The worker's next JSON line, or an error (the worker is then killed and will be restarted)."""
        proc = self._proc
        deadline = time.monotonic() + wall
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._kill()
                    self.restarts += 1
                    return {"error": f"TimeoutError: killed after {wall:g} s wall clock"}
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = proc.wait()
                    self._kill()
                    self.restarts += 1
                    return {"error": f"SandboxError: the worker died ({_describe_exit(code)})"}
                self._buffer += chunk
                if len(self._buffer) > 4 * self.config.output_chars + (1 << 20):
                    self._kill()
                    self.restarts += 1
                    return {"error": "OutputLimitError: the worker's reply exceeded the output limit"}
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _exchange(self, job: dict) -> dict:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        if isinstance(proc, dict):
            return proc
        check = self.config.check_outside
        if check:  # the folders' mtimes after the last job (or the start) stand for those before this job
            marks = self._marks
            started = time.time_ns()
        try:
            proc.stdin.write((json.dumps(job) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            self.restarts += 1
            return {"error": "SandboxError: the worker died before the job started"}
        res = self._reply(self.config.wall)
        if check and self._watched:  # held through a kill in `_reply`: an O_PATH descriptor outlives its folder
            after = self._take_marks()
            found = self._outside(marks, after, started)
            if self._proc is None:  # killed (timeout, death): the folder is gone with it
                self._unwatch()
            else:
                self._marks = after
            if found:
                self._kill()  # a worker that could write is not trusted with another job
                self.restarts += 1
                more = f" and {len(found) - 3} more" if len(found) > 3 else ""
                return {"error": f"SandboxEscape: the job created {', '.join(found[:3])}{more} outside its "
                                 "folder (the worker was replaced)"}
        return res

    def _watch(self, kernel_layer: bool) -> None:
        """Hold the folders the post-job check stats: the worker's own and /tmp, and without a kernel filesystem
        layer also /var/tmp and /dev/shm (an `fstat` of a held O_PATH descriptor is the cheapest look)."""
        self._unwatch()
        folders = (self._dir, *(_WATCHED if not kernel_layer else _WATCHED[:1]))
        for folder in folders:
            try:
                self._watched.append((folder, os.open(folder, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)))
            except (OSError, TypeError, AttributeError):
                pass

    def _unwatch(self) -> None:
        for _, fd in self._watched:
            os.close(fd)
        self._watched = []

    def _take_marks(self) -> tuple[int, ...]:
        """The mtimes of the watched folders (one fstat each)."""
        return tuple([os.stat(fd).st_mtime_ns for _, fd in self._watched])

    def _outside(self, before: tuple[int, ...], after: tuple[int, ...], started: int) -> list[str]:
        """What appeared during the job: anything in the worker's own folder, and in a world-writable folder
        whose mtime moved, the entries of the worker's uid changed since the job started."""
        if after == before:
            return []
        found = []
        since = started - 50_000_000  # file times follow a coarse clock (one tick behind time.time_ns)
        for (folder, _), old, new in zip(self._watched, before, after):
            if old == new:
                continue
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if folder == self._dir:
                            found.append(entry.path)
                            continue
                        st = entry.stat(follow_symlinks=False)
                        if st.st_uid == self._uid and st.st_ctime_ns >= since:
                            found.append(entry.path)
            except OSError:
                continue
        return found

    def probe(self) -> dict:
        """The worker's uid and resource limits (for tests and the datasheet)."""
        return self._exchange({"probe": True})

    def run(self, code: str, calls: Sequence[tuple[int, Sequence[int]]], *, entry: str = "f",
            validate: bool = True) -> ExecResult:
        """Run `entry(x)` for each `(x, latents)` in `calls`."""
        too_long = self._too_long(code)
        if too_long:
            return ExecResult(None, too_long)
        calls = [[int(x), [int(v) for v in lat]] for x, lat in calls]
        res = self._exchange({"code": code, "calls": calls, "entry": entry, "validate": bool(validate)})
        if "error" in res:
            return ExecResult(None, res["error"], res.get("stdout", ""))
        return ExecResult(tuple(res["values"]), None, res.get("stdout", ""))

    def check(self, code: str) -> str | None:
        """The static check's verdict on `code` ("SandboxViolation: ..." or another job error), or None."""
        too_long = self._too_long(code)
        if too_long:
            return too_long
        res = self._exchange({"code": code, "calls": [], "check_only": True})
        return res.get("error")

    def _too_long(self, code: Any) -> str | None:
        if not isinstance(code, str):
            return f"SandboxViolation: code of type {type(code).__name__}: expected str"
        if len(code) > self.config.max_source_chars:
            return (f"SandboxViolation: a source of {len(code)} characters: expected at most "
                    f"{self.config.max_source_chars} (max_source_chars)")
        return None

    def run_many(self, jobs: Sequence[tuple[str, Sequence[tuple[int, Sequence[int]]]]], *,
                 validate: bool = True) -> list[ExecResult]:
        return [self.run(code, calls, validate=validate) for code, calls in jobs]


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        hint = {"SIGXCPU": "CPU limit", "SIGKILL": "killed", "SIGSEGV": "crashed (likely the memory limit)",
                "SIGXFSZ": "file size limit"}.get(name, "signal")
        return f"{name}: {hint}"
    return f"exit status {code}"
