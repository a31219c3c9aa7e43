"""DARE: Deep Anti-Regularized Ensembles (de Mathelin et al., arXiv 2304.04042).

Per member and step: ``loss = task_loss - lam * R(theta)``, with
``R(theta) = (1/d) * sum_k log(theta_k^2 + eps)`` over all d trainable scalars of the member
(weights and biases) and ``lam = 1`` when that member's detached batch task loss is <= tau,
else 0. No other coefficient. The switch is a tensor mask, so it costs no host sync.

tau is absolute (``threshold``) or relative (``delta``): tau = (1 + delta) * the validation task
loss of the deep ensemble with the same loss, member count, protocol and seed, restored to its
best epoch (the paper's DE (MSE) reference). The grid runs or reuses that reference first.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

import torch

from bench.errors import ConfigError
from bench.models.stacked import StackedNetwork
from bench.options import is_finite_nonneg, option, parse_float, parse_optional
from methods.base import Batch, ReferenceFailed
from methods.deep_ensemble import DeepEnsemble

EPS = torch.finfo(torch.float32).eps


def anti_regularizer(stacked_params: Iterable[torch.Tensor]) -> torch.Tensor:
    """R per member, for parameters stacked on a leading member axis. Returns shape (M,)."""
    total, count = 0.0, 0
    for p in stacked_params:
        total = total + torch.log(p.square() + EPS).flatten(1).sum(dim=1)
        count += p[0].numel()
    return total / count


@dataclasses.dataclass(frozen=True)
class DARE(DeepEnsemble):
    name = "dare"
    summary = ("deep ensemble plus a per-member anti-regularizer, on while the batch task loss <= tau "
               "(tau absolute, or relative to the DE reference's validation loss)")
    has_threshold = True
    packable = True  # independent members; each member's switch is its own
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    pack_options = ("threshold", "delta")  # the switch compares each member's loss with its own tau

    threshold: float | None = option(0.3, parse=parse_optional(parse_float),
                                     check=lambda v: v is None or is_finite_nonneg(v),
                                     allowed="a finite number >= 0", help="absolute tau")
    delta: float | None = option(None, parse=parse_optional(parse_float),
                                 check=lambda v: v is None or is_finite_nonneg(v), allowed="a finite number >= 0",
                                 excludes=("threshold",),
                                 help="relative tau = (1 + delta) x the validation loss of the deep ensemble "
                                 "with the same loss and members (run or reused first)")

    @classmethod
    def check_options(cls, values: dict[str, Any], what: str) -> dict[str, Any]:
        values = super().check_options(values, what)
        if values["threshold"] is None and values["delta"] is None:
            raise ConfigError(f"{what}: give threshold or delta")
        return values

    def check_protocol(self, protocol: Any, what: str) -> None:
        super().check_protocol(protocol, what)
        if self.delta is not None and protocol.val_size == 0:
            raise ConfigError(f"{what}: delta={self.delta} sets tau from the reference's validation loss; "
                              "set val_size > 0")

    @property
    def label(self) -> str:
        return "DARE" if self.loss == "mse" else "DARE (NLL)"

    def references(self) -> dict[str, tuple[str, dict[str, Any]]]:
        if self.delta is None:
            return {}
        return {"tau_reference": ("deep_ensemble", {"members": self.members, "loss": self.loss,
                                                    "checkpoint": "best"})}

    def bind(self, references: dict[str, dict]) -> tuple["DARE", dict[str, Any]]:
        if self.delta is None:
            return self, {"tau": self.threshold}
        ref = references.get("tau_reference")
        if ref is None:
            raise ReferenceFailed("its tau reference run has no record")
        if ref.get("status") != "ok":
            raise ReferenceFailed(f"its tau reference run {ref.get('run_id')} ended with status "
                                  f"{ref.get('status')!r}, so tau cannot be computed")
        loss = ref.get("val_task_loss")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss):
            raise ReferenceFailed(f"its tau reference run {ref.get('run_id')} has no finite validation "
                                  f"loss ({loss!r}), so tau cannot be computed")
        tau = (1.0 + self.delta) * ref["val_task_loss"]
        return dataclasses.replace(self, threshold=tau), {"tau": tau, "tau_reference_run_id": ref["run_id"],
                                                          "tau_reference_val_loss": ref["val_task_loss"]}

    @property
    def checkpoint_threshold(self) -> float | None:
        return self.threshold

    def penalty(self, model: StackedNetwork, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        if self.threshold is None:
            raise RuntimeError("DARE with delta must be bound to its reference run before training")
        switch = (task_loss.detach() <= self.threshold).to(task_loss.dtype)
        return -switch * anti_regularizer(model.parameters())
