"""The long-term forecasting data protocol shared by the forecasting area.

It follows the Informer / Time-Series-Library (TSL) convention that published long-term forecasting numbers use:

- ETT splits by calendar: 12 months train, 4 months validation, 4 months test (hourly rows: 12*30*24 / 4*30*24 /
  4*30*24; the 15-minute ETTm files: four times as many rows). Any other CSV: 70 % / 10 % / 20 % of rows (TSL's
  ``Dataset_Custom``).
- Validation and test windows start ``seq_len`` rows before their border, so that the first target of each split
  is its first row.
- A StandardScaler (mean, population std) fitted on the training rows only, applied to every split; metrics are
  computed on the scaled values.
- Windows with stride 1; every test window is evaluated (no ``drop_last``): a split of ``n`` rows has
  ``n - seq_len - pred_len + 1`` windows (ETTh test at L = 720: ``2880 - H + 1``).

The scaled splits stay whole ``(T, C)`` arrays; windows are cut inside jitted code by :func:`windows` from start
indices, so a whole epoch can run in one ``lax.scan`` without materialising ``(N, L, C)`` on the host.

The four ETT files ship in ``forecasting/datasets/ett`` (CC BY-ND 4.0, unmodified; checksums verified on load).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import pathlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from core.data import MissingInputError, input_file

ETT_DIR = pathlib.Path(__file__).resolve().parent / "datasets" / "ett"
ETT_NAMES = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")
ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
SPLIT_KINDS = ("auto", "ett_hour", "ett_minute", "ratio")
_HOURS_PER_MONTH = 30 * 24


@dataclasses.dataclass(frozen=True)
class ForecastData:
    """Scaled train / val / test series of one dataset, cut for one (seq_len, pred_len).

    ``train``, ``val``, ``test``: float32 ``(T_split, C)`` rows (val / test include their ``seq_len`` leading rows).
    ``mean``, ``std``: the scaler fitted on the training rows, ``(C,)``. ``borders``: the row ranges in the file.
    """

    name: str
    columns: tuple[str, ...]
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    seq_len: int
    pred_len: int
    borders: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]

    @property
    def num_channels(self) -> int:
        return self.train.shape[1]

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "val", "test"):
            raise BadInputError(f"split={name!r}: expected 'train', 'val' or 'test'")
        return getattr(self, name)

    def num_windows(self, split: str) -> int:
        return num_windows(len(self.split(split)), self.seq_len, self.pred_len)

    def inverse_transform(self, values: np.ndarray) -> np.ndarray:
        """Map scaled values (..., C) back to the file's units."""
        return np.asarray(values) * self.std + self.mean


def num_windows(num_rows: int, seq_len: int, pred_len: int) -> int:
    """Stride-1 windows of ``seq_len`` inputs and ``pred_len`` targets in ``num_rows`` rows."""
    return max(num_rows - seq_len - pred_len + 1, 0)


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_checksums(path: pathlib.Path) -> dict[str, str]:
    """Parse a ``sha256sum``-format file into {file name: hex digest}."""
    sums = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.strip().lstrip("*")] = digest
    return sums


def ett_path(name: str, *, verify: bool = True) -> pathlib.Path:
    """Path of a shipped ETT file, its SHA-256 checked against ``SHA256SUMS`` (a modified copy is an error)."""
    if name not in ETT_NAMES:
        raise BadInputError(f"dataset={name!r}: expected one of {ETT_NAMES} or a path to a CSV file")
    path = ETT_DIR / f"{name}.csv"
    if not path.is_file():
        raise MissingInputError(f"{path}: the shipped ETT file is missing (reinstall the package)")
    if verify:
        expected = read_checksums(ETT_DIR / "SHA256SUMS")[path.name]
        actual = sha256(path)
        if actual != expected:
            raise BadInputError(f"{path}: sha256 {actual} differs from the shipped checksum {expected}; "
                                "the data file was modified or truncated")
    return path


