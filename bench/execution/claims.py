"""Claims: how workers that share one results folder split a grid without training a run twice.

Before a worker trains a pack, it claims each run of the pack by creating OUT/claims/<run_id>.json
with O_CREAT | O_EXCL (atomic, also on NFS), holding its host, process, start time and heartbeat
interval. While the pack trains, a thread touches each claim file (its mtime is the heartbeat). A
finished record removes its claim. Other workers skip claimed runs; a claim whose heartbeat is older
than the timeout belongs to a dead worker and is taken over, and so, at once, is a claim of a
process of this machine (same kernel boot, same process namespace) that no longer exists: a
resumed command does not wait for its own killed predecessor. A takeover is decided by one more
O_EXCL file named after the stale claim's mtime (``<run_id>.<mtime>.takeover<k>``; level k + 1 when
the taker of level k died too), so that of several workers that see the same stale claim exactly
one takes it; markers are removed only with the finished run's claim. Whoever trained a run, its
record says so (``worker``).

Files are opened before their mtime is read (``os.fstat``), so that an NFS client revalidates them
(close-to-open consistency) instead of answering from its attribute cache.

Which runs still need training is read from the records alone (``RunsToDo``), so that commands started
on several machines agree without talking to each other.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

from bench.errors import BenchError
from bench.provenance import worker_name
from bench.store import RunStore

DEFAULT_TIMEOUT = 300.0  # seconds without a heartbeat after which a claim's worker is taken for dead
HEARTBEATS_PER_TIMEOUT = 10  # a worker touches its claims this often within one timeout


@dataclasses.dataclass(frozen=True)
class Claim:
    """A run's claim as another worker sees it."""
    run_id: str
    worker: str          # 'host pid N' ('unknown' for a claim still being written)
    token: str           # unique per holder: which process instance holds it
    started_at: str
    heartbeat_age: float  # seconds since the holder last touched the claim
    interval: float       # the holder's heartbeat interval
    host: str = ""
    pid: int = 0
    machine: str = ""     # machine_id() of its process
    mtime_ns: int = 0     # the claim file's, when read: which claim a takeover replaces

    def gone(self) -> bool:
        """Its process ran on this machine (kernel boot and process namespace) and has ended."""
        if not self.machine or self.machine != machine_id() or self.pid <= 0:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's live process
            return False
        return False

    def stale(self, timeout: float) -> bool:
        # never less than three of the holder's own heartbeats: a worker with a longer timeout is not robbed
        return self.heartbeat_age > max(timeout, 3 * self.interval) or self.gone()

    def why_stale(self, timeout: float) -> str:
        if self.gone():
            return f"its process {self.pid} has ended"
        return f"no heartbeat for {duration(self.heartbeat_age)} (claim timeout {timeout:g} s)"


@functools.cache
def machine_id() -> str:
    """This kernel boot and process namespace ('' where /proc does not tell): a pid means the same
    process only where both match (two containers may share a host name but not their pids)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _opened_stat(path: Path) -> tuple[os.stat_result, bytes] | None:
    """(stat, bytes) of a file, opened before its mtime is read so that an NFS client revalidates
    it; None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return os.fstat(f.fileno()), f.read()
    except FileNotFoundError:
        return None


