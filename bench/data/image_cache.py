"""A disk cache of generated image sets (the shift suite's levels), so that a second ``bench evaluate``
reads what the first drew instead of drawing it again.

An entry is one ``.npz`` file named by a hash of everything the images depend on: what they are
(kind and name, e.g. shift fog at level 5 with seed 0), the images they were made from (a SHA-256
of their bytes), the generator's version (``bench.data.shifts.GENERATOR_VERSION``) and the versions
of the libraries that draw them (numpy, scipy, scikit-image). The file keeps that key beside the
images and zip's CRC-32 checks every byte on reading, so a damaged entry (truncated, overwritten,
another key) is noticed, drawn again and replaced. Entries are written atomically
(``bench.fileio``; not fsynced, since an entry cut short by a crash fails its check): two workers
drawing the same level at once both write a complete file, and the last rename wins. Images whose
values are all whole numbers are kept as uint8, others as float32, both exactly: an entry gives back
the very array that was drawn. An entry is deflated when that makes it at least 4x smaller (sparse
images), else stored (noise hardly compresses, and a stored entry reads several times faster). A
cache that cannot be written (a full disk, a read-only folder) is a warning, not a failure: the
images are used uncached.

Where: ``--cache-dir``, else ``$DARE_BENCH_CACHE``, else ``$XDG_CACHE_HOME/dare-bench`` (by default
``~/.cache/dare-bench``); ``none`` turns the cache off. Deleting the folder is always safe.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import warnings
import zipfile
import zlib
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from bench.errors import ConfigError
from bench.fileio import NPZ_DAMAGE, atomic_write, read_npz

CACHE_ENV = "DARE_BENCH_CACHE"
OFF = "none"
_LIBRARIES = ("numpy", "scipy", "scikit-image")


def resolve_cache_dir(flag: str | None) -> Path | None:
    """--cache-dir, else $DARE_BENCH_CACHE, else the user's cache folder; None when 'none' (off)."""
    chosen = flag or os.environ.get(CACHE_ENV)
    if chosen is None:
        chosen = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dare-bench"
    if str(chosen).strip() == "":
        raise ConfigError("cache folder: an empty path (give a folder, or 'none' to turn the cache off)")
    return None if str(chosen) == OFF else Path(chosen)


@contextlib.contextmanager
def readers_cache_dir(flag: str | Path | None):
    """--cache-dir for the readers that take the cache folder from the environment (the rendered
    letters), set for the call and as it was after; nothing changes without a flag."""
    before = os.environ.get(CACHE_ENV)
    if flag is not None:
        os.environ[CACHE_ENV] = str(flag)
    try:
        yield
    finally:
        if flag is not None and before is None:
            os.environ.pop(CACHE_ENV, None)
        elif flag is not None:
            os.environ[CACHE_ENV] = before


class ImageCache:
    """The cache in ``root`` (None: off, every entry is drawn). ``load_or_build`` is the one call;
    ``warn(line)`` is told of a damaged entry and, once, of a cache that cannot be written."""

    def __init__(self, root: Path | None, warn: Callable[[str], None] | None = None):
        self.root = root
        self.warn = warn or (lambda line: warnings.warn(line, RuntimeWarning, stacklevel=4))
        self.warned = False
        self._fingerprints: dict[tuple, tuple[np.ndarray, str]] = {}

    def fingerprint(self, images: np.ndarray) -> str:
        """SHA-256 of ``images``' dtype, shape and bytes; computed once per buffer (a buffer is kept
        while it is remembered, so its address cannot be reused by another array)."""
        key = (images.__array_interface__["data"][0], images.shape, images.dtype.str, images.strides)
        if key not in self._fingerprints:
            digest = hashlib.sha256(f"{images.dtype.str}{images.shape}".encode())
            digest.update(np.ascontiguousarray(images).data)
            self._fingerprints[key] = (images, digest.hexdigest())
        return self._fingerprints[key][1]

    def load_or_build(self, name: str, key: dict, build: Callable[[], np.ndarray]) -> np.ndarray:
        """The entry for ``key`` (a JSON-able dict; ``name`` starts the file name, for people), or
        ``build()``, written as the entry, when there is none or it is damaged."""
        if self.root is None:
            return build()
        key = {**key, **{lib: _version(lib) for lib in _LIBRARIES}}
        text = json.dumps(key, sort_keys=True)
        path = self.root / f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.npz"
        if path.exists():
            found = _read(path, text)
            if found is not None:
                return found
            self.warn(f"cache entry {path} is damaged: drawn again")
        images = build()
        self._write(path, text, images)
        return images

    def _write(self, path: Path, text: str, images: np.ndarray) -> None:
        whole = images.dtype.kind == "f" and np.array_equal(images, np.clip(np.rint(images), 0, 255))
        blob = _zipped({"images": images.astype(np.uint8) if whole else images, "key": np.array(text),
                        "dtype": np.array(images.dtype.str)})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda f: f.write(blob), durable=False)
        except OSError as exc:  # the cache is an optimisation: said once, never fatal
            if not self.warned:
                self.warn(f"the image cache in {self.root} cannot be written ({exc.strerror or exc}): "
                          "generated images are not kept")
                self.warned = True


def _zipped(arrays: dict[str, np.ndarray]) -> bytes:
    """The arrays as an .npz: deflated (level 1) when a sample says that makes it at least 4x smaller
    (sparse or whole-number images), else stored (noise hardly compresses, and a stored entry reads
    5-10x faster)."""
    images = arrays["images"].reshape(-1).view(np.uint8)
    sample = images[:len(images) // 8]
    method = zipfile.ZIP_DEFLATED if 4 * len(zlib.compress(sample, 1)) <= len(sample) else zipfile.ZIP_STORED
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method, compresslevel=1) as z:
        for name, array in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return buffer.getvalue()


def _read(path: Path, text: str) -> np.ndarray | None:
    """The entry's images, or None when it cannot be read, fails its CRC or holds another key."""
    try:
        entry = read_npz(path)
        if str(entry["key"]) != text:
            return None
        return entry["images"].astype(str(entry["dtype"]), copy=False)
    except (*NPZ_DAMAGE, KeyError):  # KeyError: a member missing
        return None


@functools.cache  # a metadata lookup scans the installed distributions: 20 ms, once per process
def _version(library: str) -> str:
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return "absent"
