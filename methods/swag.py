"""SWAG (Maddox et al., NeurIPS 2019), and with members > 1 MultiSWAG (Wilson & Izmailov, NeurIPS
2020): one SWAG posterior per independently trained member.

Each member trains as usual. After a burn-in (the first ``swa_start`` of the optimiser steps) its
weights theta_i are collected ``moments`` times, evenly spaced over the rest of the schedule, into a
running mean (the SWA weights theta_swa), a running mean of squares, and the last ``rank``
deviations D = [theta_i - running mean after i]. Its posterior is the Gaussian

    N(theta_swa, scale * (Sigma_diag + D D^T / (R - 1))),  Sigma_diag = max(mean of squares - theta_swa^2, 0),

with R the deviations kept, sampled as theta_swa + sqrt(scale) * (Sigma_diag^1/2 z1 + D z2 / sqrt(R - 1))
(z1, z2 standard normal); scale = 0.5 is the paper's 1/sqrt(2) on both parts. Each member's
``samples`` draws are its predictive members, (members x samples, N, K), drawn once per run from
the member's own stream, so every split is predicted by the same weights.

Differences from torch-uncertainty 0.13's SWAG, on purpose (the paper's definition): one z2 for all
of a member's parameters (torch-uncertainty draws one per parameter tensor, a block-diagonal
low-rank part), R - 1 the deviations actually kept (it divides by max_num_models - 1), variance
clamped at 0 (it clamps at 1e-6). The optimiser is the protocol's (Adam at its constant rate), not
the paper's SGD with a high constant rate; the whole schedule is trained (no early stop).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from bench.models.stacked import StackedNetwork
from bench.options import option, parse_float, parse_int
from bench.seeding import member_generator
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


class SWAGNet(nn.Module):
    """The trained members (``net``) and their SWAG moments (buffers, saved with the weights)."""

    def __init__(self, net: StackedNetwork, rank: int, seed: int, member_ids: list[int]):
        super().__init__()
        self.net, self.members, self.member_ids = net, net.members, list(member_ids)
        self.seeds = [seed] * len(member_ids)  # each member's run seed (a pack holds several runs)
        shape = net.flat().shape
        device = next(net.parameters()).device
        self.register_buffer("mean", torch.zeros(shape, device=device))
        self.register_buffer("sq_mean", torch.zeros(shape, device=device))
        self.register_buffer("deviations", torch.zeros(shape[0], rank, shape[1], device=device))
        self.register_buffer("collected", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        return self.net(x, dropout)

    @torch.no_grad()
    def collect(self) -> None:
        """Add the members' current weights to the moments."""
        # the count stays on the device (no read back to the host within an epoch)
        weights, n = self.net.flat(), self.collected
        self.mean += (weights - self.mean) / (n + 1)
        self.sq_mean += (weights.square() - self.sq_mean) / (n + 1)
        ring = (n % self.deviations.shape[1]).view(1)  # a ring of the last R
        self.deviations.index_copy_(1, ring, (weights - self.mean).unsqueeze(1))
        self.collected += 1

    @staticmethod
    @torch.no_grad()
    def stack(nets: list["SWAGNet"]) -> "SWAGNet":
        """The members of several runs' SWAGNets as one (a pack): weights and moments stacked."""
        out = SWAGNet(StackedNetwork.stack([n.net for n in nets]), nets[0].deviations.shape[1], 0,
                      [m for n in nets for m in n.member_ids])
        out.seeds = [s for n in nets for s in n.seeds]
        for name in ("mean", "sq_mean", "deviations"):
            getattr(out, name).copy_(torch.cat([getattr(n, name) for n in nets]))
        out.collected.copy_(nets[0].collected)
        return out

    @torch.no_grad()
    def select(self, members: list[int]) -> "SWAGNet":
        """A SWAGNet of copies of the given members (a run's part of a pack)."""
        out = SWAGNet(self.net.select(members), self.deviations.shape[1], 0, [self.member_ids[i] for i in members])
        out.seeds = [self.seeds[i] for i in members]
        index = torch.tensor(members, device=self.mean.device)
        for name in ("mean", "sq_mean", "deviations"):
            getattr(out, name).copy_(getattr(self, name).index_select(0, index))
        out.collected.copy_(self.collected)
        return out

    @torch.no_grad()
    def sample(self, samples: int, scale: float) -> StackedNetwork:
        """``samples`` weight draws per member from its SWAG posterior, as one stacked model whose
        members are member 0's draws, then member 1's, ..."""
        kept = min(int(self.collected), self.deviations.shape[1])
        if kept == 0:
            raise RuntimeError("SWAG collected no moments")
        draws = []
        for m, member in enumerate(self.member_ids):
            generator = member_generator(self.seeds[m], member, "method")
            z_diag = torch.randn(samples, self.mean.shape[1], generator=generator).to(self.mean.device)
            z_low = torch.randn(samples, kept, generator=generator).to(self.mean.device)
            std = (self.sq_mean[m] - self.mean[m].square()).clamp(min=0).sqrt()
            low_rank = z_low @ self.deviations[m, :kept] / math.sqrt(max(kept - 1, 1))
            draws.append(self.mean[m] + math.sqrt(scale) * (std * z_diag + low_rank))
        return self.net.with_flat(torch.cat(draws))


