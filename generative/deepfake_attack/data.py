"""Real digit pools: the shipped MNIST test set (28x28) or scikit-learn's 8x8 digits (resized), split into
four disjoint pools: generator training, attribution training, attack training (real only) and evaluation."""

from __future__ import annotations

import numpy as np

from core.config import BadInputError
from core.datasets.mnist import load_mnist_test

from .configs import DataConfig

POOLS = ("gm", "am", "attack", "eval")


def load_digits_images(size: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 8x8 digits (values 0..16) bilinearly resized to size x size, in [0, 1]."""
    import jax
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[..., None]
    x = np.asarray(jax.image.resize(x, (x.shape[0], size, size, 1), method="bilinear"))
    return np.clip(x, 0.0, 1.0), d.target.astype(np.int32)


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def load_folder_images(folder: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every image under `folder` (recursively, sorted paths) as grayscale, centre-cropped to a square and resized
    to size x size, in [0, 1]: (N, size, size, 1) and dummy labels 0 (faces carry no digit class)."""
    import pathlib

    from PIL import Image

    root = pathlib.Path(folder)
    if not folder or not root.is_dir():
        raise BadInputError(f"data.folder={folder!r}: expected a directory of images (source 'folder')")
    paths = sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise BadInputError(f"data.folder={folder!r}: no images ({', '.join(IMAGE_SUFFIXES)}) found")
    out = np.empty((len(paths), size, size, 1), np.float32)
    for i, p in enumerate(paths):
        im = Image.open(p).convert("L")
        w, h = im.size
        c = min(w, h)
        im = im.crop(((w - c) // 2, (h - c) // 2, (w - c) // 2 + c, (h - c) // 2 + c))
        im = im.resize((size, size), Image.BILINEAR)
        out[i, ..., 0] = np.asarray(im, np.float32) / 255.0
    return out, np.zeros(len(paths), np.int32)


def load_fake_folders(folder: str, size: int, n_am: int, n_eval: int, seed: int) -> dict[str, tuple[np.ndarray,
                                                                                                     np.ndarray]]:
    """Samples of the user's own generators (`data.fakes_folder`): one subfolder per generator, named after it,
    each holding at least n_am + n_eval images (read like `data.folder`). Returns {generator: (attribution-training
    fakes (n_am, S, S, 1), evaluation fakes (n_eval, S, S, 1))}, split by a seeded permutation, in sorted order.
    Generator checkpoints themselves are not read (their architectures are the user's): sample them to a folder."""
    import pathlib

    root = pathlib.Path(folder)
    if not root.is_dir():
        raise BadInputError(f"data.fakes_folder={folder!r}: expected a directory with one subfolder of images "
                            "per generator")
    subs = sorted(p for p in root.iterdir() if p.is_dir())
    if not subs:
        raise BadInputError(f"data.fakes_folder={folder!r}: no subfolders; expected one folder of images per "
                            "generator")
    out = {}
    for i, sub in enumerate(subs):
        try:
            x, _ = load_folder_images(str(sub), size)
        except BadInputError as err:  # named as the option the user set, not as data.folder
            raise BadInputError(f"data.fakes_folder: {str(err).removeprefix('data.folder=')}") from None
        if len(x) < n_am + n_eval:
            raise BadInputError(f"data.fakes_folder: {sub} holds {len(x)} images; expected at least "
                                f"data.n_am + data.n_eval = {n_am + n_eval}")
        order = np.random.default_rng(seed + i).permutation(len(x))
        out[sub.name] = (x[order[:n_am]], x[order[n_am:n_am + n_eval]])
    return out


def load_pools(config: DataConfig) -> dict[str, dict[str, np.ndarray]]:
    """{pool: {"image": (N, S, S, 1) float32 in [0, 1], "label": (N,) digit}} with disjoint pools.

    MNIST images are the uint8 test set / 255; a seeded permutation assigns images to pools, so the pools
    are disjoint by construction. Raises ValueError when the source has fewer images than the pools need.
    """
    if config.source == "mnist":
        images, labels = load_mnist_test()
        if config.image_size != 28:
            raise BadInputError(f"data.image_size={config.image_size}: MNIST images are 28x28, expected 28")
        x = (images.astype(np.float32) / 255.0)[..., None]
    elif config.source == "folder":
        x, labels = load_folder_images(config.folder, config.image_size)
    else:
        x, labels = load_digits_images(config.image_size)
    sizes = [config.n_gm, config.n_am, config.n_attack, config.n_eval]
    if sum(sizes) > len(x):
        raise BadInputError(f"pools {dict(zip(POOLS, sizes))} need {sum(sizes)} images: expected at most "
                            f"{len(x)} from source {config.source!r}")
    order = np.random.default_rng(config.seed).permutation(len(x))
    out, start = {}, 0
    for name, n in zip(POOLS, sizes):
        idx = order[start:start + n]
        out[name] = {"image": x[idx], "label": labels[idx].astype(np.int32), "index": idx}
        start += n
    return out
