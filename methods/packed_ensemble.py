"""Packed-Ensembles (Laurent et al., 2023), for an MLP: the base network is widened by alpha and
split into M members of width alpha * w / M each (rounded up to a multiple of gamma); inside a
member every layer after the first, the output layer included, is further split into gamma
independent groups (block-diagonal weights), as torch-uncertainty's PackedLinear groups every
layer but the first (so gamma must divide the number of classes). The first layer of each member
sees the whole input. Members train jointly (the same batches, the mean of their
cross-entropies); the block structure is a fixed mask on the stacked weights, so the masked
weights get no gradient and stay zero.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from bench.errors import ConfigError
from bench.models import StackedMLP, init_bounds
from bench.options import option, parse_float, parse_int
from bench.seeding import member_generator
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


def packed_width(width: int, alpha: float, members: int, gamma: int) -> int:
    """Each member's width for a base layer of ``width`` units."""
    return gamma * math.ceil(width * alpha / members / gamma)


def group_mask(n_in: int, n_out: int, groups: int) -> torch.Tensor:
    """(n_in, n_out) block-diagonal 0/1 mask of ``groups`` equal blocks."""
    rows = torch.arange(n_in) // (n_in // groups)
    cols = torch.arange(n_out) // (n_out // groups)
    return (rows.unsqueeze(1) == cols.unsqueeze(0)).float()


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


@dataclasses.dataclass(frozen=True)
class PackedEnsemble(Method):
    name = "packed_ensemble"
    summary = "M narrow members (width alpha*w/M, gamma groups each) packed in one network (Laurent et al. 2023)"
    joint = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    packable = True  # runs of one member count, alpha and gamma pack across seeds (PackedMLP.stack)

    members: int = option(4, **MEMBERS_OPTION)
    alpha: float = option(2.0, parse=parse_float, check=lambda v: 0 < v < float("inf"), allowed="a number > 0",
                          help="width multiplier of the packed network")
    gamma: int = option(1, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                        help="groups inside each member's layers after the first (must divide the classes)")

    def check_protocol(self, protocol: Any, what: str) -> None:
        super().check_protocol(protocol, what)
        if protocol.n_classes % self.gamma:
            raise ConfigError(f"{what}: gamma={self.gamma} must divide the {protocol.n_classes} classes "
                              "(the output layer is split into gamma groups too)")

    @property
    def label(self) -> str:
        return "Packed-Ensembles"

    def build_model(self, seed: int, member_ids: list[int], in_features: int, hidden: tuple[int, ...],
                    n_classes: int, init: str) -> StackedMLP:
        widths = tuple(packed_width(w, self.alpha, len(member_ids), self.gamma) for w in hidden)
        model = PackedMLP(len(member_ids), in_features, widths, n_classes, self.gamma)
        for i, m in enumerate(member_ids):
            model.reset_member(i, member_generator(seed, m, "init"), init)
        return model
