"""The method API: what a method may change, and what it must return.

A method is a dataclass whose fields are its options (declared with ``bench.options.option`` so
they are validated and listed). The shared training loop asks it for three things:

* ``n_networks`` / ``dropout_rate``: the shape of the stacked model to train;
* ``task_loss`` and ``penalty``: the per-member training objective, shape (members,);
* ``predict_proba``: test-time probabilities, shape (samples, N, classes). Samples are ensemble
  members or stochastic passes; every evaluator works from this one array.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
import torch.nn.functional as F

from bench.models import StackedMLP

PREDICT_CHUNK = 8192  # rows per forward pass at test time: bounds memory for large test sets


@dataclasses.dataclass(frozen=True)
class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    @property
    def n_networks(self) -> int:
        return self.members  # type: ignore[attr-defined]

    @property
    def dropout_rate(self) -> float:
        return 0.0

    def task_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy per member. logits (M, B, K), targets (M, B) -> (M,)."""
        members, batch, classes = logits.shape
        per_sample = F.cross_entropy(logits.reshape(-1, classes), targets.reshape(-1), reduction="none")
        return per_sample.view(members, batch).mean(dim=1)

    def penalty(self, model: StackedMLP, task_loss: torch.Tensor) -> torch.Tensor | None:
        """Per-member term added to the task loss, shape (M,), or None."""
        return None

    @torch.no_grad()
    def logits(self, model: StackedMLP, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """(M, N, K) logits, computed in chunks of rows."""
        return torch.cat([model(chunk, dropout=dropout) for chunk in x.split(PREDICT_CHUNK)], dim=1)

    def predict_proba(self, model: StackedMLP, x: torch.Tensor) -> torch.Tensor:
        """Softmax of each member (no dropout): (members, N, K)."""
        return self.logits(model, x).softmax(dim=-1)
