"""Small image datasets that ship with the project or install from Debian packages.

`load_mnist_test()` reads the MNIST test set shipped in `core/datasets/mnist/` (CC BY-SA 3.0);
`load_fashion_mnist(split)` reads the Debian package `dataset-fashion-mnist` (Expat licence) from
`/usr/share/datasets/fashion-mnist/` and fails with a message naming the package when it is missing.
"""

from core.datasets.mnist import (
    FASHION_MNIST_DIR,
    FASHION_MNIST_PACKAGE,
    MNIST_DIR,
    DatasetMissingError,
    load_fashion_mnist,
    load_mnist_test,
    read_idx,
)

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "MNIST_DIR",
    "DatasetMissingError",
    "load_fashion_mnist",
    "load_mnist_test",
    "read_idx",
]
