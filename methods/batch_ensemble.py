"""BatchEnsemble (Wen, Tran & Ba, 2020): members share each layer's weight matrix W and differ by
rank-1 factors. Member m's layer computes ``((h * r_m) @ W) * s_m + b_m`` (a convolution:
``conv(h * r_m, W) * s_m + b_m``, per channel): one shared W plus (in + 2 out) numbers per member,
instead of M full networks. The layers are the architecture's ``batch_ensemble`` kind
(bench.models.batch_ensemble), dense and convolutional.

Members train jointly (every member sees the same batch; the loss is the mean of their
cross-entropies), and are checkpointed as one model, as torch-uncertainty does. ``rank1_init``:
``normal`` draws r and s from N(1, 0.5^2) (torch-uncertainty's choice), ``random_sign`` from
{-1, +1} (the paper's). W follows the protocol's init; the biases are per member.
"""
from __future__ import annotations

import dataclasses

from bench.models.batch_ensemble import BatchEnsembleNet
from bench.models.registry import ArchSpec
from bench.options import choice, option
from methods.base import Method
from methods.deep_ensemble import MEMBERS_OPTION


@dataclasses.dataclass(frozen=True)
class BatchEnsemble(Method):
    name = "batch_ensemble"
    summary = "members share each weight matrix and differ by rank-1 factors (Wen et al. 2020)"
    joint = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    packable = True  # runs of one member count pack across seeds: W on a run axis (BatchEnsembleNet.stack)
    layers = "batch_ensemble"

    members: int = option(4, **MEMBERS_OPTION)
    rank1_init: str = choice("normal", ("normal", "random_sign"),
                             help="init of the rank-1 factors: normal N(1, 0.5^2) or random_sign +-1")

    @property
    def label(self) -> str:
        return "BatchEnsemble"

    def build_model(self, seed: int, member_ids: list[int], arch: ArchSpec) -> BatchEnsembleNet:
        # the architecture's BatchEnsemble layers (dense and convolutional): shared W, rank-1 factors
        return arch.build(seed, member_ids, layers=self.layers, rank1_init=self.rank1_init)