@dataclasses.dataclass(frozen=True)
class SWAG(Method):
    name = "swag"
    summary = "SWA moments after a burn-in, a low-rank plus diagonal Gaussian, S weight samples (Maddox et al. " \
              "2019); members > 1: MultiSWAG"
    fixed_schedule = True
    # its rate schedule and its collection run around the step (bench.training.graphs), which reads
    # nothing back and draws nothing on the host
    capturable = True
    # independent members whose moments are per member (SWAGNet.stack / select): runs with the same
    # options and schedule collect at the same steps, so they pack across seeds and member counts
    packable = True

    members: int = option(1, **{**MEMBERS_OPTION, "help": "independently trained members, a SWAG posterior "
                                "each: 1 is SWAG, more is MultiSWAG"})
    swa_start: float = option(0.5, parse=parse_float, check=lambda v: 0 <= v < 1, allowed="a number in [0, 1)",
                              help="burn-in: the fraction of the optimiser steps before the first moment")
    moments: int = option(20, parse=parse_int, check=lambda v: v >= 2, allowed="an integer >= 2",
                          help="weight snapshots collected, evenly spaced from the burn-in to the last step")
    rank: int = option(20, parse=parse_int, check=lambda v: v >= 2, allowed="an integer >= 2",
                       help="rank R of the low-rank part: the last R deviations are kept")
    samples: int = option(20, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                          help="weight samples per member at test time (S)")
    scale: float = option(0.5, parse=parse_float, check=lambda v: 0 <= v < float("inf"), allowed="a number >= 0",
                          help="covariance scale; 0.5 is the paper's 1/sqrt(2), 0 predicts with the SWA weights")

    @property
    def label(self) -> str:
        return "SWAG" if self.members == 1 else "MultiSWAG"

    def build_model(self, seed, member_ids, arch) -> SWAGNet:
        return SWAGNet(super().build_model(seed, member_ids, arch), self.rank, seed, member_ids)

    def collects_at(self, step: int, total_steps: int) -> bool:
        """Whether the moments take the weights after optimiser step ``step`` (0-based): ``moments``
        steps evenly spaced after the burn-in, the last step the last of them. A schedule with fewer
        steps after the burn-in collects at each of them (the record's swag_moments_collected says so)."""
        start = int(self.swa_start * total_steps)
        span = total_steps - start
        return any(max(start, start + (i + 1) * span // self.moments - 1) == step for i in range(self.moments))

    def post_fit(self, model: SWAGNet, x_val, y_val, train=None) -> dict:
        return {**super().post_fit(model, x_val, y_val, train), "swag_moments_collected": int(model.collected)}

    def after_step(self, model: SWAGNet, state, step: int, total_steps: int) -> None:
        if self.collects_at(step, total_steps):
            model.collect()

    def predictive_model(self, model: SWAGNet) -> nn.Module:
        return model.sample(self.samples, self.scale)
