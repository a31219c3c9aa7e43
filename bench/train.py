"""The one training loop. Every method trains here; a method only supplies its loss terms.

All members of the stacked model train together in one batched computation. Each member keeps its
own initialisation and data order (its own generators), its own optimiser state (Adam is
element-wise, so one Adam over stacked tensors is M independent Adams) and its own early-stop
decision; a member that has stopped is frozen and no longer changes.

After every epoch each member's task loss on the validation split is measured (cheap: one forward
pass) and kept in the history; the method's ``checkpoint`` rule decides, per member, which epoch's
weights are restored at the end.
"""
from __future__ import annotations

import dataclasses
import math
import time

import torch
from tqdm.auto import tqdm

from bench.config import Protocol
from bench.data import Split
from bench.models import StackedMLP
from bench.seeding import member_generator
from methods.base import Batch, Method

POSTFIX_EVERY = 20  # steps between progress-bar updates (each costs a host sync)


class Diverged(Exception):
    """A loss or a parameter became non-finite."""

    def __init__(self, epoch: int):
        super().__init__(f"non-finite loss or parameters in epoch {epoch}")
        self.epoch = epoch


@dataclasses.dataclass
class TrainResult:
    model: StackedMLP
    epochs_run: list[int]        # per member: epochs trained before stopping
    history: list[dict]          # per epoch and member: train loss and accuracy, validation loss, mean |theta|
    kept_epochs: list[int]       # per member: the epoch whose weights were kept (0: final weights)
    val_loss: list[float]        # per member: validation task loss of the kept weights (nan: no val)
    param_abs_mean: list[float]  # per member: mean |theta| of the kept weights
    seconds: float = 0.0
    nonfinite_epochs: list[int] = dataclasses.field(default_factory=list)  # per member; 0: stayed finite


def train(method: Method, protocol: Protocol, data: Split, n_classes: int, seed: int,
          progress: bool = True, label: str = "", device: torch.device | str = "cpu",
          vectorize: bool = True, val: Split | None = None) -> TrainResult:
    """Train all members of ``method`` on ``data``; ``val`` is the validation split that the
    per-epoch validation loss and the checkpoint rule use.

    vectorize=True trains the members together in one stacked computation; False trains them one
    after another (the reference path). Both give the same members for the same seed.
    """
    if method.checkpoint != "none" and (val is None or len(val) == 0):
        raise ValueError(f"checkpoint={method.checkpoint} needs a validation split")
    start = time.perf_counter()
    device = torch.device(device)
    x, y = data.x.to(device), data.y.to(device)
    val_xy = None if val is None or len(val) == 0 else (val.x.to(device), val.y.to(device))
    all_members = list(range(method.n_networks))
    # jointly trained members share one loss, so they always train together
    groups = [all_members] if vectorize or method.joint else [[m] for m in all_members]
    parts = [_train_members(method, protocol, x, y, val_xy, n_classes, seed, ids, device, progress,
                            label if len(groups) == 1 else f"{label} member {ids[0]}") for ids in groups]
    model = parts[0].model if len(groups) == 1 else StackedMLP.stack([p.model for p in parts])
    history = sorted((h for p in parts for h in p.history), key=lambda h: (h["epoch"], h["member"]))
    return TrainResult(model, [e for p in parts for e in p.epochs_run], history,
                       [e for p in parts for e in p.kept_epochs], [v for p in parts for v in p.val_loss],
                       [v for p in parts for v in p.param_abs_mean], time.perf_counter() - start,
                       [e for p in parts for e in p.nonfinite_epochs])


