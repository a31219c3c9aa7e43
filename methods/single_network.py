"""One network: the floor that every ensemble in a table is compared with."""
from __future__ import annotations

import dataclasses

import torch

from bench.options import choice
from methods.base import TASK_LOSSES, Method
from methods.deep_ensemble import LOSS_HELP


@dataclasses.dataclass(frozen=True)
class SingleNetwork(Method):
    name = "single_network"
    summary = "one deterministic network trained on the task loss (no ensemble)"
    packable = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)

    loss: str = choice("ce", tuple(TASK_LOSSES), help=LOSS_HELP)

    @property
    def label(self) -> str:
        return "Single network" + (" (MSE)" if self.loss == "mse" else "")

    @property
    def n_networks(self) -> int:
        return 1

    def task_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return TASK_LOSSES[self.loss](logits, targets)
