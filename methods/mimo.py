"""MIMO (Havasi et al., ICLR 2021): one network with M input heads and M output heads.

The M inputs are concatenated (the first layer takes M x D features) and the last layer has M x K
outputs, head m's logits being its m-th block of K. In training every head sees its own shuffle of
the batch, so the heads learn M independent subnetworks inside one network; at test time every
head sees the same image and the M heads are the ensemble.

The batch format is the paper's (and torch-uncertainty's ``MIMOBatchFormat``): the batch of B
images is repeated ``batch_repetition`` times (B x r rows); a share ``input_repetition`` (rho) of
those rows is the same image for every head, the other rows are shuffled for each head on its own.
The loss is the mean of the heads' cross-entropies (the paper sums them: under Adam the same up to
its epsilon). With M = 1 the network is the single network, trained on the same batches.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from bench.models.registry import ArchSpec
from bench.models.stacked import StackedNetwork, whole_runs
from bench.options import option, parse_float, parse_int
from bench.seeding import CounterStream, member_seed
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


class MIMONet(nn.Module):
    """A ReLU MLP from M concatenated inputs to M heads of logits; a pack of runs (``stack``): one
    such network per run, on the stacked MLP's network axis, and the runs' heads one after another on
    the member axis."""

    def __init__(self, net: StackedNetwork, heads: int):
        super().__init__()
        self.net, self.heads = net, heads
        self.runs = net.members
        self.members = self.runs * heads

    @staticmethod
    def stack(models: list["MIMONet"]) -> "MIMONet":
        """Several runs' networks as one model (a pack)."""
        return MIMONet(StackedNetwork.stack([m.net for m in models]), models[0].heads)

    def select(self, members: list[int]) -> "MIMONet":
        """A model of copies of the given heads' networks (whole runs: a run's part of a pack)."""
        return MIMONet(self.net.select(whole_runs(members, self.heads, "MIMONet.select")), self.heads)

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x (N, D), the same image for every head, or (runs x M, N, D), each head its own;
        -> (runs x M, N, K)."""
        heads, runs = self.heads, self.runs
        if x.dim() == 2:
            joined = x.unsqueeze(1).expand(-1, heads, -1).reshape(x.shape[0], -1)  # (N, M x D), every run's
        else:
            joined = x.view(runs, heads, *x.shape[1:]).transpose(1, 2).reshape(runs, x.shape[1], -1)
        out = self.net(joined, dropout)                                  # (runs, N, M x K)
        return out.view(runs, out.shape[1], heads, -1).transpose(1, 2).reshape(self.members, out.shape[1], -1)


class HeadShuffles:
    """The per-step shuffles of MIMO runs, on the device: permutations sorted from the uniforms of
    ``CounterStream``s (per run, a seed per head and one for the shuffle of the repeated batch that
    all its heads start from; one step counter), so the step reads nothing from the host and a CUDA
    graph can replay it. A pack's runs: ``cat``."""

    def __init__(self, heads: CounterStream, batch: CounterStream):
        self.heads, self.batch = heads, batch  # rows: every run's heads; every run

    @classmethod
    def of_run(cls, seed: int, heads: int, device: torch.device) -> "HeadShuffles":
        seeds = torch.tensor([member_seed(seed, h, "method") for h in range(heads + 1)], device=device)
        streams = CounterStream(seeds[:-1])
        return cls(streams, CounterStream(seeds[-1:], streams.step))  # the same step

    @classmethod
    def cat(cls, states: list["HeadShuffles"]) -> "HeadShuffles":
        streams = CounterStream.cat([s.heads for s in states])
        return cls(streams, CounterStream(torch.cat([s.batch.seeds for s in states]), streams.step))

    @property
    def step(self) -> torch.Tensor:
        return self.heads.step

    def shared(self, rows: int) -> torch.Tensor:
        """(runs, rows): each run's permutation of ``rows`` rows for this step."""
        return self.batch.uniform((rows,)).argsort(dim=1, stable=True)

    def per_head(self, rows: int) -> torch.Tensor:
        """(runs x heads, rows): each head's own permutation for this step."""
        return self.heads.uniform((rows,)).argsort(dim=1, stable=True)

    def advance(self) -> None:
        self.heads.advance()


@dataclasses.dataclass(frozen=True)
class MIMO(Method):
    name = "mimo"
    summary = "one network with M input and M output heads, each head trained on its own shuffle (Havasi et al. 2021)"
    joint = True  # one network: its heads share the batch (shuffled per head) and stop as one
    capturable = True  # its shuffles are drawn on the device (HeadShuffles); nothing is read back
    packable = True  # runs of one head count pack across seeds: a network per run (MIMONet.stack)

    members: int = option(3, **{**MEMBERS_OPTION, "help": "heads M: inputs and outputs of the one network"})
    input_repetition: float = option(0.0, parse=parse_float, check=lambda v: 0 <= v <= 1,
                                     allowed="a number in [0, 1]",
                                     help="rho: the share of a batch's rows that every head sees alike")
    batch_repetition: int = option(1, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                                   help="r: each batch is repeated r times before the per-head shuffles")

    @property
    def label(self) -> str:
        return "MIMO"

    def build_model(self, seed: int, member_ids: list[int], arch: ArchSpec) -> MIMONet:
        heads = len(member_ids)
        # one network of the architecture, its M inputs as channels and M x K outputs, drawn from member
        # 0's stream; the per-network kernels of the single network, so that M = 1 trains exactly as it does
        channels, height, width = arch.input_shape
        wide = dataclasses.replace(arch, input_shape=(heads * channels, height, width), n_classes=heads * arch.n_classes)
        return MIMONet(wide.build(seed, [0], per_network_kernels=True), heads)

    def prepare(self, model, seed, member_ids) -> "HeadShuffles":
        return HeadShuffles.of_run(seed, len(member_ids), next(model.parameters()).device)

    def stack_states(self, states: list["HeadShuffles"]) -> "HeadShuffles":
        return HeadShuffles.cat(states)

    def training_batch(self, x: torch.Tensor, y: torch.Tensor, state: "HeadShuffles"):
        """x (B, D) of one run, or (runs x M, B, D) of a pack (a run's heads alike); y (runs x M, B)."""
        if self.members == 1 and self.batch_repetition == 1:
            return (x.unsqueeze(0) if x.dim() == 2 else x), y  # a shuffle within the batch changes nothing for one head
        batch = x.shape[-2]
        rows = batch * self.batch_repetition
        base = torch.arange(batch, device=x.device).repeat(self.batch_repetition)[state.shared(rows)]  # (runs, rows)
        base = base.repeat_interleave(self.members, dim=0)              # each head its run's
        own = int(rows * (1.0 - self.input_repetition))  # the rows each head shuffles on its own
        index = torch.cat([base[:, :own].gather(1, state.per_head(own)), base[:, own:]], dim=1)
        state.advance()
        if x.dim() == 2:
            return x[index], y[0][index]
        return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1])), y.gather(1, index)
