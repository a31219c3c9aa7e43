"""Tiny, learnable MNIST/FashionMNIST stand-ins written as real IDX files in torchvision's layout."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}


def write_idx_images(path: Path, images: np.ndarray) -> None:
    n, rows, cols = images.shape
    path.write_bytes(struct.pack(">iiii", 2051, n, rows, cols) + images.astype(np.uint8).tobytes())


def write_idx_labels(path: Path, labels: np.ndarray) -> None:
    path.write_bytes(struct.pack(">ii", 2049, len(labels)) + labels.astype(np.uint8).tobytes())


def synthetic_images(labels: np.ndarray, rng: np.random.Generator, style: str) -> np.ndarray:
    """Class c is a bright 6x6 block at a class-specific place (mnist) or a class-specific stripe
    (fashion_mnist), on noise: easy to learn, and the two styles differ (one is OOD for the other)."""
    images = rng.integers(0, 40, size=(len(labels), 28, 28))
    for i, c in enumerate(labels):
        if style == "mnist":
            r, k = 2 + (c // 5) * 14, 1 + (c % 5) * 5
            images[i, r:r + 6, k:k + 6] = 255
        else:
            images[i, 2 + 2 * c:4 + 2 * c, :] = 200
    return images


def write_dataset(root: Path, name: str, n_train: int = 300, n_test: int = 100, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    raw = root / FOLDERS[name] / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = np.arange(n) % 10
        rng.shuffle(labels)
        write_idx_images(raw / f"{prefix}-images-idx3-ubyte", synthetic_images(labels, rng, name))
        write_idx_labels(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return raw


def write_both(root: Path, **kwargs) -> Path:
    for name in FOLDERS:
        write_dataset(root, name, **kwargs)
    return root
