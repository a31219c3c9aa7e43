"""One loader for every method: torchvision's MNIST/FashionMNIST files -> in-memory tensors.

Images are decoded once into a float tensor (N, 784); the training loop indexes it directly, so no
per-sample PIL transform runs during training. Preprocessing is an explicit protocol value and is
applied identically to ID and OOD data.
"""
from __future__ import annotations

import dataclasses
import functools
import os
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


@functools.lru_cache(maxsize=8)
def load_images(root: Path, dataset: str, train: bool, download: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor, tuple[str, ...]]:
    """(uint8 images (N, 28, 28), int64 labels, class names); downloads missing files if asked."""
    cls = DATASET_CLASSES[dataset]
    raw = _raw_dir(root, dataset)
    missing = [f for f in RAW_FILES if not (raw / f).is_file()]
    if missing:
        hint = (f"pass --data-dir or set ${DATA_DIR_ENV} to a folder in torchvision's layout"
                f" ({cls.__name__}/raw/<file>)")
        if not download:
            raise DataError(f"{dataset} not found in {raw} (missing {', '.join(missing)}); {hint}")
        try:
            cls(root=str(root), train=train, download=True)
        except Exception as exc:  # any download failure: say what is missing and where
            raise DataError(f"{dataset} not found in {raw} (missing {', '.join(missing)}) and download"
                            f" failed ({type(exc).__name__}); {hint}") from None
    try:
        ds = cls(root=str(root), train=train, download=False)
    except Exception as exc:
        raise DataError(f"cannot read {dataset} from {raw}: {exc}") from None
    return ds.data, ds.targets.long(), tuple(ds.classes)


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
