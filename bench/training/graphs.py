"""A training step captured once in a CUDA graph and replayed (``bench.training.loop``).

On a GPU a pack's step is bound by kernel launches and Python, not arithmetic (a paper-MLP step
costs 2-3 ms whether the pack holds 1 or 100 networks). A CUDA graph records the step's kernels
once (forward, loss, penalty, backward, the fused Adam update, the stopped members' hold and the
epoch sums) and replays them with one launch. The step reads its batch indices from a fixed input
buffer; everything else it touches (parameters, Adam's state, the members' masks, the epoch sums)
is updated in place, so each replay is the next step.

* The first ``WARMUP_STEPS`` steps run eagerly on a side stream (lazy initialisations: cuBLAS
  handles, Adam's state), then the graph is captured; capturing runs nothing, so every step of
  training is computed exactly once.
* One graph per (batch width, whether stopped members are held): the last batch of an epoch is
  usually narrower, and holding starts when the first member stops. A capture synchronises the
  device once (torch.cuda.graph), so the epoch that captures a graph waits for the host once more.
* The learning rate of a schedule (a device tensor, filled before the step) and ``after_step`` run
  around the step, eagerly, between replays.
* A method's step is captured only when it can be (``Method.capturable_step``), the
  device is a GPU and ``--step`` is auto or graph. Anything else runs the same step eagerly; so does
  every step after a capture that failed (with one warning).
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from methods.base import Method

WARMUP_STEPS = 3


def capture_wanted(method: Method, device: torch.device, mode: str) -> bool:
    """Whether the steps of ``method`` on ``device`` are replayed from CUDA graphs under ``--step
    mode``: auto and graph capture a capturable step (``Method.capturable_step``) on a GPU; eager
    never does. (``--step graph`` without a GPU is refused before training: Execution.check_device.)"""
    return mode != "eager" and device.type == "cuda" and method.capturable_step()


class CapturedSteps:
    """The loop's step, ``step(idx)``, replayed from CUDA graphs (see the module
    docstring); ``members.holding`` picks the graph that holds stopped members."""

    def __init__(self, step: Callable[[torch.Tensor], None], members):
        self.step, self.members = step, members
        # each graph its own memory pool: they replay in no fixed order, and they are small
        self.graphs: dict[tuple[bool, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.eager = 0            # warm-up steps run so far
        self.failed: str | None = None
        self.stream = torch.cuda.Stream()

    @property
    def description(self) -> str:
        """How the steps ran, for the record: graph, or eager after a failed capture and why."""
        if self.failed is not None:
            return f"eager (capture failed: {self.failed})"
        return "graph" if self.graphs else "eager (too few steps to capture)"

    def __call__(self, idx: torch.Tensor) -> None:
        if self.failed is not None or self.eager < WARMUP_STEPS:
            self._eager(idx)
            return
        key = (self.members.holding, idx.shape[1])
        if key not in self.graphs and not self._capture(key, idx):
            self._eager(idx)
            return
        graph, static_idx = self.graphs[key]
        static_idx.copy_(idx)
        graph.replay()

    def _eager(self, idx: torch.Tensor) -> None:
        """One step run eagerly, on the side stream while warming up (as CUDA graphs require)."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            self.step(idx)
        torch.cuda.current_stream().wait_stream(self.stream)
        self.eager += 1

    def _capture(self, key: tuple[bool, int], idx: torch.Tensor) -> bool:
        """Record the step for batches of idx's shape; False (and eager steps from now on) if it fails."""
        static_idx = idx.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.step(static_idx)
        except Exception as exc:  # noqa: BLE001 - any capture error: train on, eagerly
            self.failed = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"the training step could not be captured in a CUDA graph ({self.failed}); "
                          "training goes on with eager steps", RuntimeWarning, stacklevel=2)
            return False
        self.graphs[key] = (graph, static_idx)
        return True
