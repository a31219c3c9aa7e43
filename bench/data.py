"""One loader for every method: torchvision's MNIST/FashionMNIST files -> in-memory tensors.

Images are decoded once into a float tensor (N, 784); the training loop indexes it directly, so no
per-sample PIL transform runs during training. Preprocessing is an explicit protocol value and is
applied identically to ID and OOD data.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import struct
from pathlib import Path

import torch
import torchvision

from bench.config import DATASET_PAIRS, Protocol
from bench.errors import DataError

DATA_DIR_ENV = "DARE_BENCH_DATA"
DEFAULT_DATA_DIR = "./data"
DATASET_CLASSES = {"mnist": torchvision.datasets.MNIST, "fashion_mnist": torchvision.datasets.FashionMNIST}
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


def resolve_data_dir(flag: str | None) -> Path:
    """--data-dir, else $DARE_BENCH_DATA, else ./data."""
    return Path(flag or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


@dataclasses.dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (N, features) float32, preprocessed
    y: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.y)


@dataclasses.dataclass(frozen=True)
class BenchData:
    train: Split
    val: Split
    test: Split
    ood: Split                # the OOD dataset's test split
    test_images: torch.Tensor  # (N, 28, 28) uint8, for image grids
    n_classes: int
    class_names: tuple[str, ...]

    @property
    def in_features(self) -> int:
        return self.train.x.shape[1]


def _raw_dir(root: Path, dataset: str) -> Path:
    return root / DATASET_CLASSES[dataset].__name__ / "raw"


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _idx_count(path: Path, kind: str) -> int:
    """Check an IDX file's header against its size; return its item count."""
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
    return dims[0]


@functools.lru_cache(maxsize=16)
def _verify_files(raw: Path, dataset: str, stamp: tuple) -> None:
    """Header/size of every file, and the md5 of any file with an official file's size (so a
    flipped byte in the real data is caught, while small custom IDX sets are allowed)."""
    counts = {}
    for name in RAW_FILES:
        path = raw / name
        counts[name] = _idx_count(path, "images" if "images" in name else "labels")
        official_size, official_md5 = OFFICIAL_FILES[dataset][name]
        if path.stat().st_size == official_size and _md5(path) != official_md5:
            raise DataError(f"{path} is corrupt: md5 differs from the official file's ({official_md5})")
    for split in ("train", "t10k"):
        if counts[f"{split}-images-idx3-ubyte"] != counts[f"{split}-labels-idx1-ubyte"]:
            raise DataError(f"{raw}: {split} images and labels disagree in count "
                            f"({counts[f'{split}-images-idx3-ubyte']} vs {counts[f'{split}-labels-idx1-ubyte']})")


def check_dataset_files(root: Path, dataset: str, download: bool = True) -> None:
    """Make sure the four files of ``dataset`` are present (downloading if allowed) and intact."""
    cls = DATASET_CLASSES[dataset]
    raw = _raw_dir(root, dataset)
    missing = [f for f in RAW_FILES if not (raw / f).is_file()]
    if missing:
        hint = (f"pass --data-dir or set ${DATA_DIR_ENV} to a folder in torchvision's layout"
                f" ({cls.__name__}/raw/<file>)")
        if not download:
            raise DataError(f"{dataset} not found in {raw} (missing {', '.join(missing)}); {hint}")
        try:
            cls(root=str(root), train=True, download=True)
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
    raw = _raw_dir(root, dataset)
    try:
        ds = DATASET_CLASSES[dataset](root=str(root), train=train, download=False)
    except Exception as exc:
        raise DataError(f"cannot read {dataset} from {raw}: {exc}") from None
    return ds.data, ds.targets.long(), tuple(ds.classes)


@functools.lru_cache(maxsize=2)  # a grid reuses one protocol's tensors across its runs
def load_benchmark_data(protocol: Protocol, root: Path, download: bool = True) -> BenchData:
    id_name, ood_name = protocol.id_dataset, DATASET_PAIRS[protocol.id_dataset]
    train_img, train_y, classes = load_images(root, id_name, True, download)
    test_img, test_y, _ = load_images(root, id_name, False, download)
    ood_img, ood_y, _ = load_images(root, ood_name, False, download)

    if protocol.val_size >= len(train_y):
        raise DataError(f"val_size={protocol.val_size} leaves no training data ({len(train_y)} images)")
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(protocol.split_seed))
    val_idx, train_idx = order[:protocol.val_size], order[protocol.val_size:]

    def flat(images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1).float().div_(255.0)

    x_train = flat(train_img[train_idx])
    if protocol.preprocess == "standardize":
        mean, std = x_train.mean(), x_train.std()  # ID train statistics, reused for every split
        prep = lambda x: (x - mean) / std  # noqa: E731
    else:
        prep = lambda x: x  # noqa: E731
    return BenchData(
        train=Split(prep(x_train), train_y[train_idx]),
        val=Split(prep(flat(train_img[val_idx])), train_y[val_idx]),
        test=Split(prep(flat(test_img)), test_y),
        ood=Split(prep(flat(ood_img)), ood_y),
        test_images=test_img,
        n_classes=len(classes),
        class_names=classes,
    )
