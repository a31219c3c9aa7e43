"""The OOD suite: every set a run can be scored against, its group, and how it is had.

Grouping rule (OpenOOD's near / far, stated for 28 x 28 gray images): a set is **near** OOD when it
keeps the low-level statistics of the MNIST family (black background, sparse bright strokes, the
same pixel histogram) and only the content differs; it is **far** OOD when the low-level
statistics change too. Near: the other MNIST-family dataset, and ID test images whose 4 x 4
pixel blocks are shuffled (every pixel value and local patch kept, the shape gone). Far:
CIFAR-10 (natural photographs), the noise and constant images, and inverted ID images (the same
shapes, the polarity of every pixel flipped).

Loaded sets are test splits read from files (``bench.data.loaders``); CIFAR-10 is optional (skipped with
a recorded note when absent). Generated sets are made from the ID test split (10,000 images), each
from its own seeded stream: (``SEED``, the set's name); the seed is recorded with every run.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

import numpy as np

SEED = 0
BLOCK = 4  # block_shuffled: 4 x 4 blocks, a 7 x 7 grid of them
MNIST_FAMILY = ("mnist", "fashion_mnist")


@dataclasses.dataclass(frozen=True)
class OodSet:
    name: str
    group: str        # near or far (the rule above)
    description: str
    # generated sets: (ID test images (N, 28, 28) floats in 0-255, rng) -> (N, 28, 28) in 0-255
    generate: Callable[[np.ndarray, np.random.Generator], np.ndarray] | None = None
    optional: bool = False  # loaded sets only: skipped with a note when its files cannot be had


def _uniform(x, rng):
    return rng.uniform(0.0, 255.0, size=x.shape)


def _gaussian(x, rng):
    return rng.normal(x.mean(), x.std(), size=x.shape)


def _constant(x, rng):
    return np.broadcast_to(rng.uniform(0.0, 255.0, size=(len(x), 1, 1)), x.shape).copy()


def _bernoulli(x, rng):
    return np.where(rng.random(x.shape) < (x > 127.5).mean(), 255.0, 0.0)


def _inverted(x, rng):
    return 255.0 - x


def _block_shuffled(x, rng):
    n, side = len(x), x.shape[1]
    grid = side // BLOCK
    blocks = x.reshape(n, grid, BLOCK, grid, BLOCK).transpose(0, 1, 3, 2, 4).reshape(n, grid * grid, BLOCK, BLOCK)
    blocks = np.take_along_axis(blocks, rng.permuted(np.tile(np.arange(grid * grid), (n, 1)), axis=1)[..., None, None],
                                axis=1)
    return blocks.reshape(n, grid, grid, BLOCK, BLOCK).transpose(0, 1, 3, 2, 4).reshape(x.shape)


SETS: dict[str, OodSet] = {s.name: s for s in [
    OodSet("mnist", "near", "the MNIST test split"),
    OodSet("fashion_mnist", "near", "the Fashion-MNIST test split"),
    OodSet("cifar10_gray28", "far", "CIFAR-10's test split, top-left 28 x 28 crop, mean over RGB (the DARE paper's)",
           optional=True),
    OodSet("block_shuffled", "near", f"each ID test image with its {BLOCK} x {BLOCK} pixel blocks in a random order",
           _block_shuffled),
    OodSet("inverted", "far", "each ID test image inverted (255 - pixel)", _inverted),
    OodSet("uniform_noise", "far", "pixels uniform in [0, 255]", _uniform),
    OodSet("gaussian_noise", "far", "pixels normal with the ID test pixels' mean and sd, clipped to [0, 255]",
           _gaussian),
    OodSet("constant", "far", "each image one gray level, uniform in [0, 255]", _constant),
    OodSet("bernoulli_noise", "far", "pixels 255 with the ID test share of pixels above 127.5, else 0", _bernoulli),
]}
GENERATED = tuple(name for name, s in SETS.items() if s.generate is not None)
OPTIONAL = tuple(name for name, s in SETS.items() if s.optional)


def known_for(id_dataset: str) -> tuple[str, ...]:
    """The OOD sets of an in-distribution dataset: the other MNIST-family dataset first (the default)."""
    others = tuple(d for d in MNIST_FAMILY if d != id_dataset)
    return others + tuple(n for n in SETS if n not in MNIST_FAMILY)


def suite_for(id_dataset: str) -> tuple[str, ...]:
    """Every set of ``known_for`` (``--ood-sets suite``)."""
    return known_for(id_dataset)


def generate(name: str, id_test: np.ndarray, seed: int = SEED) -> np.ndarray:
    """A generated set: float32 (N, 28, 28) in [0, 255], the same for the same (name, seed, ID images)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    images = SETS[name].generate(np.asarray(id_test, dtype=np.float64), rng)
    return np.clip(images, 0.0, 255.0).astype(np.float32)


def group(name: str) -> str:
    """near or far; every set a protocol can name is in SETS (bench.config.OOD_SETS)."""
    return SETS[name].group
