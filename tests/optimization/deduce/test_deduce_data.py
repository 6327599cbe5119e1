"""DEDUCE data: the `data.mnist_source` option (shipped test-set carve by default, the standard 60k/10k split
from `make benchmark-data` on request), its validation, and the missing-data error."""

import numpy as np
import pytest

from core.config import ConfigError, apply_overrides
from core.datasets import DatasetMissingError, mnist_train_dir
from optimization.deduce import Config, DataConfig
from optimization.deduce.data import make_stream


def test_mnist_source_default_and_validation():
    assert DataConfig().mnist_source == "test_carve"
    assert DataConfig(dataset="perm_mnist", mnist_source="standard").mnist_source == "standard"
    with pytest.raises(ConfigError, match="data.mnist_source='full'"):
        DataConfig(mnist_source="full")
    with pytest.raises(ConfigError, match="mnist_source"):  # only the MNIST streams have a source
        DataConfig(dataset="digits", mnist_source="standard")
    cfg = apply_overrides(Config(), ["data.mnist_source=standard"])
    assert cfg.data.mnist_source == "standard"
    with pytest.raises(ConfigError, match="mnist_source"):
        apply_overrides(Config(), ["data.mnist_source=train"])


def test_standard_source_without_the_files_names_make_benchmark_data(tmp_path, monkeypatch):
    monkeypatch.setenv("MNIST_TRAIN_DIR", str(tmp_path))
    for dataset in ("split_mnist", "perm_mnist"):
        with pytest.raises(DatasetMissingError, match="make benchmark-data"):
            make_stream(DataConfig(dataset=dataset, mnist_source="standard"))


def test_test_carve_is_unchanged():
    s = make_stream(DataConfig(dataset="split_mnist"))
    assert sum(len(t.train_y) for t in s.tasks) == 8000 and sum(len(t.test_y) for t in s.tasks) == 2000


@pytest.mark.skipif(not (mnist_train_dir() / "train-labels-idx1-ubyte.gz").exists(),
                    reason="MNIST training set not installed (make benchmark-data)")
def test_standard_split_trains_on_60k_and_tests_on_10k():
    s = make_stream(DataConfig(dataset="split_mnist", mnist_source="standard"))
    assert sum(len(t.train_y) for t in s.tasks) == 60000 and sum(len(t.test_y) for t in s.tasks) == 10000
    assert [sorted(np.unique(t.train_y).tolist()) for t in s.tasks] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    v = make_stream(DataConfig(dataset="split_mnist", mnist_source="standard", val_fraction=0.15, first_tasks=3))
    # validation carved from the 60k training set, never the test set
    assert sum(len(t.train_y) + len(t.test_y) for t in v.tasks) == 5923 + 6742 + 5958 + 6131 + 5842 + 5421
    p = make_stream(DataConfig(dataset="perm_mnist", mnist_source="standard", num_tasks=2, max_train_per_task=100))
    assert [len(t.train_y) for t in p.tasks] == [100, 100] and len(p.tasks[0].test_y) == 10000
