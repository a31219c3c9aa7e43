"""Which dare-bench wrote a record: the package version, and the git commit when the code runs
from a git checkout. A grid that reuses records written by another version says so."""
from __future__ import annotations

import functools
import os
import socket
import subprocess
from pathlib import Path

VERSION = "0.6.3"  # the one place the version is written (pyproject.toml and bench.__version__ read it)
VERSION_KEY, COMMIT_KEY = "harness_version", "harness_commit"
CODE = ("bench", "methods", "run_all.py", "pyproject.toml")  # what a commit stamp vouches for


def version() -> str:
    return VERSION


@functools.cache
def commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        # uncommitted edits to the code (not to results/) make the commit an approximation: say so
        edits = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", *CODE], capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + ("+edits" if edits.returncode == 0 and edits.stdout.strip() else "")


def stamp() -> dict[str, str | None]:
    """The provenance fields of every record."""
    return {VERSION_KEY: version(), COMMIT_KEY: commit()}


def worker_name() -> str:
    """This process, as a record (``worker``: who trained it) and a claim name it: 'host pid N'."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def other_versions(records: list[dict]) -> dict[str, int]:
    """Writer -> how many of ``records`` another dare-bench wrote: another version ('unknown' if
    unstamped), or, where both this code and the record know their commit, another commit
    ('0.2.0 at 1a2b3c4d')."""
    out: dict[str, int] = {}
    mine = commit()
    for record in records:
        written_by = record.get(VERSION_KEY) or "unknown"
        theirs = record.get(COMMIT_KEY)
        if written_by == version() and mine and theirs and theirs != mine:
            written_by = f"{written_by} at {theirs[:8]}{'+edits' if theirs.endswith('+edits') else ''}"
        elif written_by == version():
            continue
        out[written_by] = out.get(written_by, 0) + 1
    return out
