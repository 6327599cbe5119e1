"""Compilation off the critical path of short runs: JAX's persistent compilation cache, and compile-time accounting.

On 2 CPU cores a short run spends most of its time compiling (a 2-epoch PhaseFormer run: ~60 % of its wall
time). `iclr26 run` and `iclr26 demo` therefore turn on JAX's persistent cache by default, so a second run of
the same program loads its executables from disk instead of compiling them:

- the cache folder is `$ICLR26_COMPILE_CACHE`, else `$XDG_CACHE_HOME/iclr26-jax/xla`, else
  `~/.cache/iclr26-jax/xla`; `ICLR26_COMPILE_CACHE=off` (or `--no-compile-cache`) turns it off;
- JAX keys each entry on the program, the compile options, the backend and the jax / jaxlib versions, so a
  stale entry is never loaded; the folder is capped (2 GiB by default): `trim_cache` removes the least recently
  used entries once per process, when the cache is turned on.

`CompileTimer` sums the seconds JAX reports for tracing, lowering and backend compilation (its monitoring
events), and counts persistent-cache hits, so every run's metrics say how much of the wall time was compiling.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

ENV_VAR = "ICLR26_COMPILE_CACHE"
OFF_VALUES = ("off", "0", "false", "no", "none", "")

# JAX's monitoring events (jax/_src/dispatch.py and compiler.py)
_DURATION_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_seconds",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_seconds",
    "/jax/core/compile/backend_compile_duration": "backend_compile_seconds",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_load_seconds",
}
_COUNT_EVENTS = {
    "/jax/compilation_cache/cache_hits": "cache_hits",
    "/jax/compilation_cache/cache_misses": "cache_misses",
}


def default_cache_dir() -> pathlib.Path | None:
    """The cache folder the CLI uses, or None when `$ICLR26_COMPILE_CACHE` turns the cache off."""
    value = os.environ.get(ENV_VAR)
    if value is not None:
        return None if value.strip().lower() in OFF_VALUES else pathlib.Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "iclr26-jax" / "xla"


def enable_persistent_cache(path: str | os.PathLike | None = None, *, min_compile_seconds: float = 0.0,
                            max_bytes: int = 2 << 30) -> pathlib.Path | None:
    """Turn on JAX's persistent compilation cache in `path` (default: `default_cache_dir()`); returns the
    folder, or None when the cache is off.

    Every program is cached by default (`min_compile_seconds` 0): on 2 CPU cores a short run is dozens of
    0.05-0.3 s compiles, and writing them cost nothing measurable (regression tiny: 8.9 s with, 8.8-10.2 s
    without). Call it before the first compile of the process: JAX decides once per process whether the cache
    is used.

    The folder is kept under `max_bytes` here, once, by `trim_cache`, and JAX's own size cap stays off: JAX's
    LRU eviction lists and stats every entry of the folder on every write (jax 0.10, `lru_cache.put`), so a
    cold run's writes cost time quadratic in the folder's size: 1,500 writes of 40 kB took 53 s with the cap
    and 0.09 s without it on this 2-core machine, and a cold `iclr26 demo` writes about 1,100 entries.
    """
    import jax
    folder = pathlib.Path(path).expanduser() if path is not None else default_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a read-only home must not stop a run: it only compiles as before
        import warnings
        warnings.warn(f"compile cache off: cannot create {folder} ({err.strerror})", stacklevel=2)
        return None
    trim_cache(folder, max_bytes)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_compilation_cache_max_size", -1)  # JAX's default: no per-write eviction scan (see above)
    return folder


_ENTRY_SUFFIX, _ATIME_SUFFIX = "-cache", "-atime"  # JAX's file names: KEY-cache, and KEY-atime when it evicts


def trim_cache(folder: str | os.PathLike, max_bytes: int, *, keep_fraction: float = 0.8) -> int:
    """Remove the least recently used entries of a JAX compile-cache folder when their total size is over
    `max_bytes`, down to `keep_fraction * max_bytes` (so that the next runs do not trim again at once); returns
    the number of entries removed.

    Recency is the later of the entry's modification and access times (the kernel's relatime updates the access
    time on the first read after a write and then once a day; on a noatime mount the order is by write time).
    Entries that vanish meanwhile (another process trimming) are skipped.
    """
    entries = []
    total = 0
    with os.scandir(folder) as it:
        for e in it:
            if not e.name.endswith(_ENTRY_SUFFIX):
                continue
            try:
                st = e.stat()
            except FileNotFoundError:
                continue
            entries.append((max(st.st_mtime, st.st_atime), e.path, st.st_size))
            total += st.st_size
    if total <= max_bytes:
        return 0
    removed = 0
    target = keep_fraction * max_bytes
    for _, entry, size in sorted(entries):
        if total <= target:
            break
        for name in (entry, entry[: -len(_ENTRY_SUFFIX)] + _ATIME_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        total -= size
        removed += 1
    return removed


# XLA options for a program that runs once per run (parameter initialisation, a one-off set-up): its compile
# time is all that counts, and XLA:CPU's optimisation passes dominate it. A conv net's jitted initialiser
# compiles in 0.35-0.6 s with these against 1.0-2.1 s by default (deepfake_attack's models, idle 2 cores).
RUN_ONCE_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def jit_run_once(fn: Any, **jit_kwargs: Any) -> Any:
    """`jax.jit(fn)` compiled without XLA's optimisation passes, for a program that runs once (see
    RUN_ONCE_OPTIONS); the values it computes are the same, only its run time may be longer."""
    import jax
    return jax.jit(fn, compiler_options=RUN_ONCE_OPTIONS, **jit_kwargs)


_CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                  "jax_persistent_cache_min_entry_size_bytes", "jax_compilation_cache_max_size")


@contextlib.contextmanager
def persistent_cache(path: str | os.PathLike) -> Iterator[pathlib.Path | None]:
    """`enable_persistent_cache(path)` for the duration of a block, then the previous settings back.

    For a process that has compiled already (a test module that reruns a trainer, a benchmark's arms): JAX's
    cache object is reset on entry and on exit, so the block reads and writes `path` and nothing after it does.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache
    before = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    folder = enable_persistent_cache(path)
    compilation_cache.reset_cache()
    try:
        yield folder
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


class CompileTimer:
    """Context manager summing JAX's compile events while it is open.

        with CompileTimer() as timer:
            run()
        timer.summary()  # {"compile_seconds": ..., "trace_seconds": ..., "cache_hits": ..., ...}

    `compile_seconds` is trace + lowering + backend compilation (what a persistent-cache hit saves, less the
    load). Events from every thread are counted; nested timers each see all events.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals: dict[str, float] = dict.fromkeys(_DURATION_EVENTS.values(), 0.0)
        self.counts: dict[str, int] = dict.fromkeys(_COUNT_EVENTS.values(), 0)
        self.compiles = 0

    def _on_duration(self, event: str, seconds: float, **_: Any) -> None:
        name = _DURATION_EVENTS.get(event)
        if name is not None:
            with self._lock:
                self.totals[name] += float(seconds)
                self.compiles += name == "backend_compile_seconds"

    def _on_event(self, event: str, **_: Any) -> None:
        name = _COUNT_EVENTS.get(event)
        if name is not None:
            with self._lock:
                self.counts[name] += 1

    def __enter__(self) -> CompileTimer:
        import jax.monitoring
        jax.monitoring.register_event_duration_secs_listener(self._on_duration)
        jax.monitoring.register_event_listener(self._on_event)
        return self

    def __exit__(self, *exc: Any) -> None:
        import jax.monitoring
        jax.monitoring.unregister_event_duration_listener(self._on_duration)
        jax.monitoring.unregister_event_listener(self._on_event)

    @property
    def compile_seconds(self) -> float:
        t = self.totals
        return t["trace_seconds"] + t["lower_seconds"] + t["backend_compile_seconds"]

    def summary(self) -> dict[str, float | int]:
        """The run-metrics fields: compile seconds, backend compiles, persistent-cache hits and misses
        (the parts of compile_seconds are in `totals`)."""
        return {"compile_seconds": round(self.compile_seconds, 2), "backend_compiles": self.compiles,
                **{f"compile_{k}": v for k, v in self.counts.items()}}
