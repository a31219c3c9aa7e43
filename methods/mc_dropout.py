"""MC dropout (Gal & Ghahramani, 2016): one network trained with dropout; at test time T
stochastic passes with dropout active are treated like ensemble members."""
from __future__ import annotations

import dataclasses

import torch

from bench.models import StackedMLP
from bench.options import option, parse_float, parse_int
from methods.base import Method


@dataclasses.dataclass(frozen=True)
class MCDropout(Method):
    name = "mc_dropout"
    summary = "one network with dropout; T stochastic test-time passes act as members"
    # a temperature fitted on the dropout-free network would calibrate another predictive than the
    # one every metric reads
    temperature_unsupported = ("its predictions are stochastic passes, and the temperature is fitted on "
                               "dropout-free logits")

    dropout: float = option(0.2, parse=parse_float, check=lambda v: 0 <= v < 1,
                            allowed="a number in [0, 1)", help="dropout rate on hidden activations")
    passes: int = option(30, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                         help="stochastic forward passes at test time (T)")

    @property
    def label(self) -> str:
        return "MC dropout"

    @property
    def n_networks(self) -> int:
        return 1

    @property
    def dropout_rate(self) -> float:
        return self.dropout

    def predict_proba(self, model: StackedMLP, x: torch.Tensor) -> torch.Tensor:
        # dropout=True on purpose: these are the T stochastic passes, (T, N, K)
        return torch.cat([self.logits(model, x, dropout=True) for _ in range(self.passes)]).softmax(dim=-1)
