"""LeNet-5 with members stacked on a leading axis: three 5x5 convolutions (ReLU, 2x2 max-pool after
the first two), then dense layers, as ordinary ``nn.Conv2d`` / ``nn.Linear`` members would compute.

Two variants (``LENET5``, ``LENET5_SAME``; their entries in ``ARCHITECTURES`` at the end of this module):

* ``lenet5``, the textbook network: conv 6@5x5 padding 2, pool, conv 16@5x5, pool, conv 120@5x5
  (1x1 out), dense 84, dense classes: 61,706 parameters on 28x28 images;
* ``lenet5_same``, uncertainty-baselines' ``baselines/mnist`` LeNet: every convolution SAME-padded,
  so conv 3 gives 120x7x7 before dense 84: 545,546 parameters.

How the members compute (measured on the 2-core CPU, docs/performance.md): the convolutions run
member by member (each member's batch through ``F.conv2d`` with its own kernels), which oneDNN runs
at a high share of the machine's peak, and so do the dense layers (``addmm`` over all threads); a
member's result never depends on how many members sit beside it, so packs stay bitwise equal to runs
trained alone. ``groups`` > 1 (Packed-Ensembles' gamma) splits every layer after
the first into that many groups: grouped convolutions, block-diagonal dense weights.

MC dropout: dropout acts on the dense layers' inputs (the flattened convolutional features and each
hidden dense layer), the convolutions are never dropped (Gal & Ghahramani's "lenet-ip" placement).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.batch_ensemble import BatchEnsembleNet
from bench.models.variational import VariationalNet
from bench.models.stacked import Architecture, ConvLayer, StackedNetwork, group_mask, init_bounds, packed_width


@dataclasses.dataclass(frozen=True)
class LeNetShape:
    """A LeNet-5 variant: its convolutions' output channels and paddings, whether a 2x2 max-pool
    follows each, and the widths of its hidden dense layers."""
    channels: tuple[int, ...] = (6, 16, 120)
    paddings: tuple[int, ...] = (2, 0, 0)
    pools: tuple[bool, ...] = (True, True, False)
    dense: tuple[int, ...] = (84,)
    kernel: int = 5

    def widened(self, width: Callable[[int], int]) -> "LeNetShape":
        """The same network with every conv's channels and hidden dense width mapped by ``width``."""
        return dataclasses.replace(self, channels=tuple(map(width, self.channels)), dense=tuple(map(width, self.dense)))


LENET5 = LeNetShape()
LENET5_SAME = LeNetShape(paddings=(2, 2, 2))


def conv_layers(shape: LeNetShape, input_shape: tuple[int, int, int], groups: int) -> list[ConvLayer]:
    """The convolutions of ``shape`` on images ``input_shape`` (C, H, W); ValueError when an image
    is too small for them."""
    layers, c_in, size = [], input_shape[0], tuple(input_shape[1:])
    for i, (c_out, padding, pool) in enumerate(zip(shape.channels, shape.paddings, shape.pools)):
        out = tuple(s + 2 * padding - shape.kernel + 1 for s in size)
        if min(out) < 1 or (pool and min(out) < 2):
            raise ValueError(f"LeNet-5: images of {input_shape[1]}x{input_shape[2]} are too small for its convolutions")
        layers.append(ConvLayer(c_in, c_out, padding, groups if i else 1, pool, size, out))
        c_in, size = c_out, layers[-1].pooled
    return layers


