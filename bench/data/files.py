"""The dataset files on disk: where they are, their checks (header, size, md5), their download,
and reading them into arrays.

MNIST and Fashion-MNIST are torchvision's IDX files (``MNIST/raw/<file>``); a missing file is
downloaded when allowed, and a file that is truncated, corrupt or not the official one where it
claims to be is a DataError. CIFAR-10's test batch (``cifar-10-batches-py/test_batch``) is read for
an OOD set; when it is absent and cannot be downloaded that is a FileNotFoundError, which lets an
optional OOD set be skipped (``bench.data.loaders``). ``read_idx`` reads any IDX file (a user's
dataset, such as KMNIST's files).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import pickle
import socket
import struct
from pathlib import Path

import numpy as np
import torch

from bench.errors import DataError

DATA_DIR_ENV = "DARE_BENCH_DATA"
DEFAULT_DATA_DIR = "./data"
# torchvision is imported only to download (and by the seed example's loop in bench perf): reading the
# IDX files here instead saves every command that loads data about 3 s of start (torchvision.datasets
# imports its models and torch._dynamo).


@dataclasses.dataclass(frozen=True)
class Dataset:
    """An in-distribution dataset: its torchvision folder (also its class's name in torchvision),
    its images' shape (C, H, W), its number of classes and their names (as torchvision's class
    lists them: tests/data/test_data.py compares)."""
    folder: str
    image_shape: tuple[int, int, int]
    classes: int
    class_names: tuple[str, ...]


DATASETS = {
    "mnist": Dataset("MNIST", (1, 28, 28), 10, ("0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
                                                "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine")),
    "fashion_mnist": Dataset("FashionMNIST", (1, 28, 28), 10, ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                              "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")),
}
DATASET_FOLDERS = {name: d.folder for name, d in DATASETS.items()}
RAW_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# Sizes and md5 of the official uncompressed files (the offline mirror's README lists the same).
OFFICIAL_FILES = {
    "mnist": {
        "train-images-idx3-ubyte": (47040016, "6bbc9ace898e44ae57da46a324031adb"),
        "train-labels-idx1-ubyte": (60008, "a25bea736e30d166cdddb491f175f624"),
        "t10k-images-idx3-ubyte": (7840016, "2646ac647ad5339dbf082846283269ea"),
        "t10k-labels-idx1-ubyte": (10008, "27ae3e4e09519cfbb04c329615203637"),
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte": (47040016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
        "train-labels-idx1-ubyte": (60008, "9018921c3c673c538a1fc5bad174d6f9"),
        "t10k-images-idx3-ubyte": (7840016, "8181f5470baa50b63fa0f6fddb340f0a"),
        "t10k-labels-idx1-ubyte": (10008, "15d484375f8d13e6eb1aabb0c3f46965"),
    },
}
IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}
CIFAR10_FOLDER = "cifar-10-batches-py"  # torchvision.datasets.CIFAR10.base_folder
DOWNLOAD_TIMEOUT_S = 60
CIFAR10_FULL_SIZE = 30_000_000  # a test_batch this large claims to be the official file: check its md5


def dataset_class(dataset: str):
    """torchvision's class of an in-distribution dataset (MNIST, FashionMNIST)."""
    import torchvision
    return getattr(torchvision.datasets, DATASET_FOLDERS[dataset])


def _cifar10():
    """torchvision's CIFAR10 class: its url, archive name, md5s and folder name."""
    import torchvision
    return torchvision.datasets.CIFAR10


