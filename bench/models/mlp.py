"""The stacked MLP: member m is the ordinary ReLU MLP whose layer l has weight ``weights[l][m]`` and
bias ``biases[l][m]``; one batched matmul serves every member."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.batch_ensemble import BatchEnsembleNet
from bench.models.variational import VariationalNet
from bench.models.stacked import (Architecture, StackedNetwork, group_mask, init_bounds, member_linear, packed_width,
                                 training_flops_per_sample)


class StackedMLP(StackedNetwork):
    """``members`` independent ReLU MLPs ``in_features -> *hidden -> out_features``.

    ``dropout`` is applied to every hidden activation, i.e. before each Linear layer except the
    first (never to the input), and only when ``forward(..., dropout=True)`` is asked for: the
    flag is explicit so that evaluation code cannot switch MC dropout off by calling ``eval()``.
    """

    def __init__(self, members: int, in_features: int, hidden: tuple[int, ...], out_features: int,
                 dropout: float = 0.0, per_network_kernels: bool = False):
        super().__init__()
        sizes = [in_features, *hidden, out_features]
        self.members = members
        self.dropout = dropout
        self.per_network_kernels = per_network_kernels  # see member_linear
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(members, n_in, n_out)) for n_in, n_out in zip(sizes[:-1], sizes[1:]))
        self.biases = nn.ParameterList(
            nn.Parameter(torch.empty(members, n_out)) for n_out in sizes[1:])

    @classmethod
    def for_seed(cls, seed: int, member_ids: list[int], in_features: int, hidden: tuple[int, ...],
                 out_features: int, dropout: float = 0.0, init: str = "torch",
                 per_network_kernels: bool = False) -> "StackedMLP":
        """A model of len(member_ids) members, member i initialised from generator (seed, member_ids[i])."""
        model = cls(len(member_ids), in_features, hidden, out_features, dropout, per_network_kernels)
        return cls.for_members(model, seed, member_ids, init)

    @property
    def sizes(self) -> list[int]:
        """The layer widths: in_features, *hidden, out_features."""
        return [w.shape[1] for w in self.weights] + [self.weights[-1].shape[2]]

    def shaped_like(self, members: int) -> "StackedMLP":
        """An uninitialised stacked model of this one's shape and kernels, with ``members`` members."""
        sizes = self.sizes
        return StackedMLP(members, sizes[0], tuple(sizes[1:-1]), sizes[-1], self.dropout,
                          self.per_network_kernels).to(self.weights[0].device)

    @torch.no_grad()
    def reset_member(self, m: int, generator: torch.Generator, init: str = "torch") -> None:
        """Member m's weights and biases drawn from ``generator`` by the ``init`` rule (init_bounds)."""
        for weight, bias in zip(self.weights, self.biases):
            weight_bound, bias_bound = init_bounds(init, weight.shape[1], weight.shape[2])
            weight[m].uniform_(-weight_bound, weight_bound, generator=generator)
            if bias_bound is None:
                bias[m].zero_()
            else:
                bias[m].uniform_(-bias_bound, bias_bound, generator=generator)

    def training_flops_per_sample(self) -> int:
        return training_flops_per_sample(self.sizes)

    def activation_floats_per_sample(self) -> int:
        return sum(self.sizes)

    def as_module(self, member: int) -> nn.Sequential:
        layers: list[nn.Module] = []
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if layer > 0:
                layers.append(nn.ReLU())
            linear = nn.Linear(weight.shape[1], weight.shape[2]).to(weight.device)
            with torch.no_grad():
                linear.weight.copy_(self.layer_weight(layer)[member].T)
                linear.bias.copy_(bias[member])
            layers.append(linear)
        return nn.Sequential(*layers).eval()

    def layer_weight(self, layer: int) -> torch.Tensor:
        """The (members, in, out) weight that layer ``layer`` applies; a subclass may constrain it."""
        return self.weights[layer]

    def forward(self, x: torch.Tensor, dropout: bool | Callable[[int, torch.Tensor], torch.Tensor] = False,
                span: tuple[int, int] | None = None) -> torch.Tensor:
        """x: (N, in) shared by all members, or (members, N, in). Returns logits (members, N, out).
        dropout: False; True (torch's dropout at the model's rate, from torch's global generator); or
        a function (layer, h) -> h that drops hidden activations its own way (MC dropout's
        per-network masks in training). ``span`` (a, b): members [a, b) only (``MemberSlice``)."""
        h = x
        a, b = span or (0, self.members)
        for layer, bias in enumerate(self.biases):
            if layer > 0:
                h = torch.relu(h)
                if callable(dropout):
                    h = dropout(layer, h)
                elif dropout and self.dropout > 0:
                    h = F.dropout(h, self.dropout, training=True)
            weight = self.layer_weight(layer)
            if span is not None:
                weight, bias = weight[a:b], bias[a:b]
            h = member_linear(h, weight, bias, self.per_network_kernels)
        return h


