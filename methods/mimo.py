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

from bench.models import StackedMLP
from bench.options import option, parse_float, parse_int
from bench.seeding import CounterStream, member_seed
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


class MIMONet(nn.Module):
    """A ReLU MLP from M concatenated inputs to M heads of logits."""

    def __init__(self, net: StackedMLP, heads: int):
        super().__init__()
        self.net, self.members = net, heads

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x (N, D), the same image for every head, or (M, N, D), each head its own; -> (M, N, K)."""
        heads = self.members
        if x.dim() == 2:
            joined = x.unsqueeze(1).expand(-1, heads, -1).reshape(x.shape[0], -1)
        else:
            joined = x.transpose(0, 1).reshape(x.shape[1], -1)
        out = self.net(joined, dropout)[0]                      # (N, M * K)
        return out.view(out.shape[0], heads, -1).transpose(0, 1)


class HeadShuffles:
    """The per-step shuffles of a MIMO run, on the device: permutations sorted from the uniforms of
    ``CounterStream``s (a seed per head, and one for the shuffle of the repeated batch that all
    heads start from; one step counter), so the step reads nothing from the host and a CUDA graph
    can replay it."""

    def __init__(self, seed: int, heads: int, device: torch.device):
        seeds = torch.tensor([member_seed(seed, h, "method") for h in range(heads + 1)], device=device)
        self.heads = CounterStream(seeds[:-1])
        self.batch = CounterStream(seeds[-1:], self.heads.step)  # the same step

    @property
    def step(self) -> torch.Tensor:
        return self.heads.step

    def shared(self, rows: int) -> torch.Tensor:
        """A permutation of ``rows`` rows for this step."""
        return self.batch.uniform((rows,))[0].argsort(stable=True)

    def per_head(self, rows: int) -> torch.Tensor:
        """(heads, rows): each head's own permutation for this step."""
        return self.heads.uniform((rows,)).argsort(dim=1, stable=True)

    def advance(self) -> None:
        self.heads.advance()


@dataclasses.dataclass(frozen=True)
class MIMO(Method):
    name = "mimo"
    summary = "one network with M input and M output heads, each head trained on its own shuffle (Havasi et al. 2021)"
    joint = True  # one network: its heads share the batch (shuffled per head) and stop as one
    capturable = True  # its shuffles are drawn on the device (HeadShuffles); nothing is read back

    members: int = option(3, **{**MEMBERS_OPTION, "help": "heads M: inputs and outputs of the one network"})
    input_repetition: float = option(0.0, parse=parse_float, check=lambda v: 0 <= v <= 1,
                                     allowed="a number in [0, 1]",
                                     help="rho: the share of a batch's rows that every head sees alike")
    batch_repetition: int = option(1, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                                   help="r: each batch is repeated r times before the per-head shuffles")

    @property
    def label(self) -> str:
        return "MIMO"

    def build_model(self, seed, member_ids, in_features, hidden, n_classes, init) -> MIMONet:
        heads = len(member_ids)
        # one network, drawn from member 0's stream; the per-network kernels of the single network,
        # so that M = 1 trains exactly as it does
        net = StackedMLP.for_seed(seed, [0], heads * in_features, hidden, heads * n_classes, init=init,
                                  per_network_kernels=True)
        return MIMONet(net, heads)

    def prepare(self, model, seed, member_ids) -> "HeadShuffles":
        return HeadShuffles(seed, len(member_ids), next(model.parameters()).device)

    def training_batch(self, x: torch.Tensor, y: torch.Tensor, state: "HeadShuffles"):
        rows = x.shape[0] * self.batch_repetition
        if self.members == 1 and self.batch_repetition == 1:
            return x.unsqueeze(0), y  # a shuffle within the batch changes nothing for one head
        base = torch.arange(x.shape[0], device=x.device).repeat(self.batch_repetition)[state.shared(rows)]
        own = int(rows * (1.0 - self.input_repetition))  # the rows each head shuffles on its own
        index = torch.cat([base[:own][state.per_head(own)], base[own:].expand(self.members, -1)], dim=1)
        state.advance()
        return x[index], y[0][index]
