"""The stacked-model interface every architecture implements (torch-uncertainty's ensemble-as-batch
idea), and the helpers the architectures share.

A stacked model holds ``members`` networks of one architecture, every parameter with the members on
its leading axis: member m's parameters are ``p[m]`` for each ``p`` in ``parameters()``. The
training loop, packs, rescoring, conformance and perf work through this interface only
(``StackedNetwork``): build from a seed's streams, stack several models, select members, reset a
member, read and write each member's parameters as one flat vector, one member as an ordinary
``nn.Sequential`` (what laplace-torch reads), and the cost of one network (training FLOPs and
activations per sample) for the efficiency columns and ``--pack-size auto``.

Inputs are rows of flattened images, (N, C*H*W) shared by every member or (M, N, C*H*W) one batch
per member, in C, H, W order; a convolutional architecture views them as (N, C, H, W) images (a
free reshape), the MLP reads them as they are. Outputs are logits (M, N, classes).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
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


def packed_width(width: int, alpha: float, members: int, gamma: int) -> int:
    """Each member's width for a base layer of ``width`` units."""
    return gamma * math.ceil(width * alpha / members / gamma)


def group_mask(n_in: int, n_out: int, groups: int) -> torch.Tensor:
    """(n_in, n_out) block-diagonal 0/1 mask of ``groups`` equal blocks."""
    rows = torch.arange(n_in) // (n_in // groups)
    cols = torch.arange(n_out) // (n_out // groups)
    return (rows.unsqueeze(1) == cols.unsqueeze(0)).float()


@dataclasses.dataclass(frozen=True)
class ConvLayer:
    """One convolution of a built network: channels in and out, padding, groups, pool after it,
    and its input's and output's (before the pool) height and width."""
    c_in: int
    c_out: int
    padding: int
    groups: int
    pool: bool
    size_in: tuple[int, int]
    size_out: tuple[int, int]

    @property
    def pooled(self) -> tuple[int, int]:
        return (self.size_out[0] // 2, self.size_out[1] // 2) if self.pool else self.size_out


def whole_runs(members: list[int], per_run: int, what: str) -> list[int]:
    """The runs whose members ``members`` are, each run's ``per_run`` members all of them, in order
    (how a pack's model with a run axis hands back a run's part); ValueError otherwise."""
    runs = list(dict.fromkeys(m // per_run for m in members))
    if sorted(members) != [r * per_run + i for r in runs for i in range(per_run)]:
        raise ValueError(f"{what} takes whole runs' members")
    return runs


LAYER_KINDS = ("members", "packed", "batch_ensemble", "variational")  # what an architecture may build (bench.models.registry)


class StackedNetwork(nn.Module):
    """``members`` networks of one architecture, every parameter (and every per-member buffer) with
    the members on its leading axis. A subclass implements ``shaped_like``, ``reset_member``,
    ``forward``, ``as_module`` and the two cost counts; the rest works on ``parameters()``."""

    members: int

    def shaped_like(self, members: int) -> "StackedNetwork":
        """An uninitialised model of this one's architecture and kernels with ``members`` members, on its device."""
        raise NotImplementedError

    @torch.no_grad()
    def reset_member(self, m: int, generator: torch.Generator, init: str = "torch") -> None:
        """Member m's parameters drawn from ``generator`` by the ``init`` rule (init_bounds), layer by
        layer, each layer's weight before its bias."""
        raise NotImplementedError

    def as_module(self, member: int) -> nn.Sequential:
        """Member ``member`` as ordinary torch layers taking rows (N, C*H*W), its last module the
        output Linear (laplace-torch's last layer), in eval mode."""
        raise NotImplementedError

    def training_flops_per_sample(self) -> int:
        """Multiply-add FLOPs (x2) of one network's training step per sample: forward, weight gradient
        and input gradient of every conv and dense layer (none into the images); element-wise work,
        pooling, the loss and Adam left out."""
        raise NotImplementedError

    def activation_floats_per_sample(self) -> int:
        """Floats of one network's activations per sample (inputs, every layer's output): what a
        batch and the validation split cost in memory (``bench.training.packs.network_bytes``)."""
        raise NotImplementedError

    def kernel_step(self, batch: int) -> Callable[[], None]:
        """One network's training-step kernels alone, on random tensors of the training shapes: each
        conv and dense layer's forward, weight gradient and input gradient (none into the images),
        without the element-wise work, loss and optimiser around them (``bench perf``'s ceiling)."""
        raise NotImplementedError

    @classmethod
    def for_members(cls, model: "StackedNetwork", seed: int, member_ids: list[int], init: str) -> "StackedNetwork":
        """``model`` with member i drawn from the (seed, member_ids[i]) init stream."""
        for i, m in enumerate(member_ids):
            model.reset_member(i, member_generator(seed, m, "init"), init)
        return model

    @staticmethod
    def stack(models: list["StackedNetwork"]) -> "StackedNetwork":
        """One stacked model from several (e.g. the runs of a pack, members trained one after another)."""
        return stack_parameters(models[0].shaped_like(sum(m.members for m in models)), models)

    def select(self, members: list[int]) -> "StackedNetwork":
        """A stacked model of copies of the given members (a run's part of a pack)."""
        out = self.shaped_like(len(members))
        device = next(self.parameters()).device
        index = torch.tensor(members, device=device)
        with torch.no_grad():
            for target, source in zip(out.parameters(), self.parameters()):
                target.copy_(source.index_select(0, index))  # on the device: no round trip through the host
        return out

    def parameters_per_network(self) -> int:
        return sum(p[0].numel() for p in self.parameters())

    @torch.no_grad()
    def flat(self) -> torch.Tensor:
        """Each member's parameters as one vector: (members, P), parameters in ``parameters()`` order."""
        return torch.cat([p.reshape(self.members, -1) for p in self.parameters()], dim=1)

    @torch.no_grad()
    def with_flat(self, vectors: torch.Tensor) -> "StackedNetwork":
        """A stacked model of this shape with one member per row of ``vectors`` (the layout of ``flat``):
        how weights collected along training (snapshots, SWAG samples) are run."""
        out = self.shaped_like(len(vectors)).to(vectors.device)
        offset = 0
        for p in out.parameters():
            size = p[0].numel()
            p.copy_(vectors[:, offset:offset + size].reshape(p.shape))
            offset += size
        return out

class MemberSlice:
    """Members [a, b) of a stacked model as a penalty sees them (``bench.training.packs.MixedPack``):
    their parameters are slices of the model's, and calling it runs those members only, so
    gradients flow back into the model."""

    def __init__(self, model: StackedNetwork, a: int, b: int):
        self.model, self.a, self.b = model, a, b
        self.members = b - a

    def parameters(self):
        return iter([p[self.a:self.b] for p in self.model.parameters()])

    def __call__(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        return self.model(x, dropout, span=(self.a, self.b))


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