class PackedMLP(StackedMLP):
    """A stacked MLP whose weights after the first layer are masked to ``gamma`` groups per member.
    Each member is computed by the same kernel whatever the member count (``per_network_kernels``), so
    runs pack: their members one after another on the member axis (``stack``, ``select``)."""

    def __init__(self, members: int, in_features: int, hidden: tuple[int, ...], out_features: int, gamma: int):
        super().__init__(members, in_features, hidden, out_features, per_network_kernels=True)
        self.gamma = gamma
        sizes = [in_features, *hidden, out_features]
        for layer in range(len(sizes) - 1):
            mask = group_mask(sizes[layer], sizes[layer + 1], gamma if layer > 0 else 1)
            self.register_buffer(f"mask{layer}", mask)

    def shaped_like(self, members: int) -> "PackedMLP":
        sizes = self.sizes
        return PackedMLP(members, sizes[0], tuple(sizes[1:-1]), sizes[-1], self.gamma).to(self.weights[0].device)

    def masks(self) -> list[torch.Tensor]:
        return [getattr(self, f"mask{layer}") for layer in range(len(self.weights))]

    @torch.no_grad()
    def reset_member(self, m: int, generator: torch.Generator, init: str = "torch") -> None:
        """As StackedMLP's, with each block's own fan-in and fan-out; masked weights set to zero."""
        for weight, bias, mask in zip(self.weights, self.biases, self.masks()):
            fan_in, fan_out = int(mask[:, 0].sum()), int(mask[0].sum())  # one block's shape
            weight_bound, bias_bound = init_bounds(init, fan_in, fan_out)
            weight[m].uniform_(-weight_bound, weight_bound, generator=generator).mul_(mask)
            if bias_bound is None:
                bias[m].zero_()
            else:
                bias[m].uniform_(-bias_bound, bias_bound, generator=generator)

    def layer_weight(self, layer: int) -> torch.Tensor:
        # the mask is applied in the forward pass too, so masked weights get no gradient and stay zero
        return self.weights[layer] * getattr(self, f"mask{layer}")


def build_mlp(spec, members: int, layers: str, dropout: float, per_network_kernels: bool,
              alpha: float = 2.0, gamma: int = 1, rank1_init: str = "normal", **variational: Any) -> nn.Module:
    """The MLP of ``spec`` (a bench.models.registry.ArchSpec: its hidden widths) in layer kind ``layers``
    (``variational``: bench.models.variational.VariationalNet's options)."""
    hidden = tuple(spec.option("hidden"))
    if layers == "variational":
        return VariationalNet(members, [spec.in_features, *hidden, spec.n_classes], **variational)
    if layers == "packed":
        widths = tuple(packed_width(w, alpha, members, gamma) for w in hidden)
        return PackedMLP(members, spec.in_features, widths, spec.n_classes, gamma)
    if layers == "batch_ensemble":
        return BatchEnsembleNet(members, [spec.in_features, *hidden, spec.n_classes])
    return StackedMLP(members, spec.in_features, hidden, spec.n_classes, dropout, per_network_kernels)


ARCHITECTURES = (
    Architecture("mlp", "ReLU MLP: input rows -> hidden widths -> classes", build_mlp, options=("hidden",),
                 any_rows=True),
)
