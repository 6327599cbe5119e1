import numpy as np
import pytest

from core.data import ArrayLoader, eval_batches, tfds_arrays


def _arrays(n=10):
    return {"x": np.arange(n * 2).reshape(n, 2), "y": np.arange(n)}


def test_epoch_covers_every_row_once_and_is_deterministic():
    a = ArrayLoader(_arrays(), 5, seed=3)
    b = ArrayLoader(_arrays(), 5, seed=3)
    first = [next(a)["y"] for _ in range(2)]
    assert sorted(np.concatenate(first).tolist()) == list(range(10))
    np.testing.assert_array_equal(np.concatenate(first), np.concatenate([next(b)["y"] for _ in range(2)]))
    assert not np.array_equal(np.concatenate(first), np.concatenate([next(a)["y"] for _ in range(2)])), \
        "the second epoch should be a different permutation"


def test_restore_resumes_the_same_stream():
    a = ArrayLoader(_arrays(), 3, seed=1)
    for _ in range(4):
        next(a)
    state = a.state()
    expected = [next(a)["y"] for _ in range(5)]
    b = ArrayLoader(_arrays(), 3, seed=1)
    b.restore(state)
    np.testing.assert_array_equal(np.stack(expected), np.stack([next(b)["y"] for _ in range(5)]))
    with pytest.raises(ValueError, match="seed=1: expected this loader's seed 2"):
        ArrayLoader(_arrays(), 3, seed=2).restore(state)


def test_processes_split_the_same_global_batch():
    full = ArrayLoader(_arrays(), 4, seed=0, process_index=0, process_count=1)
    parts = [ArrayLoader(_arrays(), 4, seed=0, process_index=i, process_count=2) for i in range(2)]
    for _ in range(3):
        np.testing.assert_array_equal(next(full)["y"], np.concatenate([next(p)["y"] for p in parts]))


def test_bad_inputs():
    with pytest.raises(ValueError, match="same number of rows"):
        ArrayLoader({"x": np.zeros(3), "y": np.zeros(4)}, 2)
    with pytest.raises(ValueError, match="batch_size=20: expected at most the 10 rows"):
        ArrayLoader(_arrays(), 20)
    with pytest.raises(ValueError, match="batch_size=3: expected a positive multiple of the 2 processes"):
        ArrayLoader(_arrays(), 3, process_count=2, process_index=0)


def test_eval_batches_pad_and_mask():
    batches = list(eval_batches(_arrays(7), 3))
    assert [b["mask"].sum() for b in batches] == [3, 3, 1]
    assert batches[-1]["y"].tolist() == [6, 0, 0]
    assert np.concatenate([b["y"][b["mask"]] for b in batches]).tolist() == list(range(7))


def test_tfds_adapter_reads_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        arrays = tfds_arrays("mnist", "train")
    assert arrays["image"].shape == (6, 28, 28, 1) and arrays["image"].dtype == np.uint8
    assert arrays["label"].shape == (6,)
    loader = ArrayLoader(arrays, 3)
    assert next(loader)["image"].shape == (3, 28, 28, 1)
