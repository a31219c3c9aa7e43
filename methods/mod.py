"""MOD, maximize overall diversity (Jain et al., 2020), as in the DARE paper's baselines.

Members train jointly. Each step draws inputs uniformly in the per-feature [min, max] box of the
current batch (same shape as the batch) and adds ``-lam * mean over those inputs and outputs of
the variance across members`` (population variance) of the raw outputs. The draws are counter-based
uniforms of the run's own seed (stream ``method``) and the step (a ``CounterStream``), on the device,
so a run's result does not depend on the pack it trains in and a CUDA graph can replay the step.
(Records written before dare-bench 0.3.0 drew them from torch's global generator, seeded with the
run's seed, and those of 0.3.0 and 0.4.0 from a CPU generator of the run's: the same method, other
random inputs.)
"""
from __future__ import annotations

import dataclasses

import torch

from bench.models.stacked import StackedNetwork
from bench.options import option
from bench.seeding import CounterStream, member_seed
from methods.anchor_net import POSITIVE
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


def box_samples(x: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Draws in the per-feature [min, max] box of the rows of x (B, D), from ``uniforms`` in [0, 1)
    of x's shape."""
    lo, hi = x.min(dim=0).values, x.max(dim=0).values
    return lo + (hi - lo) * uniforms



def member_variance(outputs: torch.Tensor) -> torch.Tensor:
    """Mean over samples and outputs of the variance across members (ddof 0): (M, N, K) -> ()."""
    return outputs.var(dim=0, unbiased=False).mean()


@dataclasses.dataclass(frozen=True)
class MOD(Method):
    name = "mod"
    summary = "joint members; rewards disagreement on inputs drawn uniformly in the batch's feature box"
    joint = True
    packable = True
    capturable = True  # its draws are made on the device (a CounterStream); nothing is read back
    pack_options = ("lam",)

    members: int = option(3, **MEMBERS_OPTION)
    lam: float = option(1e-3, **POSITIVE, help="weight of the diversity term")

    @property
    def label(self) -> str:
        return "MOD"

    def prepare(self, model: StackedNetwork, seed: int, member_ids: list[int]) -> CounterStream:
        return CounterStream(torch.tensor([member_seed(seed, 0, "method")], device=next(model.parameters()).device))

    def stack_states(self, states: list[CounterStream]) -> CounterStream:
        return CounterStream.cat(states)  # one seed per run

    def penalty(self, model: StackedNetwork, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        members = model.members // batch.runs
        uniforms = batch.state.uniform(tuple(batch.x.shape[-2:]))  # (runs, B, D)
        batch.state.advance()
        if batch.runs == 1:  # one run: its batch (B, D) is shared by the members, and so is the box
            outputs = model(box_samples(batch.x, uniforms[0]))
        else:  # a pack: each run's box, from its first member's copy of the run's batch
            boxes = [box_samples(x[0], u) for x, u in zip(batch.run_parts(batch.x), uniforms)]
            outputs = model(torch.cat([b.expand(members, *b.shape) for b in boxes]))
        variance = torch.stack([member_variance(o) for o in batch.run_parts(outputs)])  # (runs,)
        return -self.lam * variance.repeat_interleave(members) / members  # shares of each run's joint term
