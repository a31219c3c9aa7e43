"""The architectures, by name, as timm registers its models: one small build function per
architecture, an entry in ``ARCHITECTURES`` with the protocol values it reads (its options), and an
``ArchSpec`` (the architecture, its options, the data's image shape and classes, the init rule) that
builds a run's stacked model.

Every architecture builds its networks in three layer kinds, which the methods choose:

* ``members``: independent members (``bench.models.stacked.StackedNetwork``), the default;
* ``packed``: Packed-Ensembles' narrow members, every width scaled to ``packed_width`` and every
  layer after the first split in ``gamma`` groups (torch-uncertainty's ``PackedLinear`` / ``PackedConv2d``);
* ``batch_ensemble``: members sharing each layer's weight, with rank-1 factors
  (``BatchLinear`` / ``BatchConv2d``; ``bench.models.batch_ensemble``).

Adding an architecture: a module with its stacked model (the ``StackedNetwork`` interface), one
build function here and one entry (docs/architectures.md, "Adding an architecture").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch
from torch import nn

from bench.models.batch_ensemble import BatchEnsembleNet
from bench.models.lenet import LENET5, LENET5_SAME, LeNetShape, StackedLeNet, conv_layers
from bench.models.mlp import PackedMLP, StackedMLP
from bench.models.stacked import StackedNetwork, packed_width

LAYER_KINDS = ("members", "packed", "batch_ensemble")


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    """What a run's networks are: architecture ``name`` with its ``options`` (protocol values, e.g.
    the MLP's hidden widths), on images ``input_shape`` (C, H, W) with ``n_classes`` outputs,
    initialised by ``init`` (bench.models.stacked.init_bounds)."""
    name: str
    input_shape: tuple[int, int, int]
    n_classes: int
    init: str = "torch"
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def mlp(cls, in_features: int, hidden: tuple[int, ...], n_classes: int, init: str = "torch") -> "ArchSpec":
        """The MLP on rows of ``in_features`` values (scripts and tests that build one directly)."""
        return cls("mlp", (1, 1, in_features), n_classes, init, (("hidden", tuple(hidden)),))

    @property
    def architecture(self) -> "Architecture":
        return ARCHITECTURES[self.name]

    def option(self, name: str) -> Any:
        return dict(self.options)[name]

    @property
    def in_features(self) -> int:
        return math.prod(self.input_shape)

    def fitted(self, features: int, n_classes: int) -> "ArchSpec":
        """This spec for data rows of ``features`` values and ``n_classes`` classes: an architecture
        that reads any row (the MLP) takes rows of another width as 1 x 1 x features images;
        ValueError for one that needs this spec's images."""
        spec = dataclasses.replace(self, n_classes=n_classes)
        if features == self.in_features:
            return spec
        if self.architecture.any_rows:
            return dataclasses.replace(spec, input_shape=(1, 1, features))
        raise ValueError(f"architecture {self.name} takes images of shape {self.input_shape}, and the data rows "
                         f"hold {features} values")

    def build(self, seed: int, member_ids: list[int], layers: str = "members", dropout: float = 0.0,
              per_network_kernels: bool = False, **layer_options: Any) -> nn.Module:
        """The stacked model of ``len(member_ids)`` members of layer kind ``layers``, member i drawn
        from the (seed, member_ids[i]) init stream (a BatchEnsemble's shared weights from member 0's).
        ``layer_options``: packed: alpha, gamma; batch_ensemble: rank1_init."""
        if layers not in LAYER_KINDS:
            raise ValueError(f"unknown layer kind {layers!r} (known: {', '.join(LAYER_KINDS)})")
        model = self.architecture.build(self, len(member_ids), layers, dropout, per_network_kernels, **layer_options)
        if layers == "batch_ensemble":
            model.reset(seed, self.init, layer_options.get("rank1_init", "normal"))
            return model
        return StackedNetwork.for_members(model, seed, member_ids, self.init)

    def cost(self) -> "NetworkCost":
        """One network's training FLOPs, parameters and activation floats per sample (built on the meta
        device: shapes only, nothing allocated)."""
        with torch.device("meta"):
            model = self.architecture.build(self, 1, "members", 0.0, False)
        return NetworkCost(model.training_flops_per_sample(), model.parameters_per_network(),
                           model.activation_floats_per_sample())


@dataclasses.dataclass(frozen=True)
class NetworkCost:
    training_flops_per_sample: int
    parameters: int
    activation_floats_per_sample: int


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A registered architecture: ``build(spec, members, layers, dropout, per_network_kernels,
    **layer_options)`` returns an uninitialised stacked model; ``options``: the protocol values it
    reads; ``layers``: the layer kinds it builds; ``any_rows``: it reads rows of any width (the MLP),
    not only its images."""
    name: str
    summary: str
    build: Callable[..., nn.Module]
    options: tuple[str, ...] = ()
    layers: tuple[str, ...] = LAYER_KINDS
    any_rows: bool = False


def mlp(spec: ArchSpec, members: int, layers: str, dropout: float, per_network_kernels: bool,
        alpha: float = 2.0, gamma: int = 1, rank1_init: str = "normal") -> nn.Module:
    hidden = tuple(spec.option("hidden"))
    if layers == "packed":
        widths = tuple(packed_width(w, alpha, members, gamma) for w in hidden)
        return PackedMLP(members, spec.in_features, widths, spec.n_classes, gamma)
    if layers == "batch_ensemble":
        return BatchEnsembleNet(members, [spec.in_features, *hidden, spec.n_classes])
    return StackedMLP(members, spec.in_features, hidden, spec.n_classes, dropout, per_network_kernels)


def lenet(shape: LeNetShape) -> Callable[..., nn.Module]:
    """The build function of a LeNet-5 variant."""
    def build(spec: ArchSpec, members: int, layers: str, dropout: float, per_network_kernels: bool,
              alpha: float = 2.0, gamma: int = 1, rank1_init: str = "normal") -> nn.Module:
        if layers == "packed":
            narrow = shape.widened(lambda width: packed_width(width, alpha, members, gamma))
            return StackedLeNet(members, spec.input_shape, spec.n_classes, narrow, groups=gamma)
        if layers == "batch_ensemble":
            convs = conv_layers(shape, spec.input_shape, 1)
            features = convs[-1].c_out * math.prod(convs[-1].pooled)
            return BatchEnsembleNet(members, [features, *shape.dense, spec.n_classes], 1, tuple(convs),
                                    spec.input_shape, shape.kernel)
        return StackedLeNet(members, spec.input_shape, spec.n_classes, shape, dropout)
    return build


ARCHITECTURES = {a.name: a for a in [
    Architecture("mlp", "ReLU MLP: input rows -> hidden widths -> classes", mlp, options=("hidden",), any_rows=True),
    Architecture("lenet5", "LeNet-5, textbook: conv 6@5x5 pad 2, pool, conv 16@5x5, pool, conv 120@5x5, dense 84, "
                 "dense classes (61,706 parameters on MNIST)", lenet(LENET5)),
    Architecture("lenet5_same", "LeNet-5 of uncertainty-baselines' baselines/mnist: every conv SAME-padded, conv 3 "
                 "gives 120x7x7 before dense 84 (545,546 parameters on MNIST)", lenet(LENET5_SAME)),
]}
ARCH_OPTIONS = tuple(dict.fromkeys(o for a in ARCHITECTURES.values() for o in a.options))  # every architecture's
