"""Repulsive deep ensembles (D'Angelo & Fortuin, 2021), as in the DARE paper's baselines.

Members train jointly, with no trade-off parameter. d_ij is the squared Euclidean distance between
the full parameter vectors of members i and j (d_ii = 0); the bandwidth is gamma = log(M) /
median(d) over all M^2 pairs (the median heuristic, no gradient); k_m = sum_j exp(-gamma d_mj);
the term is (1/M) sum_m k_m / stopgrad(k_m): its value is always 1, its gradient that of
(1/M) sum_m log k_m, which pushes members apart in weight space.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch.autograd.function import once_differentiable

from bench.models.stacked import StackedNetwork
from bench.options import option
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


def repulsion(params: list[torch.Tensor], runs: int = 1) -> torch.Tensor:
    """Per member m: k_m / stopgrad(k_m) / M. ``params`` are stacked on the member axis (N, ...) and
    hold ``runs`` runs of M = N / runs members in consecutive groups; each run's term is its own.
    Returns (N,)."""
    return _Repulsion.apply(runs, *params)


class _Repulsion(torch.autograd.Function):
    """The term with its gradient written out: forward, a Gram product and a sum of squares per
    parameter tensor; backward, one (M, M) x (M, P) product per tensor on the parameters the forward
    centred, written straight into the gradient. Autograd of the same formula went through a
    concatenation of all parameters, the centring, squares, three products and the per-run splits'
    concatenations: a pack of 5 RDE runs trains 1.4x faster on the CPU written out
    (results/paper-fmnist-joint-packs/rde_speed.csv).

    With W_mj = g_m (-2 gamma) e_mj / (M k_m), e = exp(-gamma d) and g the incoming gradient, the
    gradient of sum_m g_m k_m / stopgrad(k_m) / M with respect to theta_a is
    sum_j (W_aj + W_ja) (theta_a - theta_j) = (L theta)_a, L = diag(S 1) - S, S = W + W^T. The
    products run run by run, so that a run's numbers do not depend on the pack around it."""

    @staticmethod
    def forward(ctx, runs: int, *params: torch.Tensor) -> torch.Tensor:
        members = params[0].shape[0] // runs
        if any(p.shape[0] != runs * members for p in params):  # shapes only: no host sync
            raise ValueError(f"repulsion: {runs} runs do not split parameters of {params[0].shape[0]} members evenly")
        grams, squares, centred_parts = [], [], []
        for r in range(runs):
            # ||a - b||^2 = |a|^2 + |b|^2 - 2 a.b from one (M, M) Gram product per parameter tensor
            # (no (M, M, P) tensor, no concatenation); centring first keeps the cancellation small
            part = [p.detach()[r * members:(r + 1) * members].flatten(1) for p in params]
            centred = [f - f.mean(dim=0, keepdim=True) for f in part]
            gram = centred[0] @ centred[0].T
            sq = centred[0].square().sum(dim=1)  # not gram's diagonal: a long sgemm sums less accurately
            for c in centred[1:]:
                gram = gram + c @ c.T
                sq = sq + c.square().sum(dim=1)
            grams.append(gram)
            squares.append(sq)
            centred_parts += centred  # run r's, tensor by tensor: the backward's products take them
        gram, sq = torch.stack(grams), torch.stack(squares)                   # (R, M, M), (R, M)
        d = (sq.unsqueeze(2) + sq.unsqueeze(1) - 2 * gram).clamp_min(0)
        d = d.masked_fill(torch.eye(members, dtype=torch.bool, device=d.device), 0.0)  # d_ii = 0 exactly
        # for odd M (M^2 odd) this is the paper code's sorted element M^2 // 2; for even M, the midpoint
        median = d.flatten(1).quantile(0.5, dim=1)                           # (R,)
        # gamma = 0 where all members coincide (median 0); a tensor where, not an if: no host sync per step
        gamma = torch.where(median > 0, math.log(members) / median.clamp_min(torch.finfo(d.dtype).tiny),
                            torch.zeros((), dtype=d.dtype, device=d.device))
        e = torch.exp(-gamma.view(runs, 1, 1) * d)
        k = e.sum(dim=2)                                                     # (R, M)
        ctx.save_for_backward(e, k, gamma, *centred_parts)
        ctx.shapes = [p.shape for p in params]
        return (k / k / members).flatten()  # 1/M each; nan where the parameters are, as k / stopgrad(k)

    @staticmethod
    @once_differentiable  # no double backward: the gradient is computed, not traced
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        e, k, gamma, *centred = ctx.saved_tensors
        runs, members = k.shape
        w = (grad.view(runs, members) * (-2 / members) / k).unsqueeze(2) * gamma.view(runs, 1, 1) * e  # W_mj
        s = (w + w.transpose(1, 2)).masked_fill(torch.eye(members, dtype=torch.bool, device=w.device), 0.0)
        laplacian = torch.diag_embed(s.sum(dim=2)) - s
        grads = []
        for t, shape in enumerate(ctx.shapes):
            out = torch.empty(shape, dtype=e.dtype, device=e.device)  # contiguous: its views below are views
            for r in range(runs):
                # L's rows sum to 0 only up to rounding: on the forward's centred parameters, members close
                # together keep their precision
                torch.mm(laplacian[r], centred[r * len(ctx.shapes) + t],
                         out=out.view(shape[0], -1)[r * members:(r + 1) * members])
            grads.append(out)
        return (None, *grads)


@dataclasses.dataclass(frozen=True)
class RDE(Method):
    name = "rde"
    summary = "joint members repelled in weight space by an RBF kernel (median-heuristic bandwidth)"
    joint = True
    packable = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)

    members: int = option(3, **MEMBERS_OPTION)

    @property
    def label(self) -> str:
        return "RDE"

    def penalty(self, model: StackedNetwork, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        return repulsion(list(model.parameters()), batch.runs)  # each run's members repel each other
