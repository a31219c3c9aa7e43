"""A run's data: the ID dataset's splits and its OOD sets as in-memory tensors, preprocessed.

Images are decoded once into a float tensor (N, 784); the training loop indexes it directly, so no
per-sample PIL transform runs during training. Preprocessing is an explicit protocol value and is
applied identically to ID and OOD data. The files are found, checked and read by
``bench.data.files``.

OOD sets (``bench.data.ood_sets``): a loaded set is read by its reader, a generated one made from
the ID test split. A required loaded set that is missing is an error, as for the ID set; an
optional one (CIFAR-10, ``cifar10_gray28``) whose files are absent and cannot be downloaded is
skipped with a note, and every run records the skip.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from pathlib import Path

import torch

from bench.data import ood_sets
from bench.data.files import load_images
from bench.errors import DataError


class DataProtocol(typing.Protocol):
    """What loading reads of a run's protocol (bench.config.Protocol has it all; the data stage
    sits below the config, so it names only these fields)."""
    id_dataset: str
    ood_sets: tuple[str, ...]
    n_classes: int
    val_size: int
    preprocess: str

    def split_seed_for(self, seed: int) -> int: ...


@dataclasses.dataclass(frozen=True)
class Split:
    x: torch.Tensor  # (N, features) float32, preprocessed
    y: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.y)


class OodUnavailable(Exception):
    """An optional OOD set is missing and cannot be downloaded: skip it, never crash."""


@dataclasses.dataclass(frozen=True)
class BenchData:
    train: Split
    val: Split
    test: Split
    ood: dict[str, Split]      # OOD set name -> its test split (labels are the set's own)
    ood_skipped: dict[str, str]  # optional OOD sets that could not be loaded -> why
    test_images: torch.Tensor  # (N, 28, 28) uint8, for image grids and the generated sets
    n_classes: int
    class_names: tuple[str, ...]
    prepare: object = None     # (N, 784) floats in 0-255 -> the model's input (the protocol's preprocessing)

    @property
    def in_features(self) -> int:
        return self.train.x.shape[1]


def load_ood_images(root: Path, name: str, download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """A loaded OOD set's images as floats (N, 28, 28) in 0-255, and int64 labels, from its reader.
    Raises OodUnavailable for an optional set that cannot be had (once per process: the failure is
    remembered), DataError for a required one."""
    loaded = _load_ood_images(root, name, download)
    if isinstance(loaded, OodUnavailable):
        raise loaded
    return loaded


def prepare_ood_sets(root: Path, names, download: bool = True) -> dict[str, str]:
    """Load (downloading where allowed) each OOD set once; returns the optional sets that are
    unavailable -> why. A required set that is missing raises DataError."""
    unavailable = {}
    for name in dict.fromkeys(names):
        if ood_sets.SETS[name].generated:
            continue
        try:
            load_ood_images(root, name, download)
        except OodUnavailable as exc:
            unavailable[name] = str(exc)
    return unavailable


@functools.lru_cache(maxsize=8)
def _load_ood_images(root: Path, name: str, download: bool):
    ood_set = ood_sets.SETS[name]
    try:
        images, labels = ood_set.read(root, download)
    except FileNotFoundError as exc:
        if ood_set.optional:
            return OodUnavailable(str(exc))  # cached, so a grid tries a failing download once, not once per run
        raise DataError(f"OOD set {name}: {exc}") from None
    images, labels = torch.as_tensor(images, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.int64)
    if images.ndim != 3 or tuple(images.shape[1:]) != (28, 28) or labels.shape != (len(images),):
        raise DataError(f"OOD set {name}: its reader gave images of shape {tuple(images.shape)} and labels of "
                        f"shape {tuple(labels.shape)}, not (N, 28, 28) and (N,)")
    return images, labels


def preprocessor(kind: str, x_train: torch.Tensor):
    """x (N, 784) floats in 0-255 -> the model's input. x_train (0-255) gives standardize's statistics."""
    if kind == "raw255":
        return lambda x: x
    if kind == "raw":
        return lambda x: x / 255.0
    if kind == "standardize":
        mean, std = (x_train / 255.0).mean(), (x_train / 255.0).std()  # ID train statistics, for every split
        return lambda x: (x / 255.0 - mean) / std
    raise ValueError(f"unknown preprocess {kind!r}")


def load_benchmark_data(protocol: DataProtocol, root: Path, download: bool = True, seed: int = 0) -> BenchData:
    """The data of a run with this protocol and seed (the seed matters only for split_seed=run)."""
    return _load_benchmark_data(protocol, root, download, protocol.split_seed_for(seed))


# a grid reuses one protocol's (and split's) tensors across its runs; a pack may hold the five seeds'
# splits of the paper protocol (split_seed = run), about 260 MB each
@functools.lru_cache(maxsize=6)
def _load_benchmark_data(protocol: DataProtocol, root: Path, download: bool, split_seed: int) -> BenchData:
    train_img, train_y, classes = load_images(root, protocol.id_dataset, True, download)
    test_img, test_y, _ = load_images(root, protocol.id_dataset, False, download)
    ood, skipped = {}, {}
    for name in protocol.ood_sets:
        try:
            # optional sets are downloaded once per grid, before any run (see prepare_ood_sets), so
            # that every run of a grid, in whichever worker, sees the same sets
            ood[name] = ood_images(root, name, test_img, download and not ood_sets.SETS[name].optional)
        except OodUnavailable as exc:
            skipped[name] = str(exc)

    if len(classes) != protocol.n_classes:  # the grid was validated with protocol.n_classes
        raise DataError(f"{protocol.id_dataset} has {len(classes)} classes, not the {protocol.n_classes} that "
                        "bench.config.N_CLASSES says")
    if protocol.val_size >= len(train_y):
        raise DataError(f"val_size={protocol.val_size} leaves no training data ({len(train_y)} images)")
    order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(split_seed))
    val_idx, train_idx = order[:protocol.val_size], order[protocol.val_size:]

    x_train = _flat(train_img[train_idx])  # flattened once: it gives standardize's statistics too
    prep = preprocessor(protocol.preprocess, x_train)
    return BenchData(
        train=Split(prep(x_train), train_y[train_idx]),
        val=_prepared(prep, train_img[val_idx], train_y[val_idx]),
        test=_prepared(prep, test_img, test_y),
        ood={name: _prepared(prep, images, labels) for name, (images, labels) in ood.items()},
        ood_skipped=skipped,
        test_images=test_img,
        n_classes=protocol.n_classes,  # the count the methods were checked against (Method.check_protocol)
        class_names=classes,
        prepare=prep,
    )


def ood_images(root: Path, name: str, id_test_images: torch.Tensor, download: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """An OOD set's images (N, 28, 28) floats in 0-255 and labels: a generated set (``bench.data.ood_sets``,
    labels -1) made from the ID test images, or a loaded one (load_ood_images)."""
    if ood_sets.SETS[name].generated:
        images = torch.from_numpy(ood_sets.generate(name, id_test_images.numpy()))
        return images, torch.full((len(images),), -1, dtype=torch.int64)
    return load_ood_images(root, name, download)


def _flat(images: torch.Tensor) -> torch.Tensor:
    """(N, 28, 28) -> (N, 784) floats in 0-255."""
    return images.flatten(1).float()


def _prepared(prepare, images: torch.Tensor, labels: torch.Tensor) -> Split:
    return Split(prepare(_flat(images)), labels)


def prepared_split(data: BenchData, images: torch.Tensor, labels: torch.Tensor) -> Split:
    """Images (N, 28, 28) in 0-255 as a split the run's model reads (its protocol's preprocessing):
    the path every split of load_benchmark_data takes, for sets made after loading (bench evaluate)."""
    return _prepared(data.prepare, images, labels)
