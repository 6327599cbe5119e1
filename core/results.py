"""The shared benchmark results format: `benchmarks/results/<name>.json`.

Every benchmark writes `command`, `git_commit`, `wall_seconds`, `rows` (one object per setting and seed)
and `claims` (`id`, `statement`, `held`, `evidence`); the README tables are rendered from these files by
`benchmarks/render.py`, so every number in a README comes from a run.
"""

from __future__ import annotations

import json
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

RESULTS_DIR = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def claim(id: str, statement: str, held: bool, evidence: str, **stats: Any) -> dict[str, Any]:  # noqa: A002
    """One claim. `stats` carry what the verdict rests on: `n` (seeds or paired measurements) with `ci95` or
    `interval` ([low, high]), or `kind="check"` for a sanity check that is not a claim of the method."""
    return {"id": id, "statement": statement, "held": bool(held), "evidence": evidence, **stats}


def speedup_claim(id: str, statement: str, ratios: Sequence[float], goal: float, *,  # noqa: A002
                  label: str = "ours / peer speed", excluded: str = "") -> dict[str, Any]:
    """A speed claim over interleaved measurement pairs: held only if every pair's ratio reaches `goal`."""
    ratios = [float(r) for r in ratios]
    lo, hi, med = min(ratios), max(ratios), float(np.median(ratios))
    evidence = (f"{label} {med:.2f}x median over {len(ratios)} interleaved process pairs (range {lo:.2f}-{hi:.2f}x); "
                f"held only if every pair is >= {goal:g}x" + (f"; {excluded}" if excluded else ""))
    return claim(id, statement, lo >= goal, evidence, n=len(ratios), interval=[lo, hi], pair_ratios=ratios)


def git_commit() -> str:
    """The checked-out commit, with `+dirty` when code has uncommitted changes (a benchmark's own outputs under
    benchmarks/results, written before its JSON, do not count)."""
    root = RESULTS_DIR.parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__jax_array__") or type(value).__module__.startswith("jax"):
        array = np.asarray(value)
        return array.item() if array.ndim == 0 else array.tolist()
    return value


def write_results(name: str, *, rows: Sequence[Mapping[str, Any]], claims: Sequence[Mapping[str, Any]],
                  wall_seconds: float, command: str | None = None, directory: str | pathlib.Path | None = None,
                  **extra: Any) -> pathlib.Path:
    """Write `<directory or benchmarks/results>/<name>.json`; extra keyword fields (e.g. `scale`) are kept."""
    for c in claims:
        missing = {"id", "statement", "held", "evidence"} - set(c)
        if missing:
            raise ValueError(f"claim {c.get('id', c)!r}: missing keys {sorted(missing)}")
    record = {
        "command": command or shlex.join([pathlib.Path(sys.executable).name, *sys.argv]),
        "git_commit": git_commit(),
        "wall_seconds": round(float(wall_seconds), 2),
        "rows": _jsonable(list(rows)),
        "claims": _jsonable(list(claims)),
        **_jsonable(extra),
    }
    directory = pathlib.Path(directory) if directory is not None else RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def load_results(name: str, directory: str | pathlib.Path | None = None) -> dict[str, Any]:
    path = (pathlib.Path(directory) if directory is not None else RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no results file {path}: run the benchmark that writes it")
    return json.loads(path.read_text())
