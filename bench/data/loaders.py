"""One loader for every method: torchvision's MNIST/FashionMNIST files (and CIFAR-10's test batch,
an optional OOD set) -> in-memory tensors.

Images are decoded once into a float tensor (N, 784); the training loop indexes it directly, so no
per-sample PIL transform runs during training. Preprocessing is an explicit protocol value and is
applied identically to ID and OOD data.

OOD sets: the MNIST-family datasets are required (a missing file is an error, as for the ID set).
CIFAR-10 (``cifar10_gray28``: its test split cropped to the top-left 28 x 28 pixels and averaged
over RGB, as in the DARE paper) is optional: when its file is absent and cannot be downloaded,
that set is skipped with a note and every run records the skip.
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
import typing
from pathlib import Path

import numpy as np
import torch
import torchvision

from bench.data import ood_sets
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
CIFAR10 = torchvision.datasets.CIFAR10  # its url, archive name, md5s and folder name
CIFAR10_TEST_MD5 = dict(CIFAR10.test_list)["test_batch"]
DOWNLOAD_TIMEOUT_S = 60
OPTIONAL_OOD_SETS = ood_sets.OPTIONAL  # skipped with a note when unavailable; the others are required
CIFAR10_FULL_SIZE = 30_000_000  # a test_batch this large claims to be the official file: check its md5


class DataProtocol(typing.Protocol):
    """What loading reads of a run's protocol (bench.config.Protocol has it all; the data stage
    sits below the config, so it names only these fields)."""
    id_dataset: str
    ood_sets: tuple[str, ...]
    n_classes: int
    val_size: int
    preprocess: str

    def split_seed_for(self, seed: int) -> int: ...


def resolve_data_dir(flag: str | None) -> Path:
    """--data-dir, else $DARE_BENCH_DATA, else ./data."""
    return Path(flag or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


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


def _cifar10_gray28(root: Path, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10's test batch, top-left 28 x 28 crop, mean over RGB: float (N, 28, 28) in 0-255, labels."""
    folder = root / CIFAR10.base_folder
    path = folder / "test_batch"
    if not path.is_file():
        if not download:
            raise OodUnavailable(f"{path} not found")
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # torchvision's urlopen has none: a silent firewall would hang
        try:
            torchvision.datasets.utils.download_and_extract_archive(
                CIFAR10.url, str(root), filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)
        except Exception as exc:  # offline, read-only folder, ...: skip the set, say why
            raise OodUnavailable(f"{path} not found and download failed ({type(exc).__name__})") from None
        finally:
            socket.setdefaulttimeout(previous)
    if path.stat().st_size >= CIFAR10_FULL_SIZE and _md5(path) != CIFAR10_TEST_MD5:
        raise DataError(f"{path} is corrupt: md5 differs from the official file's ({CIFAR10_TEST_MD5})")
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = torch.as_tensor(np.asarray(batch[b"labels"], dtype=np.int64))
    except Exception as exc:
        raise DataError(f"{path} is not a readable CIFAR-10 batch ({type(exc).__name__}: {exc})") from None
    if len(labels) != len(images):
        raise DataError(f"{path}: {len(images)} images but {len(labels)} labels")
    gray = torch.from_numpy(images[:, :, :28, :28].astype(np.float32).mean(axis=1))
    return gray, labels


def load_ood_images(root: Path, name: str, download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """An OOD set's test images as floats (N, 28, 28) in 0-255, and labels. Raises OodUnavailable
    for an optional set that cannot be had (once per process: the failure is remembered), DataError
    for a required one."""
    loaded = _load_ood_images(root, name, download)
    if isinstance(loaded, OodUnavailable):
        raise loaded
    return loaded


def prepare_ood_sets(root: Path, names, download: bool = True) -> dict[str, str]:
    """Load (downloading where allowed) each OOD set once; returns the optional sets that are
    unavailable -> why. A required set that is missing raises DataError."""
    unavailable = {}
    for name in dict.fromkeys(names):
        if name in ood_sets.GENERATED:
            continue
        try:
            load_ood_images(root, name, download)
        except OodUnavailable as exc:
            unavailable[name] = str(exc)
    return unavailable


@functools.lru_cache(maxsize=8)
def _load_ood_images(root: Path, name: str, download: bool):
    if name in OPTIONAL_OOD_SETS:
        try:
            return _cifar10_gray28(root, download)
        except OodUnavailable as exc:
            return exc  # cached, so a grid tries a failing download once, not once per run
    images, labels, _ = load_images(root, name, False, download)
    return images.float(), labels


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
            ood[name] = ood_images(root, name, test_img, download and name not in OPTIONAL_OOD_SETS)
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
    if name in ood_sets.GENERATED:
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