def per_member(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a where the member's mask is set, else b: mask (M,), a and b stacked on the member axis."""
    return torch.where(mask.view(-1, *[1] * (a.dim() - 1)), a, b)


@torch.no_grad()
def validation_loss(method: Method, model: StackedMLP, val: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Each member's task loss on the validation split (no dropout, no penalty): shape (M,)."""
    x, y = val
    logits = method.logits(model, x)
    return method.task_loss(logits, y.expand(logits.shape[0], -1))


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
    total = torch.zeros(members, device=next(model.parameters()).device)
    count = 0
    for p in model.parameters():
        if has_member_axis(p, members):
            total += p.abs().reshape(members, -1).sum(dim=1)
            count += p[0].numel()
        else:
            total += p.abs().sum()
            count += p.numel()
    return total / count


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


def _train_members(method: Method, protocol: Protocol, x: torch.Tensor, y: torch.Tensor,
                   val: tuple[torch.Tensor, torch.Tensor] | None, n_classes: int, seed: int,
                   member_ids: list[int], device: torch.device, progress: bool, label: str) -> TrainResult:
    torch.manual_seed(seed)  # dropout masks and any other draw a method makes during training
    model = method.build_model(seed, member_ids, x.shape[1], protocol.hidden, n_classes, protocol.init).to(device)
    state = method.prepare(model, seed, member_ids)
    members, n = model.members, len(y)
    # joint: one objective (1/M) sum_m task_m + term; independent: member m minimises task_m + penalty_m
    task_weight = 1.0 / members if method.joint else 1.0
    # jointly trained members are one model: checkpointed, stopped and frozen together, on member means
    unit = method.joint

    def per_unit(decision: torch.Tensor) -> torch.Tensor:
        return decision.float().mean().expand(members) if unit else decision

    def choose(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.all(), a, b) if unit else per_member(mask, a, b)
    params = list(model.parameters())
    # fused: one kernel for the whole update instead of a dozen element-wise passes (~20 % of a step)
    optimizer = torch.optim.Adam(params, lr=protocol.lr, eps=protocol.adam_eps, fused=True)
    saved: list[torch.Tensor] | None = None  # per-member checkpoint (members not yet saved hold junk)
    kept_epoch = torch.zeros(members, dtype=torch.long, device=device)
    best_val = torch.full((members,), float("inf"), device=device)
    # independent members each draw their own data order; joint ones share member 0's
    order_gens = [member_generator(seed, m, "data_order") for m in ([0] if method.joint else member_ids)]
    active = torch.ones(members, dtype=torch.bool, device=device)
    frozen: list[torch.Tensor] | None = None  # parameter snapshot holding stopped members' values
    epochs_run = [protocol.epochs] * members
    nonfinite_epochs = [0] * members  # per member: the epoch its loss or weights went non-finite (0: never)
    history: list[dict] = []
    steps = math.ceil(n / protocol.batch_size)

    for epoch in range(1, protocol.epochs + 1):
        # index permutations are drawn on the CPU (same stream on every device), moved once per epoch
        perms = torch.stack([torch.randperm(n, generator=g) for g in order_gens]).to(device)  # (M or 1, N)
        loss_sum = torch.zeros(members, device=device)
        correct = torch.zeros(members, device=device)
        bar = tqdm(range(steps), desc=f"{label} epoch {epoch}/{protocol.epochs}", leave=False,
                   disable=None if progress else True, unit="step")
        for step in bar:
            idx = perms[:, step * protocol.batch_size:(step + 1) * protocol.batch_size]
            # (M, B, D), (M, B): each member its own batch; index_select is ~3x faster than x[idx].
            # Joint methods: one (B, D) batch that every member sees (the model broadcasts it).
            flat = idx.reshape(-1)
            xb = x.index_select(0, flat).view(*idx.shape, -1)
            yb = y.index_select(0, flat).view(idx.shape)
            if method.joint:
                xb, yb = xb[0], yb.expand(members, -1)
            logits = model(xb, dropout=True)
            task = method.task_loss(logits, yb)
            penalty = method.penalty(model, task, Batch(xb, yb, logits, state))
            loss = task * task_weight if penalty is None else task * task_weight + penalty
            optimizer.zero_grad(set_to_none=True)
            (loss * active).sum().backward()  # sum, not mean: member m's gradient is its own loss's
            optimizer.step()
            if frozen is not None:
                with torch.no_grad():
                    for p, keep in zip(params, frozen):
                        p.copy_(choose(active, p, keep))
            with torch.no_grad():
                loss_sum += task.detach() * idx.shape[1]
                correct += (logits.argmax(-1) == yb).sum(dim=1)
            if not bar.disable and (step % POSTFIX_EVERY == 0 or step == steps - 1):
                seen = min((step + 1) * protocol.batch_size, n)
                bar.set_postfix(loss=f"{float((loss_sum / seen)[active].mean()):.3f}",
                                acc=f"{float((correct / seen)[active].mean()):.3f}",
                                members=f"{int(active.sum())}/{members} active")
        bar.close()

        epoch_loss, epoch_acc = loss_sum / n, correct / n
        broken = active & ~(torch.isfinite(epoch_loss) & finite_members(params, members))
        if bool(broken.any()):
            # a member whose loss or weights went non-finite keeps its checkpoint and stops, when it
            # has one (Keras' restore-on-checkpoint does the same); without one the run diverged
            if unit or saved is None or not bool((kept_epoch[broken] > 0).all()):
                raise Diverged(epoch)
            with torch.no_grad():
                for p, keep in zip(params, saved):
                    p.copy_(per_member(broken, keep, p))
            for m in torch.nonzero(broken).flatten().tolist():
                epochs_run[m] = nonfinite_epochs[m] = epoch
            active &= ~broken
            frozen = [p.detach().clone() for p in params]
            if not active.any():
                break
        val_loss = validation_loss(method, model, val) if val is not None else None
        abs_mean = member_abs_mean(model).tolist()
        if val_loss is not None and method.checkpoint != "none":
            decide = per_unit(val_loss)
            save = checkpoint_mask(method.checkpoint, decide, best_val, method.checkpoint_threshold) & active
            if saved is None:
                saved = [p.detach().clone() for p in params]
            with torch.no_grad():
                for p, keep in zip(params, saved):
                    keep.copy_(choose(save, p, keep))
            kept_epoch = torch.where(save, epoch, kept_epoch)
            best_val = torch.where(save, torch.minimum(best_val, decide), best_val)
        for i, m in enumerate(member_ids):
            if active[i]:
                history.append({"epoch": epoch, "member": m, "train_loss": float(epoch_loss[i]),
                                "train_acc": float(epoch_acc[i]),
                                "val_loss": float(val_loss[i]) if val_loss is not None else float("nan"),
                                "param_abs_mean": abs_mean[i]})
        if protocol.early_stop_acc is not None:
            stopping = active & (per_unit(epoch_acc) >= protocol.early_stop_acc)
            if stopping.any():
                for m in torch.nonzero(stopping).flatten().tolist():
                    epochs_run[m] = epoch
                active &= ~stopping
                frozen = [p.detach().clone() for p in params]
                if not active.any():
                    break

    if saved is not None:  # restore each member's checkpoint; members never saved keep their final weights
        restore = kept_epoch > 0
        with torch.no_grad():
            for p, keep in zip(params, saved):
                p.copy_(choose(restore, keep, p))
    final_val = validation_loss(method, model, val).tolist() if val is not None else [float("nan")] * members
    return TrainResult(model, epochs_run, history, kept_epoch.tolist(), final_val, member_abs_mean(model).tolist(),
                       nonfinite_epochs=nonfinite_epochs)
