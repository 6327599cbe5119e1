"""Efficiency of one model on one dataset shape: parameters, MACs, training seconds per epoch and XLA's memory plan of
the training program, measured through the training code itself (``train.make_epoch_fn``, ``train.count_macs``).

Seconds per epoch come from timing the jitted epoch function on ``timed_windows`` training windows after a warm-up
call (compilation excluded) and scaling by the epoch's batch count (``full_windows``); with ``timed_windows`` equal
to the epoch's windows the time is of a whole epoch. Cost does not depend on the series' values, so a dataset that is
not on the machine is measured on generated series of its shape (``DATASET_SHAPES``).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from forecasting import data as data_lib
from forecasting.phaseformer import train
from forecasting.phaseformer.configs import Config

# Rows and variables of the Time-Series-Library files (weather.csv, electricity.csv, traffic.csv) and ETTh1.
DATASET_SHAPES = {"ETTh1": (17420, 7), "Weather": (52696, 21), "Electricity": (26304, 321), "Traffic": (17544, 862)}


def train_windows(dataset: str, seq_len: int, pred_len: int) -> int:
    """Training windows of a full epoch: ETTh's 12 months, else TSL's 70 % of the rows."""
    rows, _ = DATASET_SHAPES[dataset]
    n_train = 12 * 30 * 24 if dataset.startswith("ETTh") else int(rows * 0.7)
    return data_lib.num_windows(n_train, seq_len, pred_len)


def generated_series(rows: int, channels: int, seed: int = 0) -> np.ndarray:
    """A (rows, channels) float32 series: daily sines with random phases plus noise (values do not affect cost)."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows, dtype=np.float32)[:, None]
    phase = rng.uniform(0, 2 * np.pi, channels).astype(np.float32)
    return (np.sin(2 * np.pi * t / 24 + phase) + 0.1 * rng.standard_normal((rows, channels))).astype(np.float32)


@dataclasses.dataclass
class Measured:
    """One (model, dataset) prepared for timing: static costs, and ``time_epoch()`` for interleaved repeats."""

    config: Config                    # the model's training config (its batch size defines the epoch's steps)
    timing_batch: int                 # windows per timed step (the config's batch, or fewer where memory is short)
    channels: int
    params: int
    macs: int | None
    step_memory: dict
    full_windows: int
    timed_windows: int
    _epoch: object
    _state: list

    @property
    def batches_full(self) -> int:
        bsz = self.config.batch_size
        return self.full_windows // bsz if self.config.train_drop_last else -(-self.full_windows // bsz)

    @property
    def batches_timed(self) -> int:
        bsz = self.timing_batch
        return self.timed_windows // bsz if self.config.train_drop_last else -(-self.timed_windows // bsz)

    def time_epoch(self) -> dict:
        """Run the timed (partial) epoch once; seconds measured and scaled to the full epoch (per window when the
        timing batch is smaller than the training batch: a step's cost is taken as linear in its windows)."""
        params, opt_state, series, key = self._state
        t0 = time.perf_counter()
        params, opt_state, loss = self._epoch(params, opt_state, series, key, jnp.float32(self.config.lr))
        loss = float(loss)  # waits for the epoch
        seconds = time.perf_counter() - t0
        self._state[:2] = [params, opt_state]
        if not np.isfinite(loss):
            raise FloatingPointError(f"{self.config.model} {self.config.setting}: non-finite training loss {loss}")
        per_step = seconds / self.batches_timed * self.config.batch_size / self.timing_batch
        return {"timed_seconds": seconds, "seconds_per_step": per_step, "epoch_seconds": per_step * self.batches_full}


def program_memory(compiled, series_bytes: int) -> dict:
    """XLA's memory analysis of the compiled epoch program (bytes): arguments, outputs, temporaries, aliases; and
    ``train`` = their sum less aliases less the input series (parameters, Adam state, outputs and the scan's working
    set of one training step: the footprint as the compiler plans it, without the dataset)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    out = {k: int(getattr(stats, f"{k}_size_in_bytes")) for k in ("argument", "output", "temp", "alias")}
    out["train"] = out["argument"] + out["output"] + out["temp"] - out["alias"] - series_bytes
    return out


def prepare(config: Config, series: np.ndarray, full_windows: int, timed_windows: int,
            timing_batch: int = 0) -> Measured:
    """Build the model, count parameters and MACs, analyse the program's memory, compile the epoch function on
    ``timed_windows`` windows of ``series`` (T, C) at ``timing_batch`` windows per step (0: the config's batch)
    and run it once (warm-up)."""
    timing_batch = timing_batch or config.batch_size
    train_config = config
    config = dataclasses.replace(config, batch_size=timing_batch)
    channels = series.shape[1]
    timed_windows = min(timed_windows, data_lib.num_windows(len(series), config.seq_len, config.pred_len))
    model = train.build_model(config, jax.random.key(config.seed))
    graphdef, params = nnx.split(model, nnx.Param)
    tx = train.make_optimizer(config)
    opt_state = tx.init(params)
    num_params = sum(int(p.size) for p in jax.tree.leaves(params))
    macs = train.count_macs(graphdef, params, config.seq_len, channels)
    series = jnp.asarray(series)
    key = jax.random.key(1)
    # one compile: the lowered epoch program gives the memory analysis and is the function timed
    epoch = train.make_epoch_fn(config, graphdef, tx, timed_windows).lower(
        params, opt_state, series, key, jnp.float32(config.lr)).compile()
    memory = program_memory(epoch, series.size * series.dtype.itemsize)
    measured = Measured(config=train_config, timing_batch=timing_batch, channels=channels, params=num_params,
                        macs=macs, step_memory=memory,
                        full_windows=full_windows, timed_windows=timed_windows, _epoch=epoch,
                        _state=[params, opt_state, series, key])
    measured.time_epoch()  # compile + warm-up, not a measurement
    return measured
