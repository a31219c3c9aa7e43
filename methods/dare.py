"""DARE: Deep Anti-Regularized Ensembles (de Mathelin et al., arXiv 2304.04042).

Per member and step: ``loss = task_loss - lam * R(theta)``, with
``R(theta) = (1/d) * sum_k log(theta_k^2 + eps)`` over all d trainable scalars of the member
(weights and biases) and ``lam = 1`` when that member's detached batch task loss is <= threshold,
else 0. No other coefficient. The switch is a tensor mask, so it costs no host sync.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import torch

from bench.models import StackedMLP
from bench.options import is_finite_nonneg, option, parse_float
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION

EPS = torch.finfo(torch.float32).eps


def anti_regularizer(stacked_params: Iterable[torch.Tensor]) -> torch.Tensor:
    """R per member, for parameters stacked on a leading member axis. Returns shape (M,)."""
    total, count = 0.0, 0
    for p in stacked_params:
        total = total + torch.log(p.square() + EPS).flatten(1).sum(dim=1)
        count += p[0].numel()
    return total / count


@dataclasses.dataclass(frozen=True)
class DARE(Method):
    name = "dare"
    summary = "ensemble with a per-member anti-regularizer switched on when the batch loss <= threshold"

    members: int = option(3, **MEMBERS_OPTION)
    threshold: float = option(0.3, parse=parse_float, check=is_finite_nonneg,
                              allowed="a finite number >= 0",
                              help="task-loss threshold at or below which the anti-regularizer is on")

    def penalty(self, model: StackedMLP, task_loss: torch.Tensor) -> torch.Tensor:
        switch = (task_loss.detach() <= self.threshold).to(task_loss.dtype)
        return -switch * anti_regularizer(model.parameters())
