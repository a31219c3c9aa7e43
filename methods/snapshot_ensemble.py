"""Snapshot ensembles (Huang et al., ICLR 2017): one network, one training run. The T optimiser
steps are cut into M cycles, cycle c from step floor(c T / M) to floor((c + 1) T / M) (L steps), and
the learning rate follows a cosine from the protocol's rate down to 0 in each:

    lr(t) = lr / 2 * (cos(pi * (t - start of its cycle) / L) + 1),

the paper's ceil(T / M)-step cycles when M divides T. The weights at the end of each cycle are a
member. The cheapest ensemble: the cost of one network. The paper restarts SGD; here the protocol's
optimiser (Adam) restarts its rate, as torch-uncertainty's CheckpointCollector does with any
optimiser. The whole schedule is trained (the protocol's early stop does not apply).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from bench.models.stacked import StackedNetwork
from bench.options import option
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


class SnapshotNet(nn.Module):
    """The trained network (``net``; a pack: one network per run) and the snapshots taken of it
    (buffers, saved with its weights): ``snapshots`` (K x networks, P), snapshot k of network r in row
    k * networks + r, so that one network's buffer is (K, P)."""

    def __init__(self, net: StackedNetwork, snapshots: int):
        super().__init__()
        self.net = net
        self.members = net.members
        self.cycles = snapshots
        self.register_buffer("snapshots", torch.zeros(snapshots * net.members, net.flat().shape[1],
                                                      device=next(net.parameters()).device))
        self.register_buffer("taken", torch.zeros((), dtype=torch.long))

    def by_cycle(self) -> torch.Tensor:
        """The snapshots as (K, networks, P) (a view)."""
        return self.snapshots.view(self.cycles, self.members, -1)

    @staticmethod
    @torch.no_grad()
    def stack(nets: list["SnapshotNet"]) -> "SnapshotNet":
        """Several runs' SnapshotNets as one (a pack), network by network."""
        out = SnapshotNet(StackedNetwork.stack([n.net for n in nets]), nets[0].cycles)
        out.by_cycle().copy_(torch.cat([n.by_cycle() for n in nets], dim=1))
        out.taken.copy_(nets[0].taken)
        return out

    @torch.no_grad()
    def select(self, networks: list[int]) -> "SnapshotNet":
        """A SnapshotNet of copies of the given networks and their snapshots (a run's part of a pack)."""
        out = SnapshotNet(self.net.select(networks), self.cycles)
        index = torch.tensor(networks, device=self.snapshots.device)
        out.by_cycle().copy_(self.by_cycle().index_select(1, index))
        out.taken.copy_(self.taken)
        return out

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        return self.net(x, dropout)

    @torch.no_grad()
    def take(self) -> None:
        self.by_cycle().index_copy_(0, self.taken.view(1), self.net.flat().unsqueeze(0))  # no read back to the host
        self.taken += 1

    def ensemble(self) -> StackedNetwork:
        """One network's snapshots as a stacked model, one member each (the network itself before any
        snapshot); a run's model (``select``), not a pack's."""
        taken = int(self.taken)
        return self.net.with_flat(self.snapshots[:taken]) if taken else self.net


def cycle_of(step: int, members: int, total_steps: int) -> tuple[int, int]:
    """The (first step, length) of the cycle that optimiser step ``step`` (0-based) belongs to."""
    if total_steps < members:
        raise ValueError(f"snapshot_ensemble: {members} cycles need at least as many optimiser steps; "
                         f"the schedule has {total_steps}")
    cycle = step * members // total_steps  # a first guess, then the cycle whose bounds hold the step
    while (cycle + 1) * total_steps // members <= step:
        cycle += 1
    while cycle * total_steps // members > step:
        cycle -= 1
    start, end = cycle * total_steps // members, (cycle + 1) * total_steps // members
    return start, end - start


@dataclasses.dataclass(frozen=True)
class SnapshotEnsemble(Method):
    name = "snapshot_ensemble"
    summary = "one network, a cyclic cosine learning rate; a member at the end of each cycle (Huang et al. 2017)"
    fixed_schedule = True
    # its rate schedule and its collection run around the step (bench.training.graphs), which reads
    # nothing back and draws nothing on the host
    capturable = True
    # its runs of the same options pack across seeds: SnapshotNet.stack / select keep each network's snapshots
    packable = True

    members: int = option(3, **{**MEMBERS_OPTION, "help": "number of cycles: one snapshot (member) at the end "
                                "of each"})

    @property
    def label(self) -> str:
        return "Snapshot ensemble"

    @property
    def n_networks(self) -> int:
        return 1  # one network trains; its snapshots are the members

    def build_model(self, seed, member_ids, arch) -> SnapshotNet:
        return SnapshotNet(super().build_model(seed, member_ids, arch), self.members)

    def lr_factor(self, step: int, total_steps: int) -> float:
        start, length = cycle_of(step, self.members, total_steps)
        return 0.5 * (math.cos(math.pi * (step - start) / length) + 1.0)

    def after_step(self, model: SnapshotNet, state, step: int, total_steps: int) -> None:
        start, length = cycle_of(step, self.members, total_steps)
        if step == start + length - 1:  # the cycle's last step
            model.take()

    def predictive_model(self, model: SnapshotNet) -> nn.Module:
        return model.ensemble()
