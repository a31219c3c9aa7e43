"""A pack's training kept on disk every few minutes, so that a pack cut short (a session's end, a
killed job, a pre-empted node) goes on from its last kept epoch instead of from its first.

A snapshot holds everything the next epoch reads: the stacked weights and buffers, Adam's state,
the method's training state (its counter streams, anchors), each member's masks and saved
checkpoint weights, each network's data-order generator, torch's global generator (VI's weight
noise) and the history so far. Training resumed from it goes on as it would have gone on: on the
CPU the kept weights equal an uninterrupted run's bit for bit (tests/training/test_snapshots.py).

The runner names the file after its pack (the hash of its run ids: the same runs, the same
protocol and options) and deletes it once every record of the pack is stored and none failed. The
file also holds the device type it was kept on (a generator's state is the device's own) and the
commit that kept it (a resumed run's record names it: ``resumed_commit``).
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import torch

from bench.fileio import atomic_write
from bench.provenance import commit

FORMAT = 1  # of the snapshot file; a file of another format is not read


class TrainingSnapshot:
    """Where one pack's training state is kept (``path``), and how often: at the end of an epoch
    when ``every`` seconds have passed since the last save (0: never saved, still read)."""

    def __init__(self, path: Path, key: str, every: float = 300.0):
        self.path, self.key, self.every = Path(path), key, every
        self.resumed_commit = ""     # the commit of the code that kept the snapshot
        self.seconds_before = 0.0    # training time spent before the resumed epoch
        self._last = time.perf_counter()
        self._failed = False

    def restore(self, loop) -> tuple[int, list[dict]]:
        """Put the kept state into the training ``loop`` (just built, before any step). Returns
        (the first epoch to train, the history so far); (1, []) when there is nothing usable to
        resume from. A damaged or foreign file (another pack, model, format or device type) is one
        warning and ignored; it is checked whole before anything is put back, so training never
        starts from a half-restored state."""
        if not self.path.exists():
            return 1, []
        try:
            kept = torch.load(self.path, map_location=loop.device, weights_only=False)
            _check(loop, kept, self.key)
        except Exception as exc:  # noqa: BLE001 - a damaged snapshot costs its epochs, never the run
            warnings.warn(f"{self.path}: cannot resume from it ({type(exc).__name__}: {exc}); training from the start",
                          stacklevel=2)
            return 1, []
        _put_back(loop, kept)
        self.seconds_before = kept["seconds"]
        self.resumed_commit = kept.get("commit") or ""
        return kept["epoch"] + 1, kept["history"]

    def due(self) -> bool:
        return self.every > 0 and not self._failed and time.perf_counter() - self._last >= self.every

    def save(self, loop, history: list[dict], epoch: int, seconds: float) -> None:
        """Keep the state after ``epoch``. A write that fails (a full disk, a state that cannot be
        pickled) is one warning, and the pack trains on without snapshots."""
        state = {"format": FORMAT, "key": self.key, "device": loop.device.type, "commit": commit() or "",
                 "epoch": epoch, "seconds": seconds, "history": history, **_taken(loop)}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, lambda f: torch.save(state, f))
        except Exception as exc:  # noqa: BLE001
            self._failed = True
            warnings.warn(f"{self.path}: cannot keep the training state ({type(exc).__name__}: {exc}); "
                          "this pack trains on without snapshots", stacklevel=2)
        self._last = time.perf_counter()

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


_MEMBER_TENSORS = ("active", "stopped_epoch", "nonfinite_epoch", "diverged_epoch", "kept_epoch", "best_val")


def _taken(loop) -> dict[str, Any]:
    """What the next epoch reads, as it is now (tensors cloned: training goes on meanwhile)."""
    members = loop.members
    return {"model": {k: v.detach().clone() for k, v in loop.model.state_dict().items()},
            "optimizer": loop.optimizer.state_dict(), "method_state": loop.state,
            "members": {name: getattr(members, name).clone() for name in _MEMBER_TENSORS}
            | {"holding": members.holding, "frozen": members.frozen, "saved": members.saved},
            "order_gens": [g.get_state() for g in loop.order_gens],
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if loop.device.type == "cuda" else None}


def _check(loop, kept: dict[str, Any], key: str) -> None:
    """Refuse a snapshot that does not fit, before anything is changed."""
    if kept.get("format") != FORMAT or kept.get("key") != key:
        raise ValueError(f"it belongs to another pack or format ({kept.get('key')}, format {kept.get('format')})")
    # (a snapshot of dare-bench 0.6.3 before e94005d names no device: the state sizes below tell)
    if kept.get("device", loop.device.type) != loop.device.type:
        raise ValueError(f"it was kept on a {kept.get('device')} device, and this pack trains on {loop.device.type}")
    shapes = {k: tuple(v.shape) for k, v in loop.model.state_dict().items()}
    if shapes != {k: tuple(v.shape) for k, v in kept["model"].items()}:
        raise ValueError("its weights have other names or shapes than this pack's model")
    if [s.numel() for s in kept["order_gens"]] != [g.get_state().numel() for g in loop.order_gens]:
        raise ValueError("its data orders are another number, or another generator's")
    if kept["torch_rng"].numel() != torch.get_rng_state().numel():
        raise ValueError("its global generator's state is another size")


def _put_back(loop, kept: dict[str, Any]) -> None:
    """Restore in place where a tensor is read by reference (parameters, the members' masks: a
    captured CUDA graph reads those very tensors)."""
    loop.model.load_state_dict(kept["model"])
    # Adam's moments and step counts; the learning rate object and the fused / capturable kernels stay
    # this run's own (a rate on the device that a CUDA graph reads, capture chosen by --step)
    own = [{k: g[k] for k in ("lr", "capturable", "fused") if k in g} for g in loop.optimizer.param_groups]
    loop.optimizer.load_state_dict(kept["optimizer"])
    for group, settings in zip(loop.optimizer.param_groups, own):
        group.update(settings)
    loop.state = kept["method_state"]
    members, saved = loop.members, kept["members"]
    for name in _MEMBER_TENSORS:
        getattr(members, name).copy_(saved[name])
    members.holding, members.frozen, members.saved = saved["holding"], saved["frozen"], saved["saved"]
    for generator, state in zip(loop.order_gens, kept["order_gens"]):
        generator.set_state(state.cpu())
    torch.set_rng_state(kept["torch_rng"].cpu())
    if kept["cuda_rng"] is not None and loop.device.type == "cuda":
        torch.cuda.set_rng_state_all([s.cpu() for s in kept["cuda_rng"]])
