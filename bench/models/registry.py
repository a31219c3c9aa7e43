"""The architectures, by name, as timm registers its models: each module of bench/models declares
its architectures in a module-level ``ARCHITECTURES`` tuple of ``bench.models.stacked.Architecture``
entries (a name, a summary, one small build function, the protocol values it reads), and this
module collects them; an ``ArchSpec`` (the architecture, its options, the data's image shape and
classes, the init rule) builds a run's stacked model.

Every architecture builds its networks in four layer kinds, which the methods choose:

* ``members``: independent members (``bench.models.stacked.StackedNetwork``), the default;
* ``packed``: Packed-Ensembles' narrow members, every width scaled to ``packed_width`` and every
  layer after the first split in ``gamma`` groups (torch-uncertainty's ``PackedLinear`` / ``PackedConv2d``);
* ``batch_ensemble``: members sharing each layer's weight, with rank-1 factors
  (``BatchLinear`` / ``BatchConv2d``; ``bench.models.batch_ensemble``);
* ``variational``: mean-field Gaussian weights (``BayesLinear`` / ``BayesConv2d``;
  ``bench.models.variational``).

Adding an architecture: one module in bench/models with its stacked model (the ``StackedNetwork``
interface), its build function and its ``ARCHITECTURES`` entry (docs/architectures.md, "Adding an
architecture").
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
from typing import Any

import torch
from torch import nn

import bench.models
from bench.models.stacked import LAYER_KINDS, Architecture, StackedNetwork


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
        ``layer_options``: packed: alpha, gamma; batch_ensemble: rank1_init; variational: estimator, prior,
        prior_std (bench.models.variational.VariationalNet), mean_init, rho_init (its ``reset``)."""
        if layers not in LAYER_KINDS:
            raise ValueError(f"unknown layer kind {layers!r} (known: {', '.join(LAYER_KINDS)})")
        if layers == "variational":
            reset = {k: layer_options.pop(k) for k in ("mean_init", "rho_init") if k in layer_options}
        model = self.architecture.build(self, len(member_ids), layers, dropout, per_network_kernels, **layer_options)
        if layers == "variational":
            model.reset(seed, member_ids, self.init, **reset)
            return model
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


def discovered() -> dict[str, Architecture]:
    """Every architecture: the ``ARCHITECTURES`` entries of each module of bench/models, the MLP first."""
    found = {}
    for module in pkgutil.iter_modules(bench.models.__path__):
        if f"bench.models.{module.name}" != __name__:  # this module's own table is what is being made
            found.update((a.name, a) for a in getattr(importlib.import_module(f"bench.models.{module.name}"),
                                                       "ARCHITECTURES", ()))
    return dict(sorted(found.items(), key=lambda item: item[0] != "mlp"))  # the default first, then by module


ARCHITECTURES = discovered()
ARCH_OPTIONS = tuple(dict.fromkeys(o for a in ARCHITECTURES.values() for o in a.options))  # every architecture's