def duration(seconds: float) -> str:
    """Seconds as s, min or h, whichever reads best (a heartbeat's age; the CLI's wall times)."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


class Claims:
    """The claims folder of one results folder, as one worker process uses it."""

    def __init__(self, out: Path, timeout: float = DEFAULT_TIMEOUT, log: Callable[[str], None] = print):
        self.folder = Path(out) / "claims"
        self.timeout = float(timeout)
        self.interval = self.timeout / HEARTBEATS_PER_TIMEOUT
        self.token = uuid.uuid4().hex
        self.log = log
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def path(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"

    def read(self, run_id: str) -> Claim | None:
        """The run's claim, or None when nobody holds it."""
        opened = _opened_stat(self.path(run_id))
        if opened is None:
            return None
        stat, text = opened
        try:
            body = json.loads(text)
        except json.JSONDecodeError:  # created, not yet written (or its writer died in between)
            body = {}
        return Claim(run_id, body.get("worker", "unknown"), body.get("token", ""), body.get("started_at", ""),
                     max(0.0, time.time() - stat.st_mtime), float(body.get("interval", 0.0)), body.get("host", ""),
                     int(body.get("pid", 0)), body.get("machine", ""), stat.st_mtime_ns)

    def held_by_others(self, run_ids: list[str], take_over_stale: bool = False) -> dict[str, Claim]:
        """The live claims (heartbeat within the timeout) among ``run_ids`` that this worker does not
        hold. ``take_over_stale``: take over and release at once the stale ones (one line each), so that
        any worker may claim them afresh: a command judges staleness on its own machine, since its
        tasks may run on others, where a dead local process cannot be seen."""
        out = {}
        for run_id in run_ids:
            claim = self.read(run_id)
            if claim is None or claim.token == self.token:
                continue
            if not claim.stale(self.timeout):
                out[run_id] = claim
            elif take_over_stale and self.acquire(run_id):
                self.release(run_id)
        return out

    def acquire(self, run_id: str) -> bool:
        """Claim the run; False when another worker holds it. A stale claim is taken over (one line)."""
        self._ensure()
        body = json.dumps({"run_id": run_id, "worker": worker_name(), "host": socket.gethostname(),
                           "pid": os.getpid(), "machine": machine_id(), "token": self.token,
                           "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "interval": self.interval}).encode()
        try:
            fd = os.open(self.path(run_id), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return self._take_over(run_id, body)
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        self._hold(run_id)
        return True

    def _take_over(self, run_id: str, body: bytes) -> bool:
        claim = self.read(run_id)
        if claim is None:  # released meanwhile: claim it afresh
            return self.acquire(run_id)
        if claim.token == self.token:
            return True
        if not claim.stale(self.timeout):
            return False
        # the one worker that creates a marker for this claim takes it; the others see the marker and move on.
        # A marker older than the timeout belongs to a taker that died before it wrote its claim: the next level
        for level in itertools.count(1):
            marker = self.folder / f"{run_id}.{claim.mtime_ns}.takeover{level}"
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                break
            except FileExistsError:
                if not self._expired(marker):
                    return False
        tmp = self.folder / f".{run_id}.{self.token}.tmp"
        tmp.write_bytes(body)
        os.replace(tmp, self.path(run_id))
        self._hold(run_id)
        self.log(f"took over run {run_id} from {claim.worker}: {claim.why_stale(self.timeout)}")
        return True

    def _expired(self, marker: Path) -> bool:
        opened = _opened_stat(marker)  # None: removed with a finished run's claim, nothing left to take
        return opened is not None and time.time() - opened[0].st_mtime > self.timeout

    def _hold(self, run_id: str) -> None:
        with self._lock:
            self._held.add(run_id)

    def release(self, run_id: str) -> None:
        """Remove this worker's claim on the run (after its record is written), and any takeover markers."""
        with self._lock:
            self._held.discard(run_id)
        claim = self.read(run_id)
        if claim is not None and claim.token == self.token:
            self.path(run_id).unlink(missing_ok=True)
        for marker in self.folder.glob(f"{run_id}.*.takeover*"):
            marker.unlink(missing_ok=True)

    def beat(self) -> None:
        """Touch every claim this worker holds; say so once if another worker has taken one over."""
        with self._lock:
            held = list(self._held)
        for run_id in held:
            claim = self.read(run_id)
            if claim is not None and claim.token == self.token:
                with contextlib.suppress(FileNotFoundError):
                    os.utime(self.path(run_id))
                continue
            with self._lock:
                if run_id not in self._held:  # released while this beat ran: nothing lost
                    continue
                self._held.discard(run_id)
            holder = claim.worker if claim else "nobody"
            self.log(f"warning: the claim on run {run_id} was taken over (now held by {holder}): this worker's "
                     "heartbeat came too late; its record is still written, the run may be trained twice")

    @contextlib.contextmanager
    def holding(self) -> Iterator["Claims"]:
        """Heartbeats while the block runs; every claim still held is released at its end, also on
        an error or Ctrl-C (a killed process leaves its claims to go stale and be taken over)."""
        stop = threading.Event()

        def heartbeat():
            while not stop.wait(self.interval):
                self.beat()

        thread = threading.Thread(target=heartbeat, name="dare-bench claims heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            with self._lock:
                held = list(self._held)
            for run_id in held:
                self.release(run_id)

    def _ensure(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create the claims folder {self.folder}: {exc.strerror}") from None


def _identity(path: Path) -> tuple[int, int] | None:
    """A record file as it is now: (inode, mtime in ns); every atomic write makes a new one."""
    opened = _opened_stat(path)
    return None if opened is None else (opened[0].st_ino, opened[0].st_mtime_ns)


@dataclasses.dataclass(frozen=True)
class RunsToDo:
    """Which runs of one grid still need training, by whichever worker: read from the records alone.
    A record that changed since the grid began (another worker, or this one, wrote it) settles its
    run, whatever its status; one as the grid found it settles it unless ``force`` or the store would
    run it again (an error, a corrupt record, a selection that met a failed candidate). No clock is
    compared, so machines whose clocks differ agree."""
    store: RunStore
    found: dict[str, tuple[int, int] | None]  # run id -> its record file when the grid began (None: no record)
    force: bool = False

    @classmethod
    def at_start(cls, store: RunStore, run_ids, force: bool = False) -> "RunsToDo":
        return cls(store, {run_id: _identity(store.record_path(run_id)) for run_id in run_ids}, force)

    def needs(self, run_id: str) -> bool:
        now = _identity(self.store.record_path(run_id))
        if now is None:
            return True
        if run_id in self.found and now != self.found[run_id]:
            return False
        return self.force or run_id not in self.store.check([run_id])[0]
