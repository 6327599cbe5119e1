"""A sandboxed executor for benchmark programs (and anything else untrusted that claims to be one).

Layers, outermost first:

1. a separate worker process (`python -I -S`, empty environment, a fresh empty working folder), started in its
   own session and killed (the whole process group) when a job runs past its wall-clock limit; when the
   parent runs as root and the interpreter is readable by `nobody`, the worker runs as `nobody`. The worker
   is spawned, never forked with Python code in the child: no `preexec_fn`, so the child runs only the C
   fork-exec of `subprocess` (the `spawn` guarantee) and a multithreaded JAX parent cannot deadlock in it;
2. resource limits the worker sets on itself first, before it reads any job: address space (`RLIMIT_AS`),
   file size 0 (`RLIMIT_FSIZE`: no file writes), no new processes (`RLIMIT_NPROC` 0; the kernel ignores it
   for root, hence layer 1's user switch, and a root parent that cannot switch refuses to start a worker
   unless `allow_root_without_nproc`), no core dumps, total CPU seconds, and `RLIMIT_NOFILE` = 3: no file,
   socket or pipe can be opened at all (no network, no file access);
3. a per-job CPU timer (`ITIMER_PROF`) that raises `TimeoutError` inside the job, a recursion limit, and an
   output cap on `print`;
4. restricted builtins (no `__import__`, `open`, `eval`, `exec`, `compile`, `getattr`, `globals`, ...) and a
   static check of the source (an allow-list of syntax: no import, try, with, lambda, class, global; no
   name or attribute that starts with an underscore, which closes the `().__class__.__subclasses__()` route).
   The check parses the untrusted source inside the worker, under its limits and CPU timer: a huge or deeply
   nested program costs that job (a MemoryError, RecursionError or a dead worker), never the parent; the
   parent only caps the source's length before sending it.

Each job ends with values or with one clear error line; a job that kills its worker costs only that job (the
worker is restarted). The latent draw `random.randint(lo, hi)` is served by a shim that returns the latent
values the caller fixes, so one program can be run under every r (`verify.py`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
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

    def __post_init__(self):
        for name in ("cpu_seconds", "memory_mb", "output_chars", "recursion_limit", "total_cpu_seconds",
                     "max_source_chars"):
            if getattr(self, name) <= 0:
                raise BadInputError(f"{name}={getattr(self, name)}: expected > 0")
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


# The worker: stdlib only, limits itself before anything else, then reads one JSON job per line and writes
# one JSON result per line. `_POLICY` (the static check) is prepended to it.
_WORKER_MAIN = r'''
import json, resource, signal, sys
cfg = json.loads(sys.argv[1])
for name, value in (("RLIMIT_AS", cfg["memory_bytes"]), ("RLIMIT_FSIZE", 0), ("RLIMIT_CORE", 0),
                    ("RLIMIT_CPU", cfg["total_cpu_seconds"]), ("RLIMIT_NPROC", 0), ("RLIMIT_NOFILE", 3)):
    hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL one second later
    resource.setrlimit(getattr(resource, name), (value, hard))
sys.setrecursionlimit(cfg["recursion_limit"] + 50)

class CPUTimeout(Exception):
    pass

def on_timer(signum, frame):
    raise TimeoutError("CPU time limit of %g s exceeded" % cfg["cpu_seconds"])

signal.signal(signal.SIGPROF, on_timer)
try:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
except (AttributeError, ValueError):
    pass

class OutputLimitError(Exception):
    pass

class Latents:
    """random.randint(lo, hi) returns the fixed latents in draw order (the hidden r of the program)."""
    def __init__(self):
        self.values, self.pos = (), 0
    def set(self, values):
        self.values, self.pos = tuple(values), 0
    def randint(self, lo, hi):
        if self.pos >= len(self.values):
            raise ValueError("the program draws more latents than were given")
        v = self.values[self.pos]
        self.pos += 1
        if not lo <= v <= hi:
            raise ValueError("latent %r outside randint(%r, %r)" % (v, lo, hi))
        return v

SAFE = ["abs", "min", "max", "sum", "len", "range", "int", "bool", "list", "tuple", "dict", "set", "sorted",
        "reversed", "enumerate", "zip", "divmod", "all", "any", "isinstance", "round", "str", "float",
        "ValueError", "TypeError", "ZeroDivisionError", "IndexError", "KeyError", "True", "False", "None"]
import builtins as _b
BASE = {name: getattr(_b, name) for name in SAFE if hasattr(_b, name)}

def run_job(job):
    out = []
    used = [0]
    def safe_print(*args, sep=" ", end="\n"):
        text = sep.join(str(a) for a in args) + end
        used[0] += len(text)
        if used[0] > cfg["output_chars"]:
            raise OutputLimitError("output limit of %d characters exceeded" % cfg["output_chars"])
        out.append(text)
    latents = Latents()
    env = {"__builtins__": dict(BASE, print=safe_print), "random": latents}
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
            latents.set(lat)
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

for line in sys.stdin:
    job = json.loads(line)
    if job.get("probe"):
        import os
        res = {"uid": os.getuid(), "limits": {n: resource.getrlimit(getattr(resource, n))[0] for n in
               ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_CORE")}}
    else:
        res = run_job(job)
    try:
        text = json.dumps(res)
    except (TypeError, ValueError) as err:
        text = json.dumps({"error": "ResultError: %s" % err})
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
'''
_WORKER = _POLICY + _WORKER_MAIN


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


class Sandbox:
    """A restartable worker process; use as a context manager or call `close()`.

    `run(code, calls)` executes `code` (which must define `f(x)`) once per call `(x, latents)` and returns an
    `ExecResult`; `run_many` does that for a list of jobs. Violations of the static check are errors of the
    job (the worker never sees such code) unless `validate=False`.
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
        self.restarts = 0

    # -- process management --------------------------------------------------------------------------
    def _start(self) -> subprocess.Popen:
        self._dir = tempfile.mkdtemp(prefix="cf-sandbox-")
        kwargs: dict[str, Any] = {}
        if self.as_nobody:
            os.chmod(self._dir, 0o755)  # readable, not writable, by nobody
            kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
        cfg = {"cpu_seconds": self.config.cpu_seconds, "output_chars": self.config.output_chars,
               "recursion_limit": self.config.recursion_limit,
               "memory_bytes": self.config.memory_mb * 1024 * 1024,
               "total_cpu_seconds": int(self.config.total_cpu_seconds)}
        # No preexec_fn: the user switch, new session and fd closing are done by subprocess's C fork-exec,
        # and the worker sets its own limits before reading a job (see the module docstring, layer 1).
        self._proc = subprocess.Popen(
            [self.python, "-I", "-S", "-c", _WORKER, json.dumps(cfg)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=self._dir, env={}, close_fds=True,
            start_new_session=True, **kwargs)
        self._buffer = b""
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

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._kill()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- one exchange ------------------------------------------------------------------------------------
    def _exchange(self, job: dict) -> dict:
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        try:
            proc.stdin.write((json.dumps(job) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            self.restarts += 1
            return {"error": "SandboxError: the worker died before the job started"}
        deadline = time.monotonic() + self.config.wall
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self._kill()
                    self.restarts += 1
                    return {"error": f"TimeoutError: killed after {self.config.wall:g} s wall clock"}
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
