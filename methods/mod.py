"""MOD, maximize overall diversity (Jain et al., 2020), as in the DARE paper's baselines.

Members train jointly. Each step draws inputs uniformly in the per-feature [min, max] box of the
current batch (same shape as the batch) and adds ``-lam * mean over those inputs and outputs of
the variance across members`` (population variance) of the raw outputs. The draws come from the
run's own generator (stream ``method`` of the run's seed), so a run's result does not depend on
the pack it trains in. (Records written before dare-bench 0.3.0 drew them from torch's global
generator, seeded with the run's seed: the same method, other random inputs.)
"""
from __future__ import annotations

import dataclasses

import torch

from bench.models import StackedMLP
from bench.options import option
from bench.seeding import member_generator
from methods.anchor_net import POSITIVE
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


def box_samples(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Uniform draws in the per-feature [min, max] box of the rows of x (B, D), from ``generator``
    (drawn on its device, the CPU, then moved: the same draws on every device)."""
    lo, hi = x.min(dim=0).values, x.max(dim=0).values
    return lo + (hi - lo) * torch.rand(x.shape, generator=generator).to(x.device)


def member_variance(outputs: torch.Tensor) -> torch.Tensor:
    """Mean over samples and outputs of the variance across members (ddof 0): (M, N, K) -> ()."""
    return outputs.var(dim=0, unbiased=False).mean()


@dataclasses.dataclass(frozen=True)
class MOD(Method):
    name = "mod"
    summary = "joint members; rewards disagreement on inputs drawn uniformly in the batch's feature box"
    joint = True
    packable = True
    pack_options = ("lam",)

    members: int = option(3, **MEMBERS_OPTION)
    lam: float = option(1e-3, **POSITIVE, help="weight of the diversity term")

    @property
    def label(self) -> str:
        return "MOD"

    def prepare(self, model: StackedMLP, seed: int, member_ids: list[int]) -> list[torch.Generator]:
        return [member_generator(seed, 0, "method")]  # the run's box draws

    def stack_states(self, states: list[list[torch.Generator]]) -> list[torch.Generator]:
        return [g for state in states for g in state]  # one generator per run

    def penalty(self, model: StackedMLP, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        members = model.members // batch.runs
        if batch.runs == 1:  # one run: its batch (B, D) is shared by the members, and so is the box
            outputs = model(box_samples(batch.x, batch.state[0]))
        else:  # a pack: each run's box, from its first member's copy of the run's batch
            boxes = [box_samples(x[0], g) for x, g in zip(batch.run_parts(batch.x), batch.state)]
            outputs = model(torch.cat([b.expand(members, *b.shape) for b in boxes]))
        variance = torch.stack([member_variance(o) for o in batch.run_parts(outputs)])  # (runs,)
        return -self.lam * variance.repeat_interleave(members) / members  # shares of each run's joint term
