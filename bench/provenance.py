"""Which dare-bench wrote a record: the package version, and the git commit when the code runs
from a git checkout. A grid that reuses records written by another version says so."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

VERSION_KEY, COMMIT_KEY = "harness_version", "harness_commit"


def version() -> str:
    from bench import __version__
    return __version__


@functools.cache
def commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def stamp() -> dict[str, str | None]:
    """The provenance fields of every record."""
    return {VERSION_KEY: version(), COMMIT_KEY: commit()}


def other_versions(records: list[dict]) -> dict[str, int]:
    """Version -> how many of ``records`` another dare-bench version wrote ('unknown' if unstamped)."""
    out: dict[str, int] = {}
    for record in records:
        written_by = record.get(VERSION_KEY) or "unknown"
        if written_by != version():
            out[written_by] = out.get(written_by, 0) + 1
    return out
