"""Per-member training state of a stacked model (``bench.training.loop`` trains all members at once).

Each member of the member axis stops, checkpoints and restores on its own, so the state is kept as
masks over that axis: which members still train, which ones take their current weights, which went
non-finite. Jointly trained members are one unit and decide together.
"""
from __future__ import annotations

from typing import Callable

import torch


def per_member(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a where the member's mask is set, else b: mask (M,), a and b stacked on the member axis."""
    return torch.where(mask.view(-1, *[1] * (a.dim() - 1)), a, b)


def leading_axis(p: torch.Tensor, members: int, runs: int = 1) -> str:
    """How parameter ``p`` of a model of ``members`` members (of ``runs`` runs, a pack) is stacked:
    ``member``, one row per member; ``run``, one row per run, shared by the run's members (BatchEnsemble's
    weight matrices, MIMO's network); ``whole``, no such axis (one run's parameter that all its
    members share). When each run has one member the two axes are one."""
    if p.dim() >= 1 and p.shape[0] == members:
        return "member"
    if p.dim() >= 1 and p.shape[0] == runs:
        return "run"
    if runs > 1:
        raise ValueError(f"a pack of {runs} runs ({members} members) has a parameter of shape {tuple(p.shape)}: "
                         "a packed model stacks every parameter by member or by run")
    return "whole"


@torch.no_grad()
def finite_members(params: list[torch.Tensor], run_index: torch.Tensor, runs: int) -> torch.Tensor:
    """(M,) bool: every parameter of the member is finite. A parameter on the run axis (``run_index``:
    each member's run) counts for its run's members, one without an axis for every member. Computed on
    the device: no host read."""
    members = len(run_index)
    ok = torch.ones(members, dtype=torch.bool, device=params[0].device)
    for p in params:
        axis = leading_axis(p, members, runs)
        if axis == "member":
            ok &= torch.isfinite(p).reshape(members, -1).all(dim=1)
        elif axis == "run":
            ok &= torch.isfinite(p).reshape(runs, -1).all(dim=1).index_select(0, run_index)
        else:
            ok &= torch.isfinite(p).all()
    return ok


@torch.no_grad()
def member_abs_mean(model: torch.nn.Module, run_index: torch.Tensor | None = None, runs: int = 1) -> torch.Tensor:
    """Mean |theta| of each member's parameters, shape (M,): what DARE's anti-regularizer inflates.
    A parameter with a leading member axis counts for its member; one on the run axis of a pack
    (``run_index``: each member's run) for its run's members; any other (a shared weight of one run,
    as in BatchEnsemble) for every member."""
    members = model.members
    device = next(model.parameters()).device
    if run_index is None:
        run_index = torch.zeros(members, dtype=torch.long, device=device)
    # float64 sums rounded to float32: the same value whatever the member count (a float32 sum's
    # rounding depends on how the reduction is split over threads, which depends on the count)
    total = torch.zeros(members, dtype=torch.float64, device=device)
    count = 0
    for p in model.parameters():
        axis = leading_axis(p, members, runs)
        if axis == "member":
            total += p.abs().reshape(members, -1).sum(dim=1, dtype=torch.float64)
            count += p[0].numel()
        elif axis == "run":
            total += p.abs().reshape(runs, -1).sum(dim=1, dtype=torch.float64).index_select(0, run_index)
            count += p[0].numel()
        else:
            total += p.abs().sum(dtype=torch.float64)
            count += p.numel()
    return (total / count).float()


class Members:
    """The training state of one group of members, over the stacked parameters ``params``: which
    members still train (``active``), when each stopped, the frozen values of the stopped ones, and
    each member's checkpoint (the saved weights, their epoch and the best validation loss so far).

    Every decision is a mask on the device, so an epoch runs without reading anything back to the
    host; the loop reads the epoch's outcome once, at its end (``bench.training.loop``), and tells
    the members whether any of them has stopped (``holding``). Jointly trained members (``unit``, per
    run) are one model: checkpointed, stopped and frozen together, on member means.
    """

    def __init__(self, params: list[torch.Tensor], count: int, epochs: int, unit: bool | list[bool],
                 device: torch.device, run_of: list[int] | None = None):
        self.params, self.count = params, count
        self.run_of = run_of or [0] * count  # the run each member belongs to (a pack holds several)
        # each run's members: consecutive on the member axis (a unit is one run's members)
        self.run_bounds = [(self.run_of.index(r), len(self.run_of) - self.run_of[::-1].index(r))
                           for r in dict.fromkeys(self.run_of)]
        self.runs = len(self.run_bounds)
        self.run_index = torch.tensor(self.run_of, device=device)
        self.run_first = torch.tensor([a for a, _ in self.run_bounds], device=device)
        # per run: whether its members are one unit (a joint run; a mixed pack holds both kinds)
        self.units = [unit] * self.runs if isinstance(unit, bool) else list(unit)
        self.unit_member = torch.tensor([self.units[r] for r in self.run_of], device=device)
        self.active = torch.ones(count, dtype=torch.bool, device=device)
        self.stopped_epoch = torch.full((count,), epochs, dtype=torch.long, device=device)  # epochs trained
        self.nonfinite_epoch = torch.zeros(count, dtype=torch.long, device=device)  # 0: stayed finite
        # per run: the epoch it went non-finite without a checkpoint (0: never)
        self.diverged_epoch = torch.zeros(len(self.run_bounds), dtype=torch.long, device=device)
        self.holding = False  # a host flag: some member has stopped, so steps restore the frozen values
        self.frozen: list[torch.Tensor] | None = None  # the stopped members' values (others hold junk)
        self.saved: list[torch.Tensor] | None = None   # per-member checkpoint (members not yet saved hold junk)
        self.kept_epoch = torch.zeros(count, dtype=torch.long, device=device)
        self.best_val = torch.full((count,), float("inf"), device=device)

    def per_unit(self, decision: torch.Tensor) -> torch.Tensor:
        """A per-member quantity as the members decide on it: its mean over the run's members when
        they are one unit."""
        if not any(self.units):
            return decision
        return torch.cat([decision[a:b].float().mean().expand(b - a) if unit else decision[a:b]
                          for (a, b), unit in zip(self.run_bounds, self.units)])

    def decided(self, mask: torch.Tensor) -> torch.Tensor:
        """A per-member mask as the members act on it: a unit run's members all in it, if every one
        of them is, or none."""
        if not any(self.units):
            return mask
        outside = torch.zeros(self.runs, dtype=torch.long, device=mask.device).index_add_(
            0, self.run_index, (~mask).long())                      # per run: its members not in the mask
        return torch.where(self.unit_member, (outside == 0).index_select(0, self.run_index), mask)

    def choose(self, decided: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a for the members in ``decided`` (a mask made by ``decided``), b for the others; a and b
        stacked as one parameter (``leading_axis``: on the member axis, or a unit's on the run axis)."""
        axis = leading_axis(a, self.count, self.runs)
        if axis == "member":
            return per_member(decided, a, b)
        per_run = decided.index_select(0, self.run_first)  # a unit's: its members decided alike
        return per_member(per_run, a, b) if axis == "run" else torch.where(per_run[0], a, b)  # whole: one run

    @torch.no_grad()
    def stop(self, mask: torch.Tensor, epoch: int, nonfinite: bool = False) -> None:
        """Stop the active members in ``mask`` after ``epoch`` and freeze their current weights."""
        newly = mask & self.active
        self.stopped_epoch = torch.where(newly, epoch, self.stopped_epoch)
        if nonfinite:
            self.nonfinite_epoch = torch.where(newly, epoch, self.nonfinite_epoch)
        self.active &= ~newly  # in place: a captured step reads this very tensor
        if self.frozen is None:
            self.frozen = [p.detach().clone() for p in self.params]
        else:
            decided = self.decided(newly)
            for p, keep in zip(self.params, self.frozen):
                keep.copy_(self.choose(decided, p, keep))

    @torch.no_grad()
    def hold_stopped(self) -> None:
        """Undo what an optimiser step did to the stopped members (Adam moves them on its momentum)."""
        if self.holding:
            decided = self.decided(self.active)
            for p, keep in zip(self.params, self.frozen):
                p.copy_(self.choose(decided, p, keep))

    @torch.no_grad()
    def stop_nonfinite(self, epoch_loss: torch.Tensor, epoch: int) -> None:
        """Stop the members whose loss or weights went non-finite, back on their checkpoint (Keras'
        restore-on-checkpoint does the same). A run with such a member that has none (or whose
        members are one unit) diverged: all its members stop, and the other runs go on."""
        broken = self.active & ~(torch.isfinite(epoch_loss) & finite_members(self.params, self.run_index, self.runs))
        # (a unit's members restore only as a whole: never)
        saved = (self.kept_epoch > 0) & ~self.unit_member if self.saved is not None else torch.zeros_like(broken)
        lost_run = torch.zeros_like(self.diverged_epoch).index_add_(0, self.run_index, (broken & ~saved).long()) > 0
        self.diverged_epoch = torch.where(lost_run & (self.diverged_epoch == 0), epoch, self.diverged_epoch)
        in_lost = lost_run[self.run_index]
        restore = broken & ~in_lost  # only members with a checkpoint: the others' runs are lost
        if self.saved is not None and not all(self.units):
            for p, keep in zip(self.params, self.saved):
                p.copy_(self.choose(restore, keep, p))  # (restore holds no unit run's member)
        self.stop(restore, epoch, nonfinite=True)
        self.stop(in_lost, epoch)

    @torch.no_grad()
    def checkpoint(self, saves: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], val_loss: torch.Tensor,
                   epoch: int) -> None:
        """Save the current weights of the active members that ``saves(val_loss, best so far)`` picks
        after ``epoch`` (``Method.checkpoint_saves``: the method's rule, per network)."""
        decide = self.per_unit(val_loss)
        save = saves(decide, self.best_val) & self.active
        if self.saved is None:
            self.saved = [p.detach().clone() for p in self.params]
        decided = self.decided(save)
        for p, keep in zip(self.params, self.saved):
            keep.copy_(self.choose(decided, p, keep))
        self.kept_epoch = torch.where(save, epoch, self.kept_epoch)
        self.best_val = torch.where(save, torch.minimum(self.best_val, decide), self.best_val)

    @torch.no_grad()
    def restore(self) -> None:
        """Put back each member's checkpoint; members never saved keep their final weights."""
        if self.saved is not None:
            restore = self.decided(self.kept_epoch > 0)
            for p, keep in zip(self.params, self.saved):
                p.copy_(self.choose(restore, keep, p))
