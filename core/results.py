"""The shared benchmark results format, `benchmarks/results/<name>.json`, and the statistics its claims rest on.

Every benchmark writes `command`, `git_commit`, `wall_seconds`, `rows` (one object per setting and seed)
and `claims`; the README tables are rendered from these files by `benchmarks/render.py`, so every number in a
README comes from a run.

A claim carries `id`, `statement`, `held`, `evidence` and what the verdict rests on: `n` (seeds or paired
measurements), `effect`, `interval` ([low, high]) and `test`. `held` is true when the interval excludes the null
in the claimed direction, false when it excludes it in the other direction, and null (inconclusive) when it
spans the null or n < 2. A statement that holds by construction is a sanity check, `kind: "check"`, not a claim.
A claim may name a `chance` baseline and an `oracle` (upper bound) that the renderer prints beside it.

Statistics (tested against scipy): `sample_sd` (ddof 1 everywhere), `t_interval`, `bootstrap_interval`,
`sign_test`, `wilson_interval`; censored values (a run that hit its budget, say) are carried as bounds through
`censored(value, ">=")`, never dropped. The claim builders are `paired_claim` (two arms over the same seeds),
`interval_claim` (one set of values against a fixed null), `rate_claim` (a rate against a null rate, Wilson),
`speedup_claim` (interleaved timing pairs against a goal) and `check`.
"""

from __future__ import annotations

import json
import math
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

RESULTS_DIR = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def claim(id: str, statement: str, held: bool | None, evidence: str, **stats: Any) -> dict[str, Any]:  # noqa: A002
    """One claim. `stats` carry what the verdict rests on: `n` (seeds or paired measurements) with `interval`
    ([low, high]), `effect` and `test`, or `kind="check"` for a sanity check that is not a claim of the method.
    `held=None` is an inconclusive verdict. Prefer the builders below, which compute the verdict."""
    return {"id": id, "statement": statement, "held": None if held is None else bool(held), "evidence": evidence,
            **stats}


def check(id: str, statement: str, held: bool, evidence: str, **fields: Any) -> dict[str, Any]:  # noqa: A002
    """A sanity check: a statement that holds by construction or tests the plumbing, not the paper."""
    return claim(id, statement, held, evidence, kind="check", **fields)


# ---------------------------------------------------------------------------------------------------------
# Statistics

CENSOR_SIDES = (">=", "<=")


def censored(value: float, side: str) -> dict[str, Any]:
    """A value known only as a bound: `">="` (the true value is at least `value`, e.g. a run that never reached
    its target within the budget) or `"<="`. Stored in rows as `{"value": v, "censored": side}`."""
    if side not in CENSOR_SIDES:
        raise ValueError(f"censored side {side!r}: expected one of {CENSOR_SIDES}")
    return {"value": float(value), "censored": side}


def _split_censored(values: Sequence[Any]) -> tuple[np.ndarray, list[str | None]]:
    """Values as floats (a bound stands at its bound) and each one's censoring side (None when exact)."""
    numbers, sides = [], []
    for v in values:
        if isinstance(v, Mapping) and "censored" in v:
            numbers.append(float(v["value"]))
            sides.append(str(v["censored"]))
        else:
            numbers.append(float(v))
            sides.append(None)
    return np.asarray(numbers, dtype=np.float64), sides


def sample_sd(values: Sequence[float]) -> float:
    """The sample standard deviation (ddof 1); nan for fewer than two values."""
    x = np.asarray(values, dtype=np.float64)
    return float(np.std(x, ddof=1)) if x.size >= 2 else float("nan")


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval for the mean; (nan, nan) for fewer than two values."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + level / 2, x.size - 1) * sample_sd(x) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def bootstrap_interval(values: Sequence[float], level: float = 0.95, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean (resampling with a fixed seed, so reruns agree)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


