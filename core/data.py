"""Deterministic, resumable batching over in-memory arrays, and a tensorflow-datasets adapter.

The loader's position (epoch, batch index) is small plain data saved with every checkpoint, so a resumed
run sees exactly the batches an uninterrupted run would. Under several processes each one yields its own
rows of the same global permutation (by `jax.process_index()`), which `core.sharding.shard_batch` assembles.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np


def _check_arrays(arrays: Mapping[str, np.ndarray]) -> int:
    if not arrays:
        raise ValueError("arrays: expected a non-empty mapping of name -> array")
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"arrays: expected the same number of rows in every array, got {lengths}")
    return next(iter(lengths.values()))


class ArrayLoader:
    """Infinite iterator of shuffled batches (dicts of numpy arrays); `state()`/`restore()` resume it exactly.

    `batch_size` is the global batch; with P processes each yields `batch_size // P` rows of it.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], batch_size: int, *, seed: int = 0,
                 shuffle: bool = True, drop_remainder: bool = True,
                 process_index: int | None = None, process_count: int | None = None):
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.num_rows = _check_arrays(self.arrays)
        self.process_index = jax.process_index() if process_index is None else process_index
        self.process_count = jax.process_count() if process_count is None else process_count
        if batch_size < 1 or batch_size % self.process_count:
            raise ValueError(f"batch_size={batch_size}: expected a positive multiple of the "
                             f"{self.process_count} processes")
        if batch_size > self.num_rows:
            raise ValueError(f"batch_size={batch_size}: expected at most the {self.num_rows} rows of data")
        if not drop_remainder:
            raise ValueError("drop_remainder=False: training batches keep a static shape; use eval_batches "
                             "to see every example once")
        self.batch_size, self.seed, self.shuffle = batch_size, seed, shuffle
        self.batches_per_epoch = self.num_rows // batch_size
        self.epoch, self.index = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_rows)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.index == self.batches_per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
            self._order = self._permutation(self.epoch)
        rows = self._order[self.index * self.batch_size:(self.index + 1) * self.batch_size]
        local = self.batch_size // self.process_count
        rows = rows[self.process_index * local:(self.process_index + 1) * local]
        self.index += 1
        return {k: v[rows] for k, v in self.arrays.items()}

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed}

    def restore(self, state: Mapping[str, Any]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(f"loader state seed={state['seed']}: expected this loader's seed {self.seed}")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._permutation(self.epoch)


def eval_batches(arrays: Mapping[str, np.ndarray], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """Every row once, in order; the last batch is zero-padded to `batch_size` and `mask` marks real rows."""
    num_rows = _check_arrays(arrays)
    for start in range(0, num_rows, batch_size):
        stop = min(start + batch_size, num_rows)
        batch = {}
        for k, v in arrays.items():
            chunk = np.asarray(v[start:stop])
            pad = batch_size - len(chunk)
            batch[k] = np.concatenate([chunk, np.zeros((pad, *chunk.shape[1:]), chunk.dtype)]) if pad else chunk
        batch["mask"] = np.arange(batch_size) < stop - start
        yield batch


def tfds_arrays(name: str, split: str, *, data_dir: str | None = None,
                keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """Load a prepared tensorflow-datasets split into memory as numpy arrays (never downloads).

    For users whose machine has the data (`tfds build` or a copied data_dir); works without TensorFlow
    through tfds' array-record data sources.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as err:
        raise ImportError("tfds_arrays needs tensorflow-datasets: pip install 'iclr26-jax[data]'") from err
    try:
        source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as err:  # tfds raises several types for a dataset that is not prepared
        raise FileNotFoundError(f"tensorflow-datasets {name!r} split {split!r} is not prepared in "
                                f"{data_dir or '~/tensorflow_datasets'}: build it there first "
                                f"({type(err).__name__}: {err})") from err
    examples = [source[i] for i in range(len(source))]
    if not examples:
        raise ValueError(f"tensorflow-datasets {name!r} split {split!r} is empty")
    keys = keys or tuple(examples[0])
    return {k: np.stack([np.asarray(ex[k]) for ex in examples]) for k in keys}
