"""Task streams for DEDUCE from data this project ships or installs.

split_mnist: the shipped MNIST test set (10k) carved per class into train/test (test_fraction), 5 x 2 classes;
    with data.mnist_source="standard", the 60k MNIST training set (`make benchmark-data`) / the 10k test set.
split_fmnist: full Fashion-MNIST (60k/10k) from the Debian package dataset-fashion-mnist, 5 x 2 classes.
perm_mnist: the same MNIST train/test as split_mnist, each task a fixed pixel permutation (domain-incremental).
digits: scikit-learn's 8x8 digits (1,797 images), for the fastest tests.
cifar10 / cifar100: tensorflow-datasets arrays for users who have them prepared (never downloaded).
"""

from __future__ import annotations

import numpy as np

from core.config import BadInputError
from core.datasets import load_fashion_mnist, load_mnist_test, load_mnist_train
from optimization.continual.streams import Stream, Task, permuted_tasks, split_by_classes
from optimization.deduce.configs import MNIST_DATASETS, DataConfig

_SPLIT_SEED = 1234  # the carving of train/test/validation is fixed, independent of the run seeds


def carve(x: np.ndarray, y: np.ndarray, fraction: float, seed: int = _SPLIT_SEED):
    """Stratified split: `fraction` of every class goes to the second part."""
    rng = np.random.default_rng(seed)
    first, second = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(fraction * len(idx)))
        second.append(idx[:k])
        first.append(idx[k:])
    a, b = np.sort(np.concatenate(first)), np.sort(np.concatenate(second))
    return x[a], y[a], x[b], y[b]


def _raw(config: DataConfig, flatten: bool):
    if config.dataset in MNIST_DATASETS and config.mnist_source == "standard":
        xtr, ytr = load_mnist_train()   # DatasetMissingError naming `make benchmark-data` when absent
        xte, yte = load_mnist_test()
        xtr = xtr.astype(np.float32)[..., None] / 255.0
        xte = xte.astype(np.float32)[..., None] / 255.0
    elif config.dataset in MNIST_DATASETS:
        x, y = load_mnist_test()
        x = x.astype(np.float32)[..., None] / 255.0
        xtr, ytr, xte, yte = carve(x, y, config.test_fraction)
    elif config.dataset == "split_fmnist":
        xtr, ytr = load_fashion_mnist("train")
        xte, yte = load_fashion_mnist("test")
        xtr = xtr.astype(np.float32)[..., None] / 255.0
        xte = xte.astype(np.float32)[..., None] / 255.0
    elif config.dataset == "digits":
        from sklearn.datasets import load_digits
        d = load_digits()
        x = (d.images.astype(np.float32) / 16.0)[..., None]
        xtr, ytr, xte, yte = carve(x, d.target, config.test_fraction)
    elif config.dataset in ("cifar10", "cifar100"):
        tr, te = _cifar_python(config.data_dir, config.dataset) or _cifar_tfds(config)
        mean = np.array([0.5071, 0.4865, 0.4409] if config.dataset == "cifar100" else [0.4914, 0.4822, 0.4465])
        std = np.array([0.2673, 0.2564, 0.2762] if config.dataset == "cifar100" else [0.2470, 0.2435, 0.2616])
        xtr = ((tr["image"].astype(np.float32) / 255.0 - mean) / std).astype(np.float32)
        xte = ((te["image"].astype(np.float32) / 255.0 - mean) / std).astype(np.float32)
        ytr, yte = tr["label"], te["label"]
    else:  # guarded by DataConfig
        raise BadInputError(f"dataset={config.dataset!r}")
    if config.val_fraction > 0:  # model selection: test on held-out training data, never on the test set
        xtr, ytr, xte, yte = carve(xtr, ytr, config.val_fraction, seed=_SPLIT_SEED + 1)
    if flatten:
        xtr, xte = xtr.reshape(len(xtr), -1), xte.reshape(len(xte), -1)
    return xtr, ytr.astype(np.int32), xte, yte.astype(np.int32)


def _cifar_tfds(config: DataConfig):
    from core.data import tfds_arrays
    kw = dict(data_dir=config.data_dir or None, keys=("image", "label"))
    return tfds_arrays(config.dataset, "train", **kw), tfds_arrays(config.dataset, "test", **kw)


def _cifar_python(data_dir: str, dataset: str):
    """CIFAR from a local folder of the original python pickles (cifar-100-python: train, test; cifar-10-batches-py:
    data_batch_1..5, test_batch), as {"image": (N, 32, 32, 3) uint8, "label": (N,)}; None when absent."""
    import pathlib
    import pickle

    if not data_dir:
        return None
    root = pathlib.Path(data_dir)
    sub = "cifar-100-python" if dataset == "cifar100" else "cifar-10-batches-py"
    root = root / sub if (root / sub).is_dir() else root
    names = (["train"], ["test"]) if dataset == "cifar100" else ([f"data_batch_{i}" for i in range(1, 6)],
                                                                   ["test_batch"])
    if not all((root / n).is_file() for group in names for n in group):
        return None
    key = b"fine_labels" if dataset == "cifar100" else b"labels"

    def load(group):
        xs, ys = [], []
        for n in group:
            with open(root / n, "rb") as fh:
                d = pickle.load(fh, encoding="bytes")
            xs.append(np.asarray(d[b"data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            ys.append(np.asarray(d[key], np.int64))
        return {"image": np.concatenate(xs), "label": np.concatenate(ys)}

    return load(names[0]), load(names[1])


def make_stream(config: DataConfig, *, flatten: bool = True) -> Stream:
    """The task stream named by `config` (numpy, host side)."""
    xtr, ytr, xte, yte = _raw(config, flatten)
    if config.dataset == "perm_mnist":
        if not flatten:
            raise BadInputError("perm_mnist permutes pixels: expected an MLP (model.conv=())")
        stream = permuted_tasks(xtr, ytr, xte, yte, num_tasks=config.num_tasks, seed=_SPLIT_SEED)
    else:
        n_classes = len(np.unique(ytr))
        if n_classes % config.classes_per_task or n_classes // config.classes_per_task != config.num_tasks:
            raise BadInputError(f"data.num_tasks={config.num_tasks} with classes_per_task={config.classes_per_task}: "
                                f"expected {n_classes} / classes_per_task tasks for {n_classes} classes")
        stream = split_by_classes(xtr, ytr, xte, yte, classes_per_task=config.classes_per_task)
    tasks = stream.tasks
    if config.max_train_per_task:
        rng = np.random.default_rng(_SPLIT_SEED + 2)
        tasks = [t._replace(train_x=t.train_x[s], train_y=t.train_y[s]) if len(t.train_y) > config.max_train_per_task
                 else t for t in tasks
                 for s in [np.sort(rng.permutation(len(t.train_y))[:config.max_train_per_task])]]
    if config.first_tasks:
        tasks = tasks[:config.first_tasks]
    return stream._replace(tasks=[Task(*t) for t in tasks])
