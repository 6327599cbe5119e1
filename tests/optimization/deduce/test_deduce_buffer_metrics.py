"""optimization.continual: reservoir statistics, buffer sampling, and the CL metrics on hand-made matrices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from optimization.continual import buffer as B
from optimization.continual import metrics as M


def _stream_through(key, n_items, capacity, size, batch):
    buf = B.init_buffer(capacity, (1,), 2)

    def body(b, i):
        ids = (i * batch + jnp.arange(batch)).astype(jnp.float32)
        b = B.reservoir_add(b, ids[:, None], jnp.zeros(batch, jnp.int32), jnp.zeros((batch, 2)),
                            jnp.int32(0), jax.random.fold_in(key, i), size)
        return b, None

    buf, _ = jax.lax.scan(body, buf, jnp.arange(n_items // batch))
    return buf


def test_reservoir_keeps_every_item_with_probability_size_over_n():
    n, capacity, size, trials = 120, 40, 30, 2000
    keys = jax.random.split(jax.random.key(0), trials)
    bufs = jax.jit(jax.vmap(lambda k: _stream_through(k, n, capacity, size, 10)))(keys)
    x = np.asarray(bufs.x[:, :, 0])
    assert (np.asarray(bufs.n_seen) == n).all()
    # only the first `size` slots are used, and each holds a distinct item
    assert (x[:, size:] == 0).all()
    assert all(len(set(row[:size].tolist())) == size for row in x[:50])
    counts = np.zeros(n)
    for row in x[:, :size].astype(int):
        counts[row] += 1
    freq = counts / trials
    p = size / n
    sd = np.sqrt(p * (1 - p) / trials)
    assert np.abs(freq - p).max() < 5 * sd          # every item near size/n
    assert abs(freq[: n // 2].mean() - freq[n // 2:].mean()) < 4 * sd  # early and late items alike


def test_reservoir_fills_in_order_then_respects_valid_mask():
    buf = B.init_buffer(5, (1,), 3)
    x = jnp.arange(4.0)[:, None]
    buf = B.reservoir_add(buf, x, jnp.array([1, 2, 3, 4]), jnp.ones((4, 3)), jnp.int32(7), jax.random.key(1), 5,
                          valid=jnp.array([True, False, True, True]))
    np.testing.assert_array_equal(np.asarray(buf.x[:, 0]), [0, 2, 3, 0, 0])
    np.testing.assert_array_equal(np.asarray(buf.task), [7, 7, 7, -1, -1])
    assert int(buf.n_seen) == 3


def test_sample_indices_distinct_filled_and_masked():
    buf = B.init_buffer(10, (1,), 2)._replace(n_seen=jnp.int32(6), task=jnp.array([0, 1, 0, 1, 0, 1, -1, -1, -1, -1]))
    idx, mask = B.sample_indices(buf, jax.random.key(3), 4, 10)
    assert len(set(np.asarray(idx).tolist())) == 4 and (np.asarray(idx) < 6).all() and mask.sum() == 4
    idx, mask = B.sample_indices(buf, jax.random.key(4), 5, 10, where=buf.task == 1)
    real = np.asarray(idx)[np.asarray(mask) > 0]
    assert sorted(real.tolist()) == [1, 3, 5] and mask.sum() == 3


def test_buffer_rejects_bad_capacity():
    with pytest.raises(ValueError, match="capacity"):
        B.init_buffer(0, (1,), 2)


def test_metrics_on_a_hand_made_matrix():
    r = np.array([[90.0, 10.0, 0.0],
                  [95.0, 80.0, 0.0],
                  [60.0, 75.0, 85.0]])
    assert M.average_accuracy(r) == pytest.approx((60 + 75 + 85) / 3)
    assert M.backward_transfer(r) == pytest.approx(((60 - 90) + (75 - 80)) / 2)   # -17.5
    assert M.forgetting(r) == pytest.approx(((95 - 60) + (80 - 75)) / 2)          # 20: max over earlier rows
    assert M.forward_transfer(r, [10.0, 10.0, 10.0]) == pytest.approx(((10 - 10) + (0 - 10)) / 2)
    s = M.summarize(r, [10.0, 10.0, 10.0])
    assert set(s) == {"avg_acc", "bwt", "forgetting", "fwt"}
    assert M.forgetting(np.array([[50.0]])) == 0.0


def test_metrics_reject_non_square():
    with pytest.raises(ValueError, match="square"):
        M.average_accuracy(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="baseline"):
        M.forward_transfer(np.zeros((2, 2)), [1.0])