def sign_test(differences: Sequence[float]) -> float:
    """Two-sided exact sign test of a zero median difference; zero differences are dropped."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[d != 0]
    n, k = d.size, int((d > 0).sum())
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return float(min(1.0, 2 * tail))


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a rate."""
    from scipy import stats

    if n <= 0:
        return float("nan"), float("nan")
    z = stats.norm.ppf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def verdict(interval: Sequence[float], null: float = 0.0, higher_is_better: bool = True) -> bool | None:
    """True when the interval lies beyond `null` in the claimed direction, False when it lies beyond it in the
    other direction, None (inconclusive) when it spans it or is undefined."""
    lo, hi = float(interval[0]), float(interval[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    if not higher_is_better:
        lo, hi = -hi, -lo
        null = -null
    if lo > null:
        return True
    if hi < null:
        return False
    return None


def _verdict_of(values: np.ndarray, interval: tuple[float, float], null: float,
                higher_is_better: bool) -> tuple[bool | None, str]:
    """The interval's verdict, except when every value is the same (sd 0, a zero-width interval that says nothing
    about noise, e.g. two seeds one evaluation step apart): then the exact sign test of the values against
    `null` decides, at 5 % two-sided (two equal values can never hold; six can)."""
    if values.size < 2:
        return None, ""
    if np.ptp(values) > 1e-9 * max(1.0, float(np.max(np.abs(values)))):  # equal up to float rounding counts
        return verdict(interval, null, higher_is_better), ""
    p = sign_test(values - null)
    side = verdict((values[0], values[0]), null, higher_is_better)
    held = side if p < 0.05 else None
    return held, f"; every value equal (sd 0): decided by the sign test vs {_fmt(null)}, p={p:.2g}"


def _interval(values: np.ndarray, test: str, level: float) -> tuple[float, float]:
    if test == "t":
        return t_interval(values, level)
    if test == "bootstrap":
        return bootstrap_interval(values, level)
    raise ValueError(f"test {test!r}: expected 't' or 'bootstrap'")


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _bounds(lo: float, hi: float) -> list[float | None]:
    """An interval for JSON: undefined bounds (n < 2) become null rather than NaN."""
    return [v if math.isfinite(v) else None for v in (float(lo), float(hi))]


def _baseline_fields(chance: Any, oracle: Any) -> dict[str, Any]:
    fields = {}
    for name, value in (("chance", chance), ("oracle", oracle)):
        if value is None:
            continue
        if isinstance(value, (list, tuple, np.ndarray)):
            value = float(np.mean(np.asarray(value, dtype=np.float64)))
        fields[name] = float(value)
    return fields


def _censoring_note(sides: Sequence[str | None], higher_is_better: bool, held: bool | None) -> tuple[bool | None, str]:
    """A bound that could move the effect across the verdict (against a held claim, towards a failed one) makes
    it inconclusive; bounds that can only strengthen the verdict leave it standing."""
    against, towards = ("<=", ">=") if higher_is_better else (">=", "<=")
    n_censored = sum(s is not None for s in sides)
    if not n_censored:
        return held, ""
    if held is True and any(s == against for s in sides):
        return None, f"; {n_censored} censored value(s) could move the effect against the claim: inconclusive"
    if held is False and any(s == towards for s in sides):
        return None, f"; {n_censored} censored value(s) could move the effect towards the claim: inconclusive"
    return held, f"; {n_censored} censored value(s) carried at their bounds (the verdict is conservative)"


def interval_claim(id: str, statement: str, values: Sequence[Any], *, null: float = 0.0,  # noqa: A002
                   higher_is_better: bool = True, test: str = "t", level: float = 0.95, evidence: str = "",
                   label: str = "mean", chance: Any = None, oracle: Any = None, **fields: Any) -> dict[str, Any]:
    """One set of per-seed values (already an effect, e.g. paired differences or a gain) against a fixed null;
    `effect` is their mean, on the scale of `interval`."""
    x, sides = _split_censored(values)
    lo, hi = _interval(x, test, level)
    held, degenerate = _verdict_of(x, (lo, hi), null, higher_is_better)
    held, note = _censoring_note(sides, higher_is_better, held)
    text = (f"{label} {_fmt(float(x.mean()))} over n={x.size} (sd {_fmt(sample_sd(x))}), "
            f"{int(level * 100)}% {test}-interval [{_fmt(lo)}, {_fmt(hi)}] vs {_fmt(null)}{degenerate}{note}")
    return claim(id, statement, held, f"{evidence}; {text}" if evidence else text, n=int(x.size),
                 effect=float(x.mean()), interval=_bounds(lo, hi), test=f"{test}-interval of the mean vs {null:g}",
                 **_baseline_fields(chance, oracle), **fields)


def paired_claim(id: str, statement: str, ours: Sequence[Any], baseline: Sequence[Any], *,  # noqa: A002
                 higher_is_better: bool = True, margin: float = 0.0, test: str = "t", level: float = 0.95,
                 evidence: str = "", chance: Any = None, oracle: Any = None, **fields: Any) -> dict[str, Any]:
    """Two arms measured on the same seeds (same order): the interval of the paired differences ours - baseline
    must exclude `margin` in the claimed direction. Records both arms' means and sample sds."""
    a, sides_a = _split_censored(ours)
    b, sides_b = _split_censored(baseline)
    if a.shape != b.shape:
        raise ValueError(f"paired claim {id!r}: {a.size} values against {b.size}; expected one pair per seed")
    diff = a - b
    lo, hi = _interval(diff, test, level)
    held, degenerate = _verdict_of(diff, (lo, hi), margin, higher_is_better)
    # a bound on the baseline pushes the difference the opposite way to a bound on ours
    flip = {">=": "<=", "<=": ">=", None: None}
    held, note = _censoring_note(sides_a + [flip[s] for s in sides_b], higher_is_better, held)
    p_sign = sign_test(diff)
    text = (f"{_fmt(float(a.mean()))} +/- {_fmt(sample_sd(a))} vs {_fmt(float(b.mean()))} +/- {_fmt(sample_sd(b))} "
            f"(mean +/- sd, n={diff.size}); paired difference {_fmt(float(diff.mean()))}, "
            f"{int(level * 100)}% {test}-interval [{_fmt(lo)}, {_fmt(hi)}]"
            + (f" vs margin {_fmt(margin)}" if margin else "") + f"; sign test p={p_sign:.2g}{degenerate}{note}")
    return claim(id, statement, held, f"{evidence}; {text}" if evidence else text, n=int(diff.size),
                 effect=float(diff.mean()), interval=_bounds(lo, hi), test=f"paired {test}-interval",
                 sign_test_p=p_sign, ours_mean=float(a.mean()), baseline_mean=float(b.mean()),
                 **_baseline_fields(chance, oracle), **fields)


def rate_claim(id: str, statement: str, successes: int, n: int, *, null: float,  # noqa: A002
               higher_is_better: bool = True, level: float = 0.95, evidence: str = "", chance: Any = None,
               oracle: Any = None, **fields: Any) -> dict[str, Any]:
    """A rate (successes out of n trials) against a null rate, with the Wilson interval."""
    lo, hi = wilson_interval(successes, n, level)
    held = verdict((lo, hi), null, higher_is_better)
    rate = successes / n if n else float("nan")
    text = (f"{successes}/{n} = {_fmt(rate)}, {int(level * 100)}% Wilson interval [{_fmt(lo)}, {_fmt(hi)}] "
            f"vs {_fmt(null)}")
    return claim(id, statement, held, f"{evidence}; {text}" if evidence else text, n=int(n),
                 effect=float(rate - null), interval=_bounds(lo, hi), test="Wilson interval",
                 **_baseline_fields(chance, oracle), **fields)


def speedup_claim(id: str, statement: str, ratios: Sequence[float], goal: float, *,  # noqa: A002
                  label: str = "ours / peer speed", excluded: str = "") -> dict[str, Any]:
    """A speed claim over interleaved measurement pairs: held only if every pair's ratio reaches `goal`."""
    ratios = [float(r) for r in ratios]
    lo, hi, med = min(ratios), max(ratios), float(np.median(ratios))
    evidence = (f"{label} {med:.2f}x median over {len(ratios)} interleaved pairs (range {lo:.2f}-{hi:.2f}x); "
                f"held only if every pair is >= {goal:g}x" + (f"; {excluded}" if excluded else ""))
    return claim(id, statement, lo >= goal, evidence, n=len(ratios), interval=[lo, hi], effect=med,
                 test="every interleaved pair >= goal", pair_ratios=ratios)


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
    if (isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__jax_array__")
            or type(value).__module__.startswith("jax")):
        array = np.asarray(value)
        return array.item() if array.ndim == 0 else array.tolist()
    return value


def claim_problems(c: Mapping[str, Any]) -> list[str]:
    """What keeps a claim from meeting the results format (empty when it does): the four keys, and for a claim
    that is not a sanity check, `n` >= 1 and an `interval` of two numbers (null bounds when n < 2)."""
    missing = {"id", "statement", "held", "evidence"} - set(c)
    if missing:
        return [f"missing keys {sorted(missing)}"]
    if c.get("held") not in (True, False, None):
        return [f"held={c.get('held')!r}: expected true, false or null (inconclusive)"]
    if c.get("kind") == "check":
        return []
    problems = []
    if not isinstance(c.get("n"), int) or c["n"] < 1:
        problems.append(f"n={c.get('n')!r}: expected the number of seeds or paired measurements")
    interval = c.get("interval")
    if not (isinstance(interval, (list, tuple)) and len(interval) == 2):
        problems.append(f"interval={interval!r}: expected [low, high] (or kind='check' for a sanity check)")
    elif c.get("held") is not None and not all(isinstance(v, (int, float)) and math.isfinite(v) for v in interval):
        problems.append(f"interval={list(interval)!r}: a held / not-held verdict needs finite bounds")
    return problems


def write_results(name: str, *, rows: Sequence[Mapping[str, Any]], claims: Sequence[Mapping[str, Any]],
                  wall_seconds: float, command: str | None = None, directory: str | pathlib.Path | None = None,
                  **extra: Any) -> pathlib.Path:
    """Write `<directory or benchmarks/results>/<name>.json`; extra keyword fields (e.g. `scale`) are kept."""
    for c in claims:
        problems = claim_problems(c)
        if problems:
            raise ValueError(f"claim {c.get('id', c)!r}: {'; '.join(problems)}")
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


def recompute_claims(path: str | pathlib.Path, make_claims: Any) -> dict[str, Any]:
    """Rebuild a committed results file's claims from what it stores: `make_claims(record) -> claims`, checked
    like `write_results` does; `command`, `git_commit`, `wall_seconds` and `rows` stay those of the run, and
    `claims_recomputed` names the commit that recomputed them. Returns the rewritten record."""
    path = pathlib.Path(path)
    record = json.loads(path.read_text())
    claims = _jsonable(list(make_claims(record)))
    for c in claims:
        problems = claim_problems(c)
        if problems:
            raise ValueError(f"{path.name} claim {c.get('id', c)!r}: {'; '.join(problems)}")
    record["claims"] = claims
    record["claims_recomputed"] = f"{git_commit()[:12]} (from the stored rows)"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def load_results(name: str, directory: str | pathlib.Path | None = None) -> dict[str, Any]:
    path = (pathlib.Path(directory) if directory is not None else RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no results file {path}: run the benchmark that writes it")
    return json.loads(path.read_text())
