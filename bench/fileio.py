"""Writing a file so that a reader never sees half of it: into a temporary file beside it, then a
rename over it (atomic on one filesystem). A write that fails (a full disk, a folder made read-only)
leaves the old file, or none, and no temporary file. Reading an .npz archive so that a damaged one
is noticed at once: every member read in full, so that zip's CRC-32 checks every byte."""
from __future__ import annotations

import io
import os
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

# what read_npz raises for an archive that is not whole: not a zip, a directory, a torn directory, a
# damaged deflate stream, a bad CRC, a bad .npy header, an unknown compression
NPZ_DAMAGE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError)

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once, at import (single-threaded): the mode a plain open() would give a new file


def atomic_write(path: Path, write, durable: bool = True) -> None:
    """write(file) into a temp file beside ``path``, fsync (unless not ``durable``: a cache, whose
    entries are checked on reading), then rename over ``path``. An OSError that names no file (a
    write into a full disk) is raised again naming ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide the file from the others sharing a folder
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write() names no file: name it
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz archive, each member read in full (np.load alone opens an archive with a
    damaged member and fails only when that member is read); one of NPZ_DAMAGE if it is not whole."""
    with zipfile.ZipFile(path) as archive:
        return {name.removesuffix(".npy"): np.lib.format.read_array(io.BytesIO(archive.read(name)))
                for name in archive.namelist()}
