"""forecasting.phaseformer.efficiency: epoch counts of the real files' shapes, and the timing's scaling."""

import numpy as np
import pytest

from forecasting.phaseformer import configs, efficiency


def test_train_windows_of_the_real_files():
    assert efficiency.train_windows("ETTh1", 720, 96) == 8640 - 720 - 96 + 1  # 12 months
    assert efficiency.train_windows("Traffic", 720, 96) == int(17544 * 0.7) - 816 + 1  # TSL 70 % of the rows
    assert efficiency.generated_series(50, 3).shape == (50, 3)


def test_prepare_scales_a_timed_fraction_to_the_epoch():
    config = configs.sparsetsf("ETTh1", 8, seq_len=48, batch_size=8, data_parallel=False, plot=False)
    series = efficiency.generated_series(48 + 8 + 16 - 1, 3)
    m = efficiency.prepare(config, series, full_windows=80, timed_windows=16, timing_batch=4)
    # SparseTSF at L = 48: conv 25 weights + linear 2 -> 1; 16 windows at 4 per step; 80 windows at 8 per step
    assert (m.params, m.channels, m.timing_batch, m.batches_timed, m.batches_full) == (25 + 2 * 1, 3, 4, 4, 10)
    assert m.macs and m.macs > 0 and m.step_memory["train"] > 0
    t = m.time_epoch()
    # 4 timed steps of 4 windows; a training step has 8 windows (cost taken linear in windows); 10 steps an epoch
    assert t["seconds_per_step"] == pytest.approx(t["timed_seconds"] / 4 * 8 / 4)
    assert t["epoch_seconds"] == pytest.approx(t["seconds_per_step"] * 10) and np.isfinite(t["epoch_seconds"])
