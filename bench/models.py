"""Networks with members stacked on a leading axis (torch-uncertainty's ensemble-as-batch idea).

Member m of a ``StackedMLP`` is the ordinary MLP whose layer l has weight ``weights[l][m]`` and bias
``biases[l][m]``. One batched matmul serves every member, and every method (ensemble, DARE,
MC dropout with one member) shares this one model and one training loop.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bench.seeding import member_generator


class StackedMLP(nn.Module):
    """``members`` independent ReLU MLPs ``in_features -> *hidden -> out_features``.

    ``dropout`` is applied to every hidden activation, i.e. before each Linear layer except the
    first (never to the input), and only when ``forward(..., dropout=True)`` is asked for: the
    flag is explicit so that evaluation code cannot switch MC dropout off by calling ``eval()``.
    """

    def __init__(self, members: int, in_features: int, hidden: tuple[int, ...], out_features: int,
                 dropout: float = 0.0):
        super().__init__()
        sizes = [in_features, *hidden, out_features]
        self.members = members
        self.dropout = dropout
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(members, n_in, n_out)) for n_in, n_out in zip(sizes[:-1], sizes[1:]))
        self.biases = nn.ParameterList(
            nn.Parameter(torch.empty(members, n_out)) for n_out in sizes[1:])

    @classmethod
    def for_seed(cls, seed: int, members: int, in_features: int, hidden: tuple[int, ...],
                 out_features: int, dropout: float = 0.0) -> "StackedMLP":
        """A model whose member m is initialised from its own generator (seed, m)."""
        model = cls(members, in_features, hidden, out_features, dropout)
        for m in range(members):
            model.reset_member(m, member_generator(seed, m, "init"))
        return model

    @torch.no_grad()
    def reset_member(self, m: int, generator: torch.Generator) -> None:
        """torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
        for weight, bias in zip(self.weights, self.biases):
            bound = 1.0 / math.sqrt(weight.shape[1])
            weight[m].uniform_(-bound, bound, generator=generator)
            bias[m].uniform_(-bound, bound, generator=generator)

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x: (N, in) shared by all members, or (members, N, in). Returns logits (members, N, out)."""
        h = x
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if layer > 0:
                h = torch.relu(h)
                if dropout and self.dropout > 0:
                    h = F.dropout(h, self.dropout, training=True)
            if h.dim() == 2:  # shared input: broadcast over members
                h = torch.matmul(h, weight) + bias.unsqueeze(1)
            else:
                h = torch.baddbmm(bias.unsqueeze(1), h, weight)
        return h

    def num_member_parameters(self) -> int:
        """Trainable scalars of one member (DARE's d)."""
        return sum(p[0].numel() for p in self.parameters())
