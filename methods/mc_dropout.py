"""MC dropout (Gal & Ghahramani, 2016): one network trained with dropout; at test time T
stochastic passes with dropout active are treated like ensemble members."""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from bench.models.stacked import StackedNetwork
from bench.options import option, parse_float, parse_int
from bench.seeding import CounterStream, member_seed
from methods.base import Method


class DropoutMasks:
    """Training-time dropout with a mask per network, from the network's dropout seed, the step, the
    layer and the element (a ``CounterStream``, one row per network, the layer its slot): a network's
    masks do not depend on what trains beside it, so runs pack, and no generator state is touched,
    so a CUDA graph can replay the step. ``rates`` per network."""

    def __init__(self, seeds: torch.Tensor, rates: torch.Tensor):
        self.draws, self.rates = CounterStream(seeds), rates
        self.scale = (1.0 / (1.0 - rates)).view(-1, 1, 1)  # inverted dropout, as torch's: kept / (1 - p)

    def __call__(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        uniform = self.draws.uniform(tuple(h.shape[1:]), slot=layer)
        return h * ((uniform >= self.rates.view(-1, 1, 1)).to(h.dtype) * self.scale)

    def advance(self) -> None:
        self.draws.advance()


@dataclasses.dataclass(frozen=True)
class MCDropout(Method):
    name = "mc_dropout"
    summary = "one network with dropout; T stochastic test-time passes act as members"
    # a temperature fitted on the dropout-free network would calibrate another predictive than the
    # one every metric reads
    temperature_unsupported = ("its predictions are stochastic passes, and the temperature is fitted on "
                               "dropout-free logits")
    # training masks per network (DropoutMasks): runs pack across seeds and rates, and the step is captured
    packable = True
    capturable = True
    pack_options = ("dropout",)

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

    def prepare(self, model: StackedNetwork, seed: int, member_ids: list[int]) -> DropoutMasks:
        device = next(model.parameters()).device
        seeds = torch.tensor([member_seed(seed, m, "dropout") for m in member_ids], device=device)
        return DropoutMasks(seeds, torch.full((len(member_ids),), float(self.dropout), device=device))

    def stack_states(self, states: list[DropoutMasks]) -> DropoutMasks:
        return DropoutMasks(torch.cat([s.draws.seeds for s in states]), torch.cat([s.rates for s in states]))

    def training_forward(self, model: StackedNetwork, x: torch.Tensor, state: Any) -> torch.Tensor:
        out = model(x, dropout=state)
        state.advance()
        return out

    def test_dropout(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """Test-time dropout at this run's rate, from torch's global generator."""
        return F.dropout(h, self.dropout, training=True)

    def predict_proba(self, model: StackedNetwork, x: torch.Tensor) -> torch.Tensor:
        # the T stochastic passes, (T, N, K)
        return torch.cat([self.logits(model, x, dropout=self.test_dropout) for _ in range(self.passes)]).softmax(dim=-1)