def read_csv(path: str | pathlib.Path, *, columns: Sequence[str] | None = None,
             date_column: str = "date") -> tuple[tuple[str, ...], np.ndarray]:
    """Read a forecasting CSV: a header, a date column, then numeric variables (TSL layout).

    Returns (variable names, float32 values ``(T, C)``). ``columns`` selects and orders variables; every named
    column must exist. Raises FileNotFoundError / ValueError with the file and the problem.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise MissingInputError(f"{path}: no such data file")
    expected = f"a CSV file with a header line '{date_column},<var1>,<var2>,...'"
    input_file(path, expected, allow_empty=True)
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise BadInputError(f"{path}: empty file; expected {expected}") from None
            rows = [row for row in reader if row]
    except (UnicodeDecodeError, csv.Error) as err:
        raise BadInputError(f"{path}: not a readable text CSV ({type(err).__name__}: {err}); expected "
                            f"{expected}") from None
    if not header or header[0] != date_column:
        raise BadInputError(f"{path}: first column is {header[:1]}; expected the date column {date_column!r} first "
                            "and numeric variables after it")
    variables = header[1:]
    if not variables:
        raise BadInputError(f"{path}: no variable columns after {date_column!r}")
    if columns is not None:
        missing = [c for c in columns if c not in variables]
        if missing:
            raise BadInputError(f"{path}: columns {missing} not found; the file has {variables}")
        index = [variables.index(c) for c in columns]
    else:
        index = list(range(len(variables)))
    bad = [i for i, row in enumerate(rows) if len(row) != len(header)]
    if bad:
        raise BadInputError(f"{path}: data line {bad[0] + 2} has {len(rows[bad[0]])} fields; expected {len(header)}")
    try:
        values = np.asarray([[float(row[1 + j]) for j in index] for row in rows], dtype=np.float64)
    except ValueError as e:
        raise BadInputError(f"{path}: non-numeric value in a variable column ({e})") from None
    values = values.reshape(len(rows), len(index))
    nonfinite = np.argwhere(~np.isfinite(values))
    if len(nonfinite):
        line, col = nonfinite[0]
        raise BadInputError(f"{path}: {len(nonfinite)} missing or non-finite values, the first "
                            f"{rows[line][1 + index[col]]!r} in column {variables[index[col]]!r} "
                            f"on data line {line + 2}; "
                            "expected finite numbers (fill or drop the gaps first)")
    return tuple(variables[j] for j in index), values


def split_borders(num_rows: int, seq_len: int, kind: str) -> tuple[tuple[int, int], ...]:
    """Row ranges [start, end) of train / val / test, val and test starting ``seq_len`` rows early (TSL)."""
    if kind in ("ett_hour", "ett_minute"):
        per_month = _HOURS_PER_MONTH * (4 if kind == "ett_minute" else 1)
        n_train, n_val, n_test = 12 * per_month, 4 * per_month, 4 * per_month
        if num_rows < n_train + n_val + n_test:
            raise BadInputError(f"{num_rows} rows: the {kind} split needs {n_train + n_val + n_test} rows (12/4/4 "
                                "months)")
    elif kind == "ratio":
        n_train = int(num_rows * 0.7)
        n_test = int(num_rows * 0.2)
        n_val = num_rows - n_train - n_test
    else:
        raise BadInputError(f"split={kind!r}: expected one of {SPLIT_KINDS}")
    b_train = (0, n_train)
    b_val = (n_train - seq_len, n_train + n_val)
    b_test = (n_train + n_val - seq_len, n_train + n_val + n_test)
    if min(b_val[0], b_test[0]) < 0:
        raise BadInputError(f"seq_len={seq_len}: longer than the training split ({n_train} rows)")
    return b_train, b_val, b_test


def load(dataset: str | pathlib.Path, seq_len: int, pred_len: int, *, split: str = "auto",
         columns: Sequence[str] | None = None, scale: bool = True, verify: bool = True) -> ForecastData:
    """Load a dataset (an ETT name or a CSV path), split, scale on train, and check every split has a window.

    ``split="auto"``: the ETT calendar split for ETTh* / ETTm* names (and files named so), else 70/10/20.
    """
    if seq_len < 1 or pred_len < 1:
        raise BadInputError(f"seq_len={seq_len}, pred_len={pred_len}: expected positive integers")
    if split not in SPLIT_KINDS:
        raise BadInputError(f"split={split!r}: expected one of {SPLIT_KINDS}")
    name = str(dataset)
    if name in ETT_NAMES:
        path = ett_path(name, verify=verify)
        columns = ETT_COLUMNS if columns is None else columns
    else:
        path = pathlib.Path(dataset)
        name = path.stem
    variables, values = read_csv(path, columns=columns)
    if split == "auto":
        split = {"ETTh": "ett_hour", "ETTm": "ett_minute"}.get(name[:4], "ratio")
    try:
        borders = split_borders(len(values), seq_len, split)
    except BadInputError as err:
        raise BadInputError(f"{path}: {err}") from None
    parts = [values[a:b] for a, b in borders]
    for part_name, part in zip(("train", "val", "test"), parts):
        if num_windows(len(part), seq_len, pred_len) < 1:
            raise BadInputError(f"{path}: the {part_name} split has {len(part)} rows, too short for seq_len + pred_len "
                                f"= {seq_len + pred_len}")
    if scale:
        mean = parts[0].mean(axis=0)
        std = parts[0].std(axis=0)
        std = np.where(std > 0, std, 1.0)
    else:
        mean, std = np.zeros(values.shape[1]), np.ones(values.shape[1])
    scaled = [((p - mean) / std).astype(np.float32) for p in parts]
    return ForecastData(name=name, columns=tuple(variables), train=scaled[0], val=scaled[1], test=scaled[2],
                        mean=mean.astype(np.float32), std=std.astype(np.float32), seq_len=seq_len,
                        pred_len=pred_len, borders=tuple(borders))


def windows(series: jax.Array, starts: jax.Array, seq_len: int, pred_len: int) -> tuple[jax.Array, jax.Array]:
    """Cut windows from a ``(T, C)`` series at ``starts (B,)``: inputs ``(B, L, C)`` and targets ``(B, H, C)``.

    Works under jit with traced starts (dynamic slices); starts are assumed valid (< T - L - H + 1).
    """
    num_channels = series.shape[1]

    def cut(s):
        w = jax.lax.dynamic_slice(series, (s, 0), (seq_len + pred_len, num_channels))
        return w[:seq_len], w[seq_len:]

    return jax.vmap(cut)(starts)


def batch_starts(num: int, batch_size: int, perm: jax.Array | np.ndarray | None = None):
    """Start indices padded to whole batches: (starts ``(nb, B)``, mask ``(nb, B)``); nb = ceil(num / B).

    Every window appears once (no drop_last); padded slots repeat index 0 and carry mask 0.
    """
    nb = -(-num // batch_size)
    pad = nb * batch_size - num
    xp = jnp if isinstance(perm, jax.Array) else np
    idx = xp.arange(num) if perm is None else perm
    idx = xp.concatenate([idx, xp.zeros(pad, dtype=idx.dtype)])
    mask = xp.concatenate([xp.ones(num, np.float32), xp.zeros(pad, np.float32)])
    return idx.reshape(nb, batch_size), mask.reshape(nb, batch_size)
