"""BatchEnsemble (Wen, Tran & Ba, 2020): members share each layer's weight matrix W and differ by
rank-1 factors. Member m's layer computes ``((h * r_m) @ W) * s_m + b_m``: one shared W plus
(in + 2 out) numbers per member, instead of M full networks.

Members train jointly (every member sees the same batch; the loss is the mean of their
cross-entropies), and are checkpointed as one model, as torch-uncertainty does. ``rank1_init``:
``normal`` draws r and s from N(1, 0.5^2) (torch-uncertainty's choice), ``random_sign`` from
{-1, +1} (the paper's). W follows the protocol's init; the biases are per member.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from bench.models import init_bounds, stack_parameters, whole_runs
from bench.options import choice, option
from bench.seeding import member_generator
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


class BatchEnsembleMLP(nn.Module):
    """A ReLU MLP whose members share W per layer and own rank-1 factors r, s and a bias. A pack of
    runs (``stack``) holds each run's W on a leading run axis, (runs, in, out), and its members' r, s
    and bias consecutively on the member axis: one batched matmul serves every run."""

    def __init__(self, members: int, sizes: list[int], runs: int = 1):
        super().__init__()
        self.members, self.runs = members, runs  # members: all runs' members
        pairs = list(zip(sizes[:-1], sizes[1:]))
        self.shared = nn.ParameterList(nn.Parameter(torch.empty(runs, i, o)) for i, o in pairs)
        self.r = nn.ParameterList(nn.Parameter(torch.empty(members, i)) for i, _ in pairs)
        self.s = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for _, o in pairs)
        self.bias = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for _, o in pairs)
        self._register_load_state_dict_pre_hook(_run_axis_of_old_weights)

    @torch.no_grad()
    def reset(self, seed: int, init: str, rank1_init: str) -> None:
        """One run's draws (a model of one run)."""
        shared = member_generator(seed, 0, "init")           # W: one draw for the whole ensemble
        for w, bias in zip(self.shared, self.bias):
            weight_bound, bias_bound = init_bounds(init, *w.shape[1:])
            w[0].uniform_(-weight_bound, weight_bound, generator=shared)
            for m in range(self.members):
                if bias_bound is None:
                    bias[m].zero_()
                else:
                    bias[m].uniform_(-bias_bound, bias_bound, generator=shared)
        for m in range(self.members):                        # rank-1 factors: each member its stream
            generator = member_generator(seed, m, "method")
            for factor in (*self.r, *self.s):
                if rank1_init == "random_sign":
                    factor[m].copy_(torch.randint(0, 2, factor[m].shape, generator=generator) * 2.0 - 1.0)
                else:
                    factor[m].normal_(1.0, 0.5, generator=generator)

    @property
    def sizes(self) -> list[int]:
        return [w.shape[1] for w in self.shared] + [self.shared[-1].shape[2]]

    @staticmethod
    @torch.no_grad()
    def stack(models: list["BatchEnsembleMLP"]) -> "BatchEnsembleMLP":
        """Several runs' models as one (a pack): their W on the run axis, their members one after another."""
        out = BatchEnsembleMLP(sum(m.members for m in models), models[0].sizes, sum(m.runs for m in models))
        return stack_parameters(out.to(models[0].shared[0].device), models)

    @torch.no_grad()
    def select(self, members: list[int]) -> "BatchEnsembleMLP":
        """A model of copies of the given members and their runs' W (whole runs: a run's part of a pack)."""
        runs = whole_runs(members, self.members // self.runs, "BatchEnsembleMLP.select")
        out = BatchEnsembleMLP(len(members), self.sizes, len(runs)).to(self.shared[0].device)
        run_index = torch.tensor(runs, device=self.shared[0].device)
        member_index = torch.tensor(members, device=self.shared[0].device)
        for name, target in out.named_parameters():
            source = self.get_parameter(name)
            target.copy_(source.index_select(0, run_index if name.startswith("shared") else member_index))
        return out

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x: (N, in) shared by all members, or (members, N, in). Returns (members, N, out)."""
        h = x.expand(self.members, *x.shape) if x.dim() == 2 else x
        rows = h.shape[1]
        for layer, (w, r, s, b) in enumerate(zip(self.shared, self.r, self.s, self.bias)):
            if layer > 0:
                h = torch.relu(h)
            # each run's (members x rows, in) @ its W: on the CPU one run's bmm computes as its matmul did
            scaled = (h * r.unsqueeze(1)).reshape(self.runs, -1, w.shape[1])
            h = torch.bmm(scaled, w).view(self.members, rows, -1) * s.unsqueeze(1) + b.unsqueeze(1)
        return h


def _run_axis_of_old_weights(state_dict, prefix, *args) -> None:
    """Weights saved before dare-bench 0.6.0 hold W as (in, out): the one run's row of the run axis."""
    for key, value in list(state_dict.items()):
        if key.startswith(prefix + "shared.") and value.dim() == 2:
            state_dict[key] = value.unsqueeze(0)


@dataclasses.dataclass(frozen=True)
class BatchEnsemble(Method):
    name = "batch_ensemble"
    summary = "members share each weight matrix and differ by rank-1 factors (Wen et al. 2020)"
    joint = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    packable = True  # runs of one member count pack across seeds: W on a run axis (BatchEnsembleMLP.stack)

    members: int = option(4, **MEMBERS_OPTION)
    rank1_init: str = choice("normal", ("normal", "random_sign"),
                             help="init of the rank-1 factors: normal N(1, 0.5^2) or random_sign +-1")

    @property
    def label(self) -> str:
        return "BatchEnsemble"

    def build_model(self, seed: int, member_ids: list[int], in_features: int, hidden: tuple[int, ...],
                    n_classes: int, init: str) -> BatchEnsembleMLP:
        model = BatchEnsembleMLP(len(member_ids), [in_features, *hidden, n_classes])
        model.reset(seed, init, self.rank1_init)
        return model
