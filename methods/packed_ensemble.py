"""Packed-Ensembles (Laurent et al., 2023): the base network is widened by alpha and split into M
members of width alpha * w / M each (rounded up to a multiple of gamma; on LeNet-5 every conv's
channels and every hidden dense width); inside a member every layer after the first, the output
layer included, is further split into gamma independent groups (block-diagonal dense weights,
grouped convolutions), as torch-uncertainty's PackedLinear / PackedConv2d group every layer but the
first (so gamma must divide the number of classes). The first layer of each member sees the whole
input. The layers are the architecture's ``packed`` kind (bench.models.registry). Members train jointly (the same batches, the mean of their
cross-entropies); the block structure is a fixed mask on the stacked weights, so the masked
weights get no gradient and stay zero.
"""
from __future__ import annotations

import dataclasses
from typing import Any


from bench.errors import ConfigError
from bench.models.registry import ArchSpec
from bench.models.stacked import StackedNetwork
from bench.options import option, parse_float, parse_int
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


@dataclasses.dataclass(frozen=True)
class PackedEnsemble(Method):
    name = "packed_ensemble"
    summary = "M narrow members (width alpha*w/M, gamma groups each) packed in one network (Laurent et al. 2023)"
    joint = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    packable = True  # runs of one member count, alpha and gamma pack across seeds (the stacked model's stack)
    layers = "packed"

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

    def build_model(self, seed: int, member_ids: list[int], arch: ArchSpec) -> StackedNetwork:
        # the architecture's packed layers: narrow members, every layer after the first in gamma groups
        return arch.build(seed, member_ids, layers=self.layers, alpha=self.alpha, gamma=self.gamma)
