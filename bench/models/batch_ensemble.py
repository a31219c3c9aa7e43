"""BatchEnsemble layers (Wen, Tran & Ba, 2020), dense and convolutional (torch-uncertainty's
``BatchLinear`` / ``BatchConv2d``): members share each layer's weight W and differ by rank-1
factors. Member m's dense layer computes ``((h * r_m) @ W) * s_m + b_m``; its convolution
``conv(h * r_m, W) * s_m + b_m``, r_m scaling the input channels and s_m the output channels.

``BatchEnsembleNet`` is the MLP of layer widths ``sizes`` or, given ``convs``, a LeNet-5 whose
convolutions and dense layers are all BatchEnsemble layers. A pack of runs (``stack``) holds each
run's W on a leading run axis, and its members' r, s and bias consecutively on the member axis.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.stacked import ConvLayer, init_bounds, stack_parameters, whole_runs
from bench.seeding import member_generator


class BatchEnsembleNet(nn.Module):
    """``members`` BatchEnsemble members (of ``runs`` runs): optional convolutions ``convs`` on
    images ``input_shape``, then ReLU dense layers of widths ``sizes`` (sizes[0]: the flattened
    convolutional features, or the input)."""

    def __init__(self, members: int, sizes: list[int], runs: int = 1, convs: tuple[ConvLayer, ...] = (),
                 input_shape: tuple[int, ...] = (), kernel: int = 5):
        super().__init__()
        self.members, self.runs = members, runs  # members: all runs' members
        self.convs, self.input_shape, self.kernel = tuple(convs), tuple(input_shape), kernel
        self.conv_shared = nn.ParameterList(nn.Parameter(torch.empty(runs, c.c_out, c.c_in, kernel, kernel))
                                            for c in self.convs)
        self.conv_r = nn.ParameterList(nn.Parameter(torch.empty(members, c.c_in)) for c in self.convs)
        self.conv_s = nn.ParameterList(nn.Parameter(torch.empty(members, c.c_out)) for c in self.convs)
        self.conv_bias = nn.ParameterList(nn.Parameter(torch.empty(members, c.c_out)) for c in self.convs)
        pairs = list(zip(sizes[:-1], sizes[1:]))
        self.shared = nn.ParameterList(nn.Parameter(torch.empty(runs, i, o)) for i, o in pairs)
        self.r = nn.ParameterList(nn.Parameter(torch.empty(members, i)) for i, _ in pairs)
        self.s = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for _, o in pairs)
        self.bias = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for _, o in pairs)
        self._register_load_state_dict_pre_hook(_run_axis_of_old_weights)

    @torch.no_grad()
    def reset(self, seed: int, init: str, rank1_init: str) -> None:
        """One run's draws (a model of one run): W and the biases from the run's member-0 init
        stream, layer by layer (convolutions first); each member's rank-1 factors from its own stream."""
        shared = member_generator(seed, 0, "init")           # W: one draw for the whole ensemble
        area = self.kernel ** 2
        layers = [(w, b, (c.c_in * area, c.c_out * area)) for w, b, c in zip(self.conv_shared, self.conv_bias, self.convs)]
        layers += [(w, b, tuple(w.shape[1:])) for w, b in zip(self.shared, self.bias)]
        for w, bias, fans in layers:
            weight_bound, bias_bound = init_bounds(init, *fans)
            w[0].uniform_(-weight_bound, weight_bound, generator=shared)
            for m in range(self.members):
                if bias_bound is None:
                    bias[m].zero_()
                else:
                    bias[m].uniform_(-bias_bound, bias_bound, generator=shared)
        for m in range(self.members):                        # rank-1 factors: each member its stream
            generator = member_generator(seed, m, "method")
            for factor in (*self.conv_r, *self.r, *self.conv_s, *self.s):
                if rank1_init == "random_sign":
                    factor[m].copy_(torch.randint(0, 2, factor[m].shape, generator=generator) * 2.0 - 1.0)
                else:
                    factor[m].normal_(1.0, 0.5, generator=generator)

    @property
    def sizes(self) -> list[int]:
        return [w.shape[1] for w in self.shared] + [self.shared[-1].shape[2]]

    def shaped_like(self, members: int, runs: int) -> "BatchEnsembleNet":
        return BatchEnsembleNet(members, self.sizes, runs, self.convs, self.input_shape,
                                self.kernel).to(self.shared[0].device)

    @staticmethod
    @torch.no_grad()
    def stack(models: list["BatchEnsembleNet"]) -> "BatchEnsembleNet":
        """Several runs' models as one (a pack): their W on the run axis, their members one after another."""
        out = models[0].shaped_like(sum(m.members for m in models), sum(m.runs for m in models))
        return stack_parameters(out, models)

    @torch.no_grad()
    def select(self, members: list[int]) -> "BatchEnsembleNet":
        """A model of copies of the given members and their runs' W (whole runs: a run's part of a pack)."""
        runs = whole_runs(members, self.members // self.runs, "BatchEnsembleNet.select")
        out = self.shaped_like(len(members), len(runs))
        run_index = torch.tensor(runs, device=self.shared[0].device)
        member_index = torch.tensor(members, device=self.shared[0].device)
        for name, target in out.named_parameters():
            source = self.get_parameter(name)
            target.copy_(source.index_select(0, run_index if "shared" in name else member_index))
        return out

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x: (N, in) shared by all members, or (members, N, in). Returns (members, N, out)."""
        h = x.expand(self.members, *x.shape) if x.dim() == 2 else x
        if self.convs:
            h = self.features(h)
        rows = h.shape[1]
        for layer, (w, r, s, b) in enumerate(zip(self.shared, self.r, self.s, self.bias)):
            if layer > 0:
                h = torch.relu(h)
            # each run's (members x rows, in) @ its W: on the CPU one run's bmm computes as its matmul did
            scaled = (h * r.unsqueeze(1)).reshape(self.runs, -1, w.shape[1])
            h = torch.bmm(scaled, w).view(self.members, rows, -1) * s.unsqueeze(1) + b.unsqueeze(1)
        return h

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """The convolutional features (members, N, F) of rows (members, N, C*H*W): each run's
        members' scaled images through the run's W in one convolution."""
        members, rows, per_run = h.shape[0], h.shape[1], self.members // self.runs
        h = h.reshape(members, rows, *self.input_shape)
        for conv, w, r, s, b in zip(self.convs, self.conv_shared, self.conv_r, self.conv_s, self.conv_bias):
            scaled = (h * r.view(members, 1, -1, 1, 1)).flatten(0, 1)
            parts = scaled.split(per_run * rows)
            h = torch.cat([F.conv2d(part, w[i], padding=conv.padding) for i, part in enumerate(parts)])
            h = torch.relu(h.view(members, rows, conv.c_out, *conv.size_out) * s.view(members, 1, -1, 1, 1)
                           + b.view(members, 1, -1, 1, 1))
            if conv.pool:
                h = F.max_pool2d(h.flatten(0, 1), 2).view(members, rows, conv.c_out, *conv.pooled)
        return h.flatten(2)


def _run_axis_of_old_weights(state_dict, prefix, *args) -> None:
    """Weights saved before dare-bench 0.6.0 hold W as (in, out): the one run's row of the run axis."""
    for key, value in list(state_dict.items()):
        if key.startswith(prefix + "shared.") and value.dim() == 2:
            state_dict[key] = value.unsqueeze(0)
