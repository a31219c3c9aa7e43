"""Networks with members stacked on a leading axis (torch-uncertainty's ensemble-as-batch idea).

Member m of a ``StackedMLP`` is the ordinary MLP whose layer l has weight ``weights[l][m]`` and bias
``biases[l][m]``. One batched matmul serves every member, and every method (ensemble, DARE,
MC dropout with one member) shares this one model and one training loop.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bench.seeding import member_generator


def member_linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  per_network: bool = False) -> torch.Tensor:
    """Per-member affine map: h (M, N, in) or (N, in) shared, weight (M, in, out), bias (M, out).

    On the CPU, bmm spreads its batch of members over the threads, each matrix on one thread, so
    when the member count is not a multiple of the thread count some threads idle (measured here:
    3 members on 2 threads run at 129 GFLOP/s, 2 or 4 members at ~190). The remainder members
    therefore go through addmm, which splits one matrix over all threads. ``per_network``: one
    baddbmm for all, so that every member is computed by the same kernel whatever the member count
    (a packable model's results must not depend on its pack). On a GPU one baddbmm is best.
    """
    members = weight.shape[0]
    if h.dim() == 2:
        h = h.expand(members, *h.shape)
    if h.device.type != "cpu" or per_network:
        return torch.baddbmm(bias.unsqueeze(1), h, weight)
    batched = members - members % torch.get_num_threads()
    parts = [torch.baddbmm(bias[:batched].unsqueeze(1), h[:batched], weight[:batched])] if batched else []
    parts += [torch.addmm(bias[m], h[m], weight[m]).unsqueeze(0) for m in range(batched, members)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def training_flops_per_sample(sizes: list[int]) -> int:
    """Matmul FLOPs to train one MLP network of layer widths ``sizes`` on one sample.

    Per Linear layer (in -> out): forward 2*in*out, weight gradient 2*in*out, and input gradient
    2*in*out for every layer but the first (the images need no gradient). Bias adds, activations,
    the loss and Adam are left out: they are O(width), not O(width^2).
    """
    layers = list(zip(sizes[:-1], sizes[1:]))
    return sum(4 * i * o for i, o in layers) + sum(2 * i * o for i, o in layers[1:])


def init_bounds(init: str, fan_in: int, fan_out: int) -> tuple[float, float | None]:
    """The bounds a of the U(-a, a) draws of a layer's weights and biases (None: zero biases).

    init 'torch': nn.Linear's default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
    init 'glorot': Keras' default, weights U(-a, a) with a = sqrt(6 / (fan_in + fan_out)), zero biases.
    """
    if init == "glorot":
        return math.sqrt(6.0 / (fan_in + fan_out)), None
    if init == "torch":
        bound = 1.0 / math.sqrt(fan_in)
        return bound, bound
    raise ValueError(f"unknown init {init!r}")


@torch.no_grad()
def stack_parameters(out: nn.Module, models: list[nn.Module]) -> nn.Module:
    """``out`` (shaped for all of them) with each parameter the models' ones concatenated on the
    leading axis, in the models' order: several runs' models as one pack."""
    for target, *sources in zip(out.parameters(), *(m.parameters() for m in models)):
        target.copy_(torch.cat(sources))
    return out


def whole_runs(members: list[int], per_run: int, what: str) -> list[int]:
    """The runs whose members ``members`` are, each run's ``per_run`` members all of them, in order
    (how a pack's model with a run axis hands back a run's part); ValueError otherwise."""
    runs = list(dict.fromkeys(m // per_run for m in members))
    if sorted(members) != [r * per_run + i for r in runs for i in range(per_run)]:
        raise ValueError(f"{what} takes whole runs' members")
    return runs


class StackedMLP(nn.Module):
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
        for i, m in enumerate(member_ids):
            model.reset_member(i, member_generator(seed, m, "init"), init)
        return model

    @staticmethod
    def stack(models: list["StackedMLP"]) -> "StackedMLP":
        """One stacked model from several (e.g. members trained one after another)."""
        return stack_parameters(models[0].shaped_like(sum(m.members for m in models)), models)

    def select(self, members: list[int]) -> "StackedMLP":
        """A stacked model of copies of the given members (a run's part of a pack)."""
        out = self.shaped_like(len(members))
        index = torch.tensor(members, device=self.weights[0].device)
        with torch.no_grad():
            for target, source in zip(out.parameters(), self.parameters()):
                target.copy_(source.index_select(0, index))  # on the device: no round trip through the host
        return out

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
    def flat(self) -> torch.Tensor:
        """Each member's parameters as one vector: (members, P), parameters in ``parameters()`` order."""
        return torch.cat([p.reshape(self.members, -1) for p in self.parameters()], dim=1)

    @torch.no_grad()
    def with_flat(self, vectors: torch.Tensor) -> "StackedMLP":
        """A stacked model of this shape with one member per row of ``vectors`` (the layout of ``flat``):
        how weights collected along training (snapshots, SWAG samples) are run."""
        out = self.shaped_like(len(vectors)).to(vectors.device)
        offset = 0
        for p in out.parameters():
            size = p[0].numel()
            p.copy_(vectors[:, offset:offset + size].reshape(p.shape))
            offset += size
        return out

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


class MemberSlice:
    """Members [a, b) of a stacked model as a penalty sees them (``bench.training.packs.MixedPack``):
    their parameters are slices of the model's, and calling it runs those members only, so
    gradients flow back into the model."""

    def __init__(self, model: StackedMLP, a: int, b: int):
        self.model, self.a, self.b = model, a, b
        self.members = b - a

    def parameters(self):
        return iter([p[self.a:self.b] for p in self.model.parameters()])

    def __call__(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        return self.model(x, dropout, span=(self.a, self.b))
