"""Per-member training state of a stacked model (``bench.training.loop`` trains all members at once).

Each member of the member axis stops, checkpoints and restores on its own, so the state is kept as
masks over that axis: which members still train, which ones take their current weights, which went
non-finite. Jointly trained members are one unit and decide together.
"""
from __future__ import annotations

import torch


def per_member(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a where the member's mask is set, else b: mask (M,), a and b stacked on the member axis."""
    return torch.where(mask.view(-1, *[1] * (a.dim() - 1)), a, b)


def has_member_axis(p: torch.Tensor, members: int) -> bool:
    """Whether ``p`` is stacked on a leading member axis; any other parameter (a shared weight, as in
    BatchEnsemble) belongs to every member."""
    return p.dim() >= 1 and p.shape[0] == members


@torch.no_grad()
def finite_members(params: list[torch.Tensor], members: int) -> torch.Tensor:
    """(M,) bool: every parameter of the member is finite. A parameter without a member axis (shared)
    counts for every member."""
    ok = torch.ones(members, dtype=torch.bool, device=params[0].device)
    for p in params:
        if has_member_axis(p, members):
            ok &= torch.isfinite(p).reshape(members, -1).all(dim=1)
        else:
            ok &= bool(torch.isfinite(p).all())
    return ok


@torch.no_grad()
def member_abs_mean(model: torch.nn.Module) -> torch.Tensor:
    """Mean |theta| of each member's parameters, shape (M,): what DARE's anti-regularizer inflates.
    A parameter with a leading member axis counts for its member; any other (a shared weight, as in
    BatchEnsemble) counts for every member."""
    members = model.members
    # float64 sums rounded to float32: the same value whatever the member count (a float32 sum's
    # rounding depends on how the reduction is split over threads, which depends on the count)
    total = torch.zeros(members, dtype=torch.float64, device=next(model.parameters()).device)
    count = 0
    for p in model.parameters():
        if has_member_axis(p, members):
            total += p.abs().reshape(members, -1).sum(dim=1, dtype=torch.float64)
            count += p[0].numel()
        else:
            total += p.abs().sum(dtype=torch.float64)
            count += p.numel()
    return (total / count).float()


def checkpoint_mask(rule: str, val_loss: torch.Tensor, best_so_far: torch.Tensor,
                    threshold: float | None) -> torch.Tensor:
    """Which members' current weights replace their saved checkpoint after this epoch.

    best: strictly lower than the best so far (ties keep the earlier epoch);
    last_below_threshold: validation loss <= threshold (a later qualifying epoch replaces an earlier one).
    """
    if rule == "best":
        return val_loss < best_so_far
    if rule == "last_below_threshold":
        return val_loss <= threshold
    return torch.zeros_like(val_loss, dtype=torch.bool)


class Members:
    """The training state of one group of members, over the stacked parameters ``params``: which
    members still train (``active``), when each stopped, the frozen values of the stopped ones, and
    each member's checkpoint (the saved weights, their epoch and the best validation loss so far).

    Jointly trained members (``unit``) are one model: checkpointed, stopped and frozen together, on
    member means.
    """

    def __init__(self, params: list[torch.Tensor], count: int, epochs: int, unit: bool, device: torch.device,
                 run_of: list[int] | None = None):
        self.params, self.count, self.unit = params, count, unit
        self.run_of = run_of or [0] * count  # the run each member belongs to (a pack holds several)
        # each run's members: consecutive on the member axis (a unit is one run's members)
        self.run_bounds = [(self.run_of.index(r), len(self.run_of) - self.run_of[::-1].index(r))
                           for r in dict.fromkeys(self.run_of)]
        self.diverged: dict[int, int] = {}    # run -> the epoch it went non-finite without a checkpoint
        self.active = torch.ones(count, dtype=torch.bool, device=device)
        self.epochs_run = [epochs] * count
        self.nonfinite_epochs = [0] * count  # per member: the epoch its loss or weights went non-finite (0: never)
        self.frozen: list[torch.Tensor] | None = None  # parameter snapshot holding stopped members' values
        self.saved: list[torch.Tensor] | None = None   # per-member checkpoint (members not yet saved hold junk)
        self.kept_epoch = torch.zeros(count, dtype=torch.long, device=device)
        self.best_val = torch.full((count,), float("inf"), device=device)

    def per_unit(self, decision: torch.Tensor) -> torch.Tensor:
        """A per-member quantity as the members decide on it: its mean over the run's members when
        they are one unit."""
        if not self.unit:
            return decision
        return torch.cat([decision[a:b].float().mean().expand(b - a) for a, b in self.run_bounds])

    def choose(self, mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a for the members in ``mask`` (a unit: all of the run's members or none), b for the others."""
        if not self.unit:
            return per_member(mask, a, b)
        if len(self.run_bounds) == 1:
            return torch.where(mask.all(), a, b)
        return per_member(torch.cat([mask[i:j].all().expand(j - i) for i, j in self.run_bounds]), a, b)

    @property
    def all_stopped(self) -> bool:
        return not bool(self.active.any())

    def stop(self, mask: torch.Tensor, epoch: int, nonfinite: bool = False) -> None:
        """Stop the members in ``mask`` after ``epoch`` and freeze their current weights."""
        stopped = torch.nonzero(mask).flatten().tolist()
        if not stopped:
            return
        for m in stopped:
            self.epochs_run[m] = epoch
            if nonfinite:
                self.nonfinite_epochs[m] = epoch
        self.active &= ~mask
        self.frozen = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def hold_stopped(self) -> None:
        """Undo what an optimiser step did to the stopped members (Adam moves them on its momentum)."""
        if self.frozen is not None:
            for p, keep in zip(self.params, self.frozen):
                p.copy_(self.choose(self.active, p, keep))

    def stop_nonfinite(self, epoch_loss: torch.Tensor, epoch: int) -> None:
        """Stop the members whose loss or weights went non-finite, back on their checkpoint (Keras'
        restore-on-checkpoint does the same). A run with such a member that has none (or whose
        members are one unit) diverged: all its members stop, and the other runs go on."""
        broken = self.active & ~(torch.isfinite(epoch_loss) & finite_members(self.params, self.count))
        if not bool(broken.any()):
            return
        saved = self.kept_epoch > 0 if self.saved is not None and not self.unit else torch.zeros_like(broken)
        lost = {self.run_of[m] for m in torch.nonzero(broken & ~saved).flatten().tolist()}
        in_lost = torch.tensor([r in lost for r in self.run_of], device=broken.device)
        for run in lost:
            self.diverged[run] = epoch
        restore = broken & ~in_lost
        if bool(restore.any()):
            with torch.no_grad():
                for p, keep in zip(self.params, self.saved):
                    p.copy_(per_member(restore, keep, p))
            self.stop(restore, epoch, nonfinite=True)
        self.stop(self.active & in_lost, epoch)

    @torch.no_grad()
    def checkpoint(self, rule: str, threshold: float | None, val_loss: torch.Tensor, epoch: int) -> None:
        """Save the current weights of the active members that ``rule`` picks after ``epoch``."""
        decide = self.per_unit(val_loss)
        save = checkpoint_mask(rule, decide, self.best_val, threshold) & self.active
        if self.saved is None:
            self.saved = [p.detach().clone() for p in self.params]
        for p, keep in zip(self.params, self.saved):
            keep.copy_(self.choose(save, p, keep))
        self.kept_epoch = torch.where(save, epoch, self.kept_epoch)
        self.best_val = torch.where(save, torch.minimum(self.best_val, decide), self.best_val)

    @torch.no_grad()
    def restore(self) -> None:
        """Put back each member's checkpoint; members never saved keep their final weights."""
        if self.saved is not None:
            restore = self.kept_epoch > 0
            for p, keep in zip(self.params, self.saved):
                p.copy_(self.choose(restore, keep, p))
