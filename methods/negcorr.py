"""Negative correlation learning (Liu & Yao, 1999; Shui et al., 2018), as in the DARE paper.

Members train jointly. With ``fbar = stopgrad(mean_m f_m)``, the term is
``lam * (1/M) sum_m mean[(f_m - fbar) * stopgrad(sum_{j != m} (f_j - fbar))]`` on the raw outputs,
the mean over the batch and the outputs. The stop-gradients make member m's gradient
``lam/(M B K) * sum_{j != m} (f_j - fbar)``: it is pushed away from the others' deviations.
"""
from __future__ import annotations

import dataclasses

import torch

from bench.models.stacked import StackedNetwork
from bench.options import option
from methods.anchor_net import POSITIVE
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


def negative_correlation(outputs: torch.Tensor) -> torch.Tensor:
    """Per member m: mean[(f_m - fbar) * stopgrad(sum_{j != m}(f_j - fbar))], fbar stopped: (M, B, K) -> (M,)."""
    deviation = outputs - outputs.mean(dim=0).detach()
    others = (deviation.sum(dim=0, keepdim=True) - deviation).detach()
    return (deviation * others).flatten(1).mean(dim=1)


@dataclasses.dataclass(frozen=True)
class NegCorr(Method):
    name = "negcorr"
    summary = "joint members; penalises each member's correlation with the others' deviations"
    joint = True
    packable = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    pack_options = ("lam",)

    members: int = option(3, **MEMBERS_OPTION)
    lam: float = option(1e-3, **POSITIVE, help="weight of the correlation term")

    @property
    def label(self) -> str:
        return "NegCorr"

    def penalty(self, model: StackedNetwork, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        members = model.members // batch.runs
        terms = torch.cat([negative_correlation(o) for o in batch.run_parts(batch.logits)])  # run by run
        return self.lam * terms / members  # shares of each run's (lam/M) sum_m
