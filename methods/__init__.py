"""The method registry: the one place that maps a name to a method class.

To add a method, write ``methods/<name>.py`` with a ``Method`` subclass and add the class to
``_METHODS`` below. Nothing else changes: the training loop, evaluators and CLI pick it up.
"""
from __future__ import annotations

from bench.errors import ConfigError
from methods.base import Method
from methods.anchor_net import AnchorNet
from methods.batch_ensemble import BatchEnsemble
from methods.dare import DARE
from methods.deep_ensemble import DeepEnsemble
from methods.mc_dropout import MCDropout
from methods.mod import MOD
from methods.negcorr import NegCorr
from methods.packed_ensemble import PackedEnsemble
from methods.rde import RDE
from methods.single_network import SingleNetwork

_METHODS: tuple[type[Method], ...] = (DeepEnsemble, DARE, MCDropout, SingleNetwork, AnchorNet, MOD, NegCorr, RDE,
                                      BatchEnsemble, PackedEnsemble)
REGISTRY: dict[str, type[Method]] = {cls.name: cls for cls in _METHODS}


def get_method(name: str) -> type[Method]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown method '{name}' (registered: {', '.join(REGISTRY)})") from None


__all__ = ["Method", "REGISTRY", "get_method"]