class StackedLeNet(StackedNetwork):
    """``members`` independent LeNet-5 networks of ``shape`` on images ``input_shape`` (C, H, W).

    ``dropout``: the rate of ``forward(..., dropout=True)`` on the dense layers' inputs (never on the
    convolutions or the images), explicit as in the MLP so that ``eval()`` cannot switch it off.
    """

    def __init__(self, members: int, input_shape: tuple[int, int, int], n_classes: int, shape: LeNetShape = LENET5,
                 dropout: float = 0.0, groups: int = 1):
        super().__init__()
        self.members, self.input_shape, self.n_classes = members, tuple(input_shape), n_classes
        self.shape, self.dropout, self.groups = shape, dropout, groups
        self.convs = conv_layers(shape, self.input_shape, groups)
        k = shape.kernel
        self.conv_weights = nn.ParameterList(nn.Parameter(torch.empty(members, c.c_out, c.c_in // c.groups, k, k))
                                             for c in self.convs)
        self.conv_biases = nn.ParameterList(nn.Parameter(torch.empty(members, c.c_out)) for c in self.convs)
        last = self.convs[-1]
        sizes = [last.c_out * last.pooled[0] * last.pooled[1], *shape.dense, n_classes]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(members, i, o)) for i, o in zip(sizes[:-1], sizes[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for o in sizes[1:])
        self.dense_sizes = sizes
        if groups > 1:  # every dense layer comes after the first layer: all are grouped
            for layer, (i, o) in enumerate(zip(sizes[:-1], sizes[1:])):
                self.register_buffer(f"mask{layer}", group_mask(i, o, groups))

    def shaped_like(self, members: int) -> "StackedLeNet":
        return StackedLeNet(members, self.input_shape, self.n_classes, self.shape, self.dropout,
                            self.groups).to(self.conv_weights[0].device)

    def dense_weight(self, layer: int) -> torch.Tensor:
        """Dense layer ``layer``'s (members, in, out) weight, block-diagonal when grouped."""
        weight = self.weights[layer]
        return weight * getattr(self, f"mask{layer}") if self.groups > 1 else weight

    @torch.no_grad()
    def reset_member(self, m: int, generator: torch.Generator, init: str = "torch") -> None:
        """Each layer's bounds from one group's fan-in and fan-out (a conv's: channels x kernel area)."""
        area = self.shape.kernel ** 2
        for conv, weight, bias in zip(self.convs, self.conv_weights, self.conv_biases):
            bounds = init_bounds(init, conv.c_in // conv.groups * area, conv.c_out // conv.groups * area)
            _draw(weight[m], bias[m], bounds, generator)
        groups = self.groups
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            _draw(weight[m], bias[m], init_bounds(init, weight.shape[1] // groups, weight.shape[2] // groups), generator)
            if groups > 1:
                weight[m].mul_(getattr(self, f"mask{layer}"))

    def features(self, images: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor]) -> torch.Tensor:
        """One member's convolutional features (N, F) of images (N, C, H, W)."""
        h = images
        for conv, weight, bias in zip(self.convs, weights, biases):
            h = F.conv2d(h, weight, bias, padding=conv.padding, groups=conv.groups)
            # pool, then ReLU: the same values and gradients as ReLU then pool (ReLU is monotone, and
            # both pass a gradient to the window's maximum only where it is > 0), on a 4x smaller tensor
            h = torch.relu(F.max_pool2d(h, 2) if conv.pool else h)
        return h.flatten(1)

    def forward(self, x: torch.Tensor, dropout: bool | Callable[[int, torch.Tensor], torch.Tensor] = False,
                span: tuple[int, int] | None = None) -> torch.Tensor:
        """x: rows (N, C*H*W) shared by the members, or (members, N, C*H*W). Returns logits (members, N, classes).
        dropout and span as ``StackedMLP.forward``'s (a function's layer numbers: 1 for the conv features,
        then 2, 3, ... for each hidden dense layer)."""
        a, b = span or (0, self.members)
        # each member's parameters as views (unbind: the backward pass stacks their gradients once)
        conv = list(zip(*(t[a:b].unbind(0) for t in (*self.conv_weights, *self.conv_biases))))
        dense = list(zip(*(t[a:b].unbind(0) for t in (*map(self.dense_weight, range(len(self.biases))), *self.biases))))
        images = [(x if x.dim() == 2 else x[i]).reshape(-1, *self.input_shape) for i in range(b - a)]
        if callable(dropout) or (dropout and self.dropout > 0):  # dropout draws for all members' rows at once
            h = torch.stack([self.features(im, p[:len(self.convs)], p[len(self.convs):]) for im, p in zip(images, conv)])
            for layer in range(len(self.biases)):
                h = torch.relu(h) if layer > 0 else h
                h = dropout(layer + 1, h) if callable(dropout) else F.dropout(h, self.dropout, training=True)
                h = torch.stack([self.dense(h[i], p, layer) for i, p in enumerate(dense)])
            return h
        # member by member, convolutions and dense layers alike (addmm over all threads): a member's result never
        # depends on the members beside it (a batched matmul of one member rounds unlike one of several), and no
        # tensor of every member's activations is made
        out = []
        for im, c, d in zip(images, conv, dense):
            h = self.features(im, c[:len(self.convs)], c[len(self.convs):])
            for layer in range(len(self.biases)):
                h = self.dense(torch.relu(h) if layer > 0 else h, d, layer)
            out.append(h)
        return torch.stack(out)

    def dense(self, h: torch.Tensor, params: list[torch.Tensor], layer: int) -> torch.Tensor:
        """One member's dense layer ``layer`` on its rows (N, in); ``params``: its dense weights, then biases."""
        layers = len(self.biases)
        return torch.addmm(params[layers + layer], h, params[layer])

    def kernel_step(self, batch: int) -> Callable[[], None]:
        device = self.conv_weights[0].device
        layers = []
        for i, (conv, weight) in enumerate(zip(self.convs, self.conv_weights)):
            x = torch.randn(batch, conv.c_in, *conv.size_in, device=device, requires_grad=i > 0)
            layers.append((functools.partial(F.conv2d, padding=conv.padding, groups=conv.groups), x,
                           weight[0].detach().requires_grad_()))
        for weight in self.weights:
            layers.append((torch.mm, torch.randn(batch, weight.shape[1], device=device, requires_grad=True),
                           weight[0].detach().requires_grad_()))

        def step() -> None:
            for forward, x, w in layers:
                out = forward(x, w)
                out.backward(torch.ones_like(out))
        return step

    def as_module(self, member: int) -> nn.Sequential:
        layers: list[nn.Module] = [nn.Unflatten(1, self.input_shape)]
        device = self.conv_weights[0].device
        for conv, weight, bias in zip(self.convs, self.conv_weights, self.conv_biases):
            module = nn.Conv2d(conv.c_in, conv.c_out, self.shape.kernel, padding=conv.padding, groups=conv.groups)
            with torch.no_grad():
                module.weight.copy_(weight[member])
                module.bias.copy_(bias[member])
            layers += [module.to(device)] + ([nn.MaxPool2d(2)] if conv.pool else []) + [nn.ReLU()]
        layers.append(nn.Flatten())
        for layer, bias in enumerate(self.biases):
            if layer > 0:
                layers.append(nn.ReLU())
            weight = self.dense_weight(layer)
            linear = nn.Linear(weight.shape[1], weight.shape[2]).to(device)
            with torch.no_grad():
                linear.weight.copy_(weight[member].T)
                linear.bias.copy_(bias[member])
            layers.append(linear)
        return nn.Sequential(*layers).eval()

    def training_flops_per_sample(self) -> int:
        flops, area = 0, self.shape.kernel ** 2
        for i, conv in enumerate(self.convs):
            macs = conv.c_in // conv.groups * area * conv.c_out * conv.size_out[0] * conv.size_out[1]
            flops += 2 * macs * (3 if i else 2)  # forward, weight gradient, input gradient (none into the images)
        sizes = self.dense_sizes
        return flops + sum(6 * i * o for i, o in zip(sizes[:-1], sizes[1:]))

    def activation_floats_per_sample(self) -> int:
        c, h, w = self.input_shape
        floats = c * h * w
        for conv in self.convs:
            floats += conv.c_out * (conv.size_out[0] * conv.size_out[1] + (conv.pooled[0] * conv.pooled[1] if conv.pool else 0))
        return floats + sum(self.dense_sizes[1:])


def _draw(weight: torch.Tensor, bias: torch.Tensor, bounds: tuple[float, float | None], generator: torch.Generator) -> None:
    weight_bound, bias_bound = bounds
    weight.uniform_(-weight_bound, weight_bound, generator=generator)
    if bias_bound is None:
        bias.zero_()
    else:
        bias.uniform_(-bias_bound, bias_bound, generator=generator)


def build_lenet(shape: LeNetShape) -> Callable[..., nn.Module]:
    """The build function of a LeNet-5 variant: ``spec`` (a bench.models.registry.ArchSpec) in layer kind ``layers``."""
    def build(spec, members: int, layers: str, dropout: float, per_network_kernels: bool,
              alpha: float = 2.0, gamma: int = 1, rank1_init: str = "normal", **variational) -> nn.Module:
        if layers == "packed":
            narrow = shape.widened(lambda width: packed_width(width, alpha, members, gamma))
            return StackedLeNet(members, spec.input_shape, spec.n_classes, narrow, groups=gamma)
        if layers in ("batch_ensemble", "variational"):
            convs = conv_layers(shape, spec.input_shape, 1)
            sizes = [convs[-1].c_out * math.prod(convs[-1].pooled), *shape.dense, spec.n_classes]
            if layers == "variational":
                return VariationalNet(members, sizes, tuple(convs), spec.input_shape, shape.kernel, **variational)
            return BatchEnsembleNet(members, sizes, 1, tuple(convs), spec.input_shape, shape.kernel)
        return StackedLeNet(members, spec.input_shape, spec.n_classes, shape, dropout)
    return build


ARCHITECTURES = (
    Architecture("lenet5", "LeNet-5, textbook: conv 6@5x5 pad 2, pool, conv 16@5x5, pool, conv 120@5x5, dense 84, "
                 "dense classes (61,706 parameters on MNIST)", build_lenet(LENET5)),
    Architecture("lenet5_same", "LeNet-5 of uncertainty-baselines' baselines/mnist: every conv SAME-padded, conv 3 "
                 "gives 120x7x7 before dense 84 (545,546 parameters on MNIST)", build_lenet(LENET5_SAME)),
)
