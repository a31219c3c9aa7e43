"""The OOD suite: every set a run can be scored against, one row of ``SETS`` each: its name, group,
description, how its images are had, whether it is optional.

Grouping rule (OpenOOD's near / far, stated for 28 x 28 gray images): a set is **near** OOD when it
keeps the low-level statistics of the MNIST family (black background, sparse bright strokes, the
same pixel histogram) and only the content differs; it is **far** OOD when the low-level
statistics change too. Near: the other MNIST-family dataset, the letters A-J rendered white on black
(notMNIST-like), and ID test images whose 4 x 4 pixel blocks are shuffled (every pixel value and
local patch kept, the shape gone). Far:
CIFAR-10 (natural photographs), the noise and constant images, and inverted ID images (the same
shapes, the polarity of every pixel flipped).

A **loaded** set has a reader: (data folder, download allowed) -> (images (N, 28, 28) in 0-255,
labels), arrays or tensors, read from files (``bench.data.files``); it raises FileNotFoundError
when its files are absent and cannot be downloaded, and then an optional set is skipped with a
recorded note (CIFAR-10) while a required one is an error. ``bench.data.loaders`` calls the readers.
A **generated** set is made from the ID test split (10,000 images) by its generator, from its own
seeded stream: (``SEED``, the set's name); the seed is recorded with every run. Adding a set is one
row (and its reader or generator); every set is an OOD set of every ID dataset but itself.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.data import files, rendered
from bench.errors import ConfigError

SEED = 0
BLOCK = 4  # block_shuffled: 4 x 4 blocks, a 7 x 7 grid of them
GROUPS = ("near", "far")
MNIST_FAMILY = tuple(files.DATASET_FOLDERS)  # the ID datasets; each is the other's default OOD set

# (data folder, download allowed) -> (images (N, 28, 28) floats or bytes in 0-255, labels (N,)), arrays or tensors
ImageReader = Callable[[Path, bool], tuple[Any, Any]]
# (ID test images (N, 28, 28) floats in 0-255, the set's stream) -> images (N, 28, 28) in 0-255
ImageGenerator = Callable[[np.ndarray, np.random.Generator], np.ndarray]


@dataclasses.dataclass(frozen=True)
class OodSet:
    """One OOD set: a reader (a loaded set) or a generator (a generated set), never both."""
    name: str
    group: str        # near or far (the rule above)
    description: str
    read: ImageReader | None = None
    generate: ImageGenerator | None = None
    optional: bool = False  # loaded sets only: skipped with a note when its files cannot be had

    def __post_init__(self):  # a mistake in a row is a bug of the table, found at import
        if (self.read is None) == (self.generate is None):
            raise ValueError(f"OOD set {self.name}: give exactly one of a reader and a generator")
        if self.group not in GROUPS:
            raise ValueError(f"OOD set {self.name}: group {self.group!r} is not one of {', '.join(GROUPS)}")
        if self.optional and self.generated:
            raise ValueError(f"OOD set {self.name}: only a loaded set can be optional")

    @property
    def generated(self) -> bool:
        return self.generate is not None

    def rng(self, seed: int = SEED) -> np.random.Generator:
        """A generated set's seed rule: its own stream (seed, name), so its images do not depend on
        which other sets are made."""
        return np.random.default_rng([seed, zlib.crc32(self.name.encode())])


def _test_split(dataset: str, root: Path, download: bool):
    images, labels, _ = files.load_images(root, dataset, False, download)
    return images, labels


def _cifar10_gray28(root: Path, download: bool):
    """CIFAR-10's test batch, top-left 28 x 28 crop, mean over RGB (the DARE paper's)."""
    images, labels = files.load_cifar10_test(root, download)
    return images[:, :, :28, :28].astype(np.float32).mean(axis=1), labels


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
    OodSet("mnist", "near", "the MNIST test split", read=functools.partial(_test_split, "mnist")),
    OodSet("fashion_mnist", "near", "the Fashion-MNIST test split",
           read=functools.partial(_test_split, "fashion_mnist")),
    OodSet("cifar10_gray28", "far", "CIFAR-10's test split, top-left 28 x 28 crop, mean over RGB (the DARE paper's)",
           read=_cifar10_gray28, optional=True),
    OodSet("letters", "near", "the letters A-J in 20 fonts that ship with matplotlib, seeded sizes and positions, white "
           "on black (notMNIST-like; bench.data.rendered)", read=rendered.read_letters, optional=True),
    OodSet("block_shuffled", "near", f"each ID test image with its {BLOCK} x {BLOCK} pixel blocks in a random order",
           generate=_block_shuffled),
    OodSet("inverted", "far", "each ID test image inverted (255 - pixel)", generate=_inverted),
    OodSet("uniform_noise", "far", "pixels uniform in [0, 255]", generate=_uniform),
    OodSet("gaussian_noise", "far", "pixels normal with the ID test pixels' mean and sd, clipped to [0, 255]",
           generate=_gaussian),
    OodSet("constant", "far", "each image one gray level, uniform in [0, 255]", generate=_constant),
    OodSet("bernoulli_noise", "far", "pixels 255 with the ID test share of pixels above 127.5, else 0",
           generate=_bernoulli),
]}


def known_for(id_dataset: str) -> tuple[str, ...]:
    """The OOD sets of an in-distribution dataset, every set but itself: the other MNIST-family
    dataset first (the default), then the table's order."""
    others = tuple(d for d in MNIST_FAMILY if d != id_dataset)
    return others + tuple(n for n in SETS if n != id_dataset and n not in others)


def check_names(names: Iterable[str], id_dataset: str, where: str = "", keywords: tuple[str, ...] = ()) -> None:
    """The one check of OOD set names: ConfigError, one line, naming the first of ``names`` that is
    not an OOD set of ``id_dataset`` and the sets that are (``where``: what the names came from;
    ``keywords``: other words the caller accepts, such as suite)."""
    known = known_for(id_dataset)
    listed = ", ".join(known) + "".join(f", or {word}" for word in keywords)
    prefix = f"{where}: " if where else ""
    for name in names:
        if name in known:
            continue
        if name in SETS:
            raise ConfigError(f"{prefix}OOD set {name!r} is not known for in-distribution {id_dataset} "
                              f"(known: {listed})")
        raise ConfigError(f"{prefix}unknown OOD set {name!r} (known for in-distribution {id_dataset}: {listed})")


def generated() -> tuple[str, ...]:
    """The generated sets, in the table's order."""
    return tuple(name for name, s in SETS.items() if s.generated)


def generate(name: str, id_test: np.ndarray, seed: int = SEED) -> np.ndarray:
    """A generated set: float32 (N, 28, 28) in [0, 255], the same for the same (name, seed, ID images)."""
    ood_set = SETS[name]
    images = ood_set.generate(np.asarray(id_test, dtype=np.float64), ood_set.rng(seed))
    return np.clip(images, 0.0, 255.0).astype(np.float32)


def group(name: str) -> str:
    """near or far; every set a protocol can name is in SETS (``check_names``)."""
    return SETS[name].group