def resolve_data_dir(flag: str | None) -> Path:
    """--data-dir, else $DARE_BENCH_DATA, else ./data."""
    return Path(flag or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def _raw_dir(root: Path, dataset: str) -> Path:
    return root / DATASET_FOLDERS[dataset] / "raw"


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _idx_dims(path: Path, kind: str) -> tuple[int, ...]:
    """Check an IDX file's header against its size; return its dimensions (the item count first)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        header = f.read(16 if kind == "images" else 8)
    ndim = 3 if kind == "images" else 1
    if len(header) < 4 + 4 * ndim or struct.unpack(">i", header[:4])[0] != IDX_MAGIC[kind]:
        raise DataError(f"{path} is corrupt: not an IDX {kind} file (bad header)")
    dims = struct.unpack(f">{ndim}i", header[4:4 + 4 * ndim])
    expected = 4 + 4 * ndim + math.prod(dims)
    if size != expected:
        raise DataError(f"{path} is truncated or corrupt: its header promises {expected} bytes, "
                        f"the file has {size}")
    return dims


def read_idx(path: Path, kind: str) -> np.ndarray:
    """An IDX file of unsigned bytes, checked (``kind``: images or labels): uint8 (N, rows, cols) or
    (N,). FileNotFoundError when it is absent, DataError when its header disagrees with its size."""
    dims = _idx_dims(path, kind)
    return np.fromfile(path, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


@functools.lru_cache(maxsize=16)
def _verify_files(raw: Path, dataset: str, stamp: tuple) -> None:
    """Header/size of every file, and the md5 of any file with an official file's size (so a
    flipped byte in the real data is caught, while small custom IDX sets are allowed)."""
    counts = {}
    for name in RAW_FILES:
        path = raw / name
        counts[name] = _idx_dims(path, "images" if "images" in name else "labels")[0]
        official_size, official_md5 = OFFICIAL_FILES[dataset][name]
        if path.stat().st_size == official_size and _md5(path) != official_md5:
            raise DataError(f"{path} is corrupt: md5 differs from the official file's ({official_md5})")
    for split in ("train", "t10k"):
        if counts[f"{split}-images-idx3-ubyte"] != counts[f"{split}-labels-idx1-ubyte"]:
            raise DataError(f"{raw}: {split} images and labels disagree in count "
                            f"({counts[f'{split}-images-idx3-ubyte']} vs {counts[f'{split}-labels-idx1-ubyte']})")


def check_dataset_files(root: Path, dataset: str, download: bool = True) -> None:
    """Make sure the four files of ``dataset`` are present (downloading if allowed) and intact."""
    raw = _raw_dir(root, dataset)
    missing = [f for f in RAW_FILES if not (raw / f).is_file()]
    if missing:
        hint = (f"pass --data-dir or set ${DATA_DIR_ENV} to a folder in torchvision's layout"
                f" ({DATASET_FOLDERS[dataset]}/raw/<file>)")
        if not download:
            raise DataError(f"{dataset} not found in {raw} (missing {', '.join(missing)}); {hint}")
        try:
            dataset_class(dataset)(root=str(root), train=True, download=True)
        except Exception as exc:  # any download failure: say what is missing and where
            raise DataError(f"{dataset} not found in {raw} (missing {', '.join(missing)}) and download"
                            f" failed ({type(exc).__name__}); {hint}") from None
    stamp = tuple((f, (raw / f).stat().st_size, (raw / f).stat().st_mtime_ns) for f in RAW_FILES)
    _verify_files(raw, dataset, stamp)


@functools.lru_cache(maxsize=8)
def load_images(root: Path, dataset: str, train: bool, download: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """(uint8 images (N, 28, 28), int64 labels, class names); downloads missing files if asked."""
    check_dataset_files(root, dataset, download)
    raw, split = _raw_dir(root, dataset), "train" if train else "t10k"
    try:
        images = _read_idx(raw / f"{split}-images-idx3-ubyte", "images")
        labels = _read_idx(raw / f"{split}-labels-idx1-ubyte", "labels")
    except OSError as exc:
        raise DataError(f"cannot read {dataset} from {raw}: {exc}") from None
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64)), DATASETS[dataset].class_names


def _read_idx(path: Path, kind: str) -> np.ndarray:
    """An IDX file's unsigned bytes in its dimensions (header and size checked by ``_idx_dims``)."""
    dims = _idx_dims(path, kind)
    return np.fromfile(path, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def _download_cifar10(root: Path, path: Path) -> None:
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # torchvision's urlopen has none: a silent firewall would hang
    try:
        from torchvision.datasets.utils import download_and_extract_archive
        cifar10 = _cifar10()
        download_and_extract_archive(cifar10.url, str(root), filename=cifar10.filename, md5=cifar10.tgz_md5)
    except Exception as exc:  # offline, read-only folder, ...: the caller decides whether to skip
        raise FileNotFoundError(f"{path} not found and download failed ({type(exc).__name__})") from None
    finally:
        socket.setdefaulttimeout(previous)


def load_cifar10_test(root: Path, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's test batch: uint8 images (N, 3, 32, 32) and int64 labels. FileNotFoundError when
    it is absent and cannot be downloaded; DataError when it is corrupt."""
    path = root / CIFAR10_FOLDER / "test_batch"
    if not path.is_file():
        if not download:
            raise FileNotFoundError(f"{path} not found")
        _download_cifar10(root, path)
    official = dict(_cifar10().test_list)["test_batch"] if path.stat().st_size >= CIFAR10_FULL_SIZE else None
    if official and _md5(path) != official:
        raise DataError(f"{path} is corrupt: md5 differs from the official file's ({official})")
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except Exception as exc:
        raise DataError(f"{path} is not a readable CIFAR-10 batch ({type(exc).__name__}: {exc})") from None
    if len(labels) != len(images):
        raise DataError(f"{path}: {len(images)} images but {len(labels)} labels")
    return images, labels
