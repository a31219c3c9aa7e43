"""MOD, maximize overall diversity (Jain et al., 2020), as in the DARE paper's baselines.

Members train jointly. Each step draws inputs uniformly in the per-feature [min, max] box of the
current batch (same shape as the batch) and adds ``-lam * mean over those inputs and outputs of
the variance across members`` (population variance) of the raw outputs.
"""
from __future__ import annotations

import dataclasses

import torch

from bench.models import StackedMLP
from bench.options import option
from methods.anchor_net import POSITIVE
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


def box_samples(x: torch.Tensor) -> torch.Tensor:
    """Uniform draws in the per-feature [min, max] box of the rows of x (torch's global generator)."""
    lo, hi = x.min(dim=0).values, x.max(dim=0).values
    return lo + (hi - lo) * torch.rand_like(x)


def member_variance(outputs: torch.Tensor) -> torch.Tensor:
    """Mean over samples and outputs of the variance across members (ddof 0): (M, N, K) -> ()."""
    return outputs.var(dim=0, unbiased=False).mean()


@dataclasses.dataclass(frozen=True)
class MOD(Method):
    name = "mod"
    summary = "joint members; rewards disagreement on inputs drawn uniformly in the batch's feature box"
    joint = True

    members: int = option(3, **MEMBERS_OPTION)
    lam: float = option(1e-3, **POSITIVE, help="weight of the diversity term")

    @property
    def label(self) -> str:
        return "MOD"

    def penalty(self, model: StackedMLP, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        term = -self.lam * member_variance(model(box_samples(batch.x)))
        return term.expand(model.members) / model.members  # shares of the one joint term
