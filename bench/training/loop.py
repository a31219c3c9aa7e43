"""The one training loop. Every method trains here; a method only supplies its loss terms.

All members of the stacked model train together in one batched computation. Each member keeps its
own initialisation and data order (its own generators), its own optimiser state (Adam is
element-wise, so one Adam over stacked tensors is M independent Adams) and its own early-stop
decision; a member that has stopped is frozen and no longer changes.

After every epoch each member's task loss on the validation split is measured (cheap: one forward
pass) and kept in the history; the method's ``checkpoint`` rule decides, per member, which epoch's
weights are restored at the end. The per-member state lives in ``bench.training.members``, the
pack's data and batches in ``bench.training.sources``.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Any

import torch
from tqdm.auto import tqdm

from bench.config import Protocol
from bench.data.loaders import Split
from bench.models.stacked import StackedNetwork
from bench.seeding import member_generator
from bench.training.graphs import CapturedSteps, capture_wanted
from bench.training.members import Members, member_abs_mean
from bench.training.precision import matmul_precision, step_autocast
from bench.training.resume import TrainingSnapshot
from bench.training.sources import PackData
from methods.base import Batch, Method, forward_in_chunks

# Subnormal floats are flushed to zero on the CPU, for every process that imports the training loop.
# Adam's moments of a weight whose gradient is always 0 (a pixel that is 0 in every image, a dead
# unit) decay into the subnormal range below 1.2e-38, where x86 arithmetic is about 15x slower
# (measured: fused Adam on 25 paper-MLP networks, 1.3 ms a step with normal moments, 19 ms with
# subnormal ones), which made Adam half of a paper-protocol pack's time. The flag is per thread and
# torch's worker threads copy it when they are created, so it is set here, at import, before any
# parallel work starts the thread pool (a process that ran torch's parallel work before importing
# bench flushes on its main thread only). Flushing treats numbers below 1.2e-38 as 0 wherever they
# enter a computation, so a result differs only where such a number would have contributed to it:
# an Adam update of that size is far below a weight's float32 resolution. Records made before
# dare-bench 0.3.0 were trained without it.
torch.set_flush_denormal(True)


class Diverged(Exception):
    """A loss or a parameter became non-finite."""

    def __init__(self, epoch: int):
        super().__init__(f"non-finite loss or parameters in epoch {epoch}")
        self.epoch = epoch


@dataclasses.dataclass
class TrainResult:
    model: StackedNetwork
    epochs_run: list[int]        # per member: epochs trained before stopping
    history: list[dict]          # per epoch and member: train loss and accuracy, validation loss, mean |theta|
    kept_epochs: list[int]       # per member: the epoch whose weights were kept (0: final weights)
    val_loss: list[float]        # per member: validation task loss of the kept weights (nan: no val)
    param_abs_mean: list[float]  # per member: mean |theta| of the kept weights
    seconds: float = 0.0
    nonfinite_epochs: list[int] = dataclasses.field(default_factory=list)  # per member; 0: stayed finite
    step: str = "eager"          # how its steps ran: eager, graph, or eager after a failed capture (why)
    resumed_epoch: int = 0       # the kept epoch its training went on from (bench.training.resume); 0: none


def train(method: Method, protocol: Protocol, data: Split, n_classes: int, seed: int,
          progress: bool = True, label: str = "", device: torch.device | str = "cpu",
          vectorize: bool = True, val: Split | None = None, step: str = "auto",
          snapshot: TrainingSnapshot | None = None) -> TrainResult:
    """Train all members of ``method`` on ``data``; ``val`` is the validation split that the
    per-epoch validation loss and the checkpoint rule use (without one, nothing is checkpointed:
    that a checkpoint rule has a validation split is ``Method.check_protocol``'s to check).

    vectorize=True trains the members together in one stacked computation; False trains them one
    after another (the reference path). Both give the same members for the same seed. A method with
    its own model (``build_model`` overridden: SWAG's moments, MIMO's heads, shared weights) always
    trains as one model: its members are not separate networks to stack.

    ``step``: auto or graph replay a capturable method's steps from CUDA graphs on a GPU; eager
    never does (bench.training.graphs). The arithmetic is the same.

    ``snapshot``: where the training state is kept every few minutes and resumed from
    (bench.training.resume); members trained one after another keep none.
    """
    start = time.perf_counter()
    device = torch.device(device)
    all_members = list(range(method.n_networks))
    # jointly trained members share one loss, and a method's own model is one module: they train together
    together = vectorize or method.joint or type(method).build_model is not Method.build_model
    groups = [all_members] if together else [[m] for m in all_members]
    pack_data = PackData.of([data], [val], [method.n_networks], device)  # one split: shared by any members
    parts = [_train_members([PackRun(method, seed, ids)], method, protocol, pack_data, n_classes, device,
                            progress, label if len(groups) == 1 else f"{label} member {ids[0]}", step,
                            snapshot if len(groups) == 1 else None)[0]
             for ids in groups]
    for part in parts:
        if isinstance(part, Diverged):
            raise part
    model = parts[0].model if len(groups) == 1 else StackedNetwork.stack([p.model for p in parts])
    history = sorted((h for p in parts for h in p.history), key=lambda h: (h["epoch"], h["member"]))
    before = snapshot.seconds_before if snapshot is not None else 0.0
    return TrainResult(model, [e for p in parts for e in p.epochs_run], history,
                       [e for p in parts for e in p.kept_epochs], [v for p in parts for v in p.val_loss],
                       [v for p in parts for v in p.param_abs_mean], before + time.perf_counter() - start,
                       [e for p in parts for e in p.nonfinite_epochs], parts[0].step, parts[0].resumed_epoch)


@dataclasses.dataclass(frozen=True)
class PackRun:
    """One run of a pack: its method (bound to its references), its seed and its members."""
    method: Method
    seed: int
    member_ids: list[int]


def train_pack(runs: list[tuple[Method, int]], packed: Method, protocol: Protocol, data: Split | list[Split],
               n_classes: int, progress: bool = True, label: str = "", device: torch.device | str = "cpu",
               val: Split | list[Split | None] | None = None, step: str = "auto",
               snapshot: TrainingSnapshot | None = None) -> list[TrainResult | Diverged]:
    """Train several runs (method, seed) of one protocol as one stacked computation: every network
    (run x member) on the member axis, each with its own init and data-order streams, optimiser
    state, early stop, checkpoint and non-finite handling, so each run's result equals its result
    trained alone. ``data`` and ``val``: one split for every run, or one per run (seeds whose splits
    differ, split_seed = run). ``packed`` is the runs' method with the options that differ between
    them as per-network tensors (``bench.training.packs.packed_method``). Returns per run its TrainResult, or
    the Diverged of a run whose loss or parameters went non-finite (the other runs go on untouched).
    ``seconds`` of each result is the pack's training time shared by network-epochs (a diverged
    run's share included in the whole)."""
    start = time.perf_counter()
    device = torch.device(device)
    pack = [PackRun(method, seed, list(range(method.n_networks))) for method, seed in runs]
    trains = data if isinstance(data, list) else [data] * len(pack)
    vals = val if isinstance(val, list) else [val] * len(pack)
    pack_data = PackData.of(trains, vals, [len(run.member_ids) for run in pack], device)
    results = _train_members(pack, packed, protocol, pack_data, n_classes, device, progress, label, step, snapshot)
    seconds = time.perf_counter() - start + (snapshot.seconds_before if snapshot is not None else 0.0)
    work = [sum(r.epochs_run) if isinstance(r, TrainResult) else r.epoch * len(run.member_ids)
            for run, r in zip(pack, results)]
    for result, share in zip(results, work):
        if isinstance(result, TrainResult):
            result.seconds = seconds * share / sum(work)
    return results


@torch.no_grad()
def validation_loss(method: Method, model: StackedNetwork, val: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Each member's task loss on the validation split (no dropout, no penalty): shape (M,). ``val``:
    x (N, D) and y (N,) shared by the members, or x (M, N, D) and y (M, N), each member its own.
    The trained model's own members are scored, not the method's predictive model."""
    x, y = val
    logits = forward_in_chunks(model, x)
    return method.task_loss(logits, y.expand(logits.shape[0], -1) if y.dim() == 1 else y)


@dataclasses.dataclass
class _Loop:
    """What every epoch of one group of members works with."""
    method: Method
    protocol: Protocol
    model: torch.nn.Module
    state: Any                       # the method's training state (Method.prepare)
    optimizer: torch.optim.Optimizer
    members: Members
    data: PackData
    order_gens: list[torch.Generator]  # per network; joint runs: per run (its members share batches); on the device
    order_rows: torch.Tensor | None    # each network's row of the batch orders (None: a row each, or one joint run)
    member_ids: list[int]
    device: torch.device
    label: str
    progress: bool
    loss_sum: torch.Tensor           # (M,) the epoch's task loss x rows, summed over steps, on the device
    correct: torch.Tensor            # (M,) the epoch's correct training predictions
    scheduled: bool = False          # the method sets the learning rate along the schedule (lr_factor)
    task_weight: Any = 1.0           # of each network's task loss: a joint run's is 1/M (a float, or per network)
    steps: Any = None                # how a step runs: eagerly (None) or replayed from a CUDA graph (graphs.CapturedSteps)


def _build(runs: list[PackRun], packed: Method, protocol: Protocol, in_features: int, n_classes: int,
           device: torch.device) -> tuple[torch.nn.Module, Any]:
    """The stacked model of the runs' members, each run's built from its own streams, and the
    methods' training state stacked likewise."""
    models, states = [], []
    arch = protocol.arch_spec.fitted(in_features, n_classes)
    for run in runs:
        torch.manual_seed(run.seed)  # dropout masks and any other draw a method makes during training
        model = run.method.build_model(run.seed, run.member_ids, arch).to(device)
        models.append(model)
        states.append(run.method.prepare(model, run.seed, run.member_ids))
    if len(runs) == 1:
        return models[0], states[0]
    return type(models[0]).stack(models), packed.stack_states(states)  # the model's own stack (SWAGNet's)


def _task_weight(runs: list[PackRun], packed: Method, device: torch.device) -> float | torch.Tensor:
    """The weight of each network's task loss in its objective: a joint run's one objective is
    (1/M) sum_m task_m + its term; an independent network's is its own task loss. A float where the
    pack holds one kind, else per network (a mixed pack with joint runs)."""
    if not any(run.method.joint for run in runs):
        return 1.0
    if packed.joint:  # the runs of a joint pack have equal member counts
        return 1.0 / len(runs[0].member_ids)
    return torch.tensor([1.0 / len(run.member_ids) if run.method.joint else 1.0
                         for run in runs for _ in run.member_ids], device=device)


def _train_members(runs: list[PackRun], packed: Method, protocol: Protocol, data: PackData, n_classes: int,
                   device: torch.device, progress: bool, label: str, step_mode: str = "auto",
                   snapshot: TrainingSnapshot | None = None) -> list[TrainResult | Diverged]:
    if packed.joint and len({len(run.member_ids) for run in runs}) > 1:
        raise ValueError("the joint runs of a pack need equal member counts")
    val = data.val
    model, state = _build(runs, packed, protocol, data.train.splits[0][0].shape[1], n_classes, device)
    params = list(model.parameters())
    scheduled = type(packed).lr_factor is not Method.lr_factor
    captured = capture_wanted(packed, device, step_mode)
    # a schedule on a GPU: the rate is a device tensor, filled before each step (eager or replayed alike)
    lr = torch.tensor(protocol.lr, device=device) if scheduled and device.type == "cuda" else protocol.lr
    # fused: one kernel for the whole update instead of a dozen element-wise passes (~20 % of a step);
    # capturable: its step count stays on the device, as a CUDA graph needs (the same kernel computes)
    optimizer = torch.optim.Adam(params, lr=lr, eps=protocol.adam_eps, fused=True, capturable=captured)
    optimizer._warned_capturable_if_run_uncaptured = True  # the warm-up steps run uncaptured on purpose
    # independent members each draw their own data order; a joint run's members share member 0's
    order_gens, order_rows = [], []
    for run in runs:
        if run.method.joint:
            order_gens.append(member_generator(run.seed, 0, "data_order", device))
            order_rows += [len(order_gens) - 1] * len(run.member_ids)
        else:
            for m in run.member_ids:
                order_rows.append(len(order_gens))
                order_gens.append(member_generator(run.seed, m, "data_order", device))
    run_of = [r for r, run in enumerate(runs) for _ in run.member_ids]
    members = Members(params, model.members, protocol.epochs, [run.method.joint for run in runs], device, run_of)
    one_each = len(order_gens) == members.count or (packed.joint and len(runs) == 1)
    zeros = torch.zeros(members.count, device=device)
    loop = _Loop(packed, protocol, model, state, optimizer, members, data, order_gens,
                 None if one_each else torch.tensor(order_rows, device=device),
                 [m for run in runs for m in run.member_ids], device, label, progress, zeros, zeros.clone(),
                 scheduled=scheduled, task_weight=_task_weight(runs, packed, device))
    if captured:
        loop.steps = CapturedSteps(lambda idx: _step(loop, idx), members)
    history, first = _epochs(loop, snapshot)
    members.restore()
    final_val = validation_loss(packed, model, val).tolist() if val is not None else [float("nan")] * members.count
    how = "eager" if loop.steps is None else loop.steps.description
    return _per_run(runs, model, members, history, final_val, how, first - 1)


def _epochs(loop: _Loop, snapshot: TrainingSnapshot | None) -> tuple[list[dict], int]:
    """Every epoch, from the first or from the one after the snapshot's, keeping the snapshot on its
    schedule. Returns (the history, the first epoch this call trained)."""
    protocol, label = loop.protocol, loop.label
    first, history = snapshot.restore(loop) if snapshot else (1, [])
    before, summary = (snapshot.seconds_before, f"resumed after epoch {first - 1}") if first > 1 else (0.0, "")
    if first > 1 and loop.progress:
        tqdm.write(f"{label or 'training'}: resuming after epoch {first - 1} from {snapshot.path}", file=sys.stderr)
    lines = EpochLines(label, protocol.epochs) if loop.progress and not sys.stderr.isatty() else None
    start = time.perf_counter()
    for epoch in range(first, protocol.epochs + 1):
        started = time.perf_counter()
        with matmul_precision(protocol.precision, loop.device):  # the steps only: validation stays fp32
            _train_epoch(loop, epoch, summary)
        trains_on, summary = _end_epoch(loop, epoch, history, started)
        if lines is not None:
            lines(epoch, summary, last=not trains_on or epoch == protocol.epochs)
        if not trains_on:
            break
        if snapshot is not None and epoch < protocol.epochs and snapshot.due():
            snapshot.save(loop, history, epoch, before + time.perf_counter() - start)
    return history, first


def _per_run(runs: list[PackRun], model, members: Members, history: list[dict],
             final_val: list[float], step: str, resumed_epoch: int = 0) -> list[TrainResult | Diverged]:
    """Each run's part of a pack's training: its TrainResult, or its Diverged."""
    # one host copy each
    abs_mean, kept = member_abs_mean(model, members.run_index, members.runs).tolist(), members.kept_epoch.tolist()
    epochs_run, nonfinite = members.stopped_epoch.tolist(), members.nonfinite_epoch.tolist()
    diverged = members.diverged_epoch.tolist()
    out: list[TrainResult | Diverged] = []
    for r in range(len(runs)):
        if diverged[r]:
            out.append(Diverged(diverged[r]))
            continue
        idx = [i for i, run in enumerate(members.run_of) if run == r]
        out.append(TrainResult(model if len(runs) == 1 else model.select(idx),
                               [epochs_run[i] for i in idx],
                               [{k: v for k, v in h.items() if k != "network"} for h in history
                                if members.run_of[h["network"]] == r],
                               [kept[i] for i in idx], [final_val[i] for i in idx],
                               [abs_mean[i] for i in idx], nonfinite_epochs=[nonfinite[i] for i in idx], step=step,
                               resumed_epoch=resumed_epoch))
    return out


class EpochLines:
    """Progress for a log file: tqdm's bars are off when stderr is no terminal (nohup, a batch job),
    so a pack would be silent for its whole training. Instead one plain line at most every
    ``every`` seconds, and one at the last epoch."""

    def __init__(self, label: str, epochs: int, every: float = 60.0):
        self.label, self.epochs, self.every = label or "training", epochs, every
        self.start = self.last = time.perf_counter()

    def __call__(self, epoch: int, summary: str, last: bool = False) -> None:
        now = time.perf_counter()
        if not last and now - self.last < self.every:
            return
        self.last = now
        tqdm.write(f"{self.label}: epoch {epoch}/{self.epochs} after {now - self.start:.0f} s"
                   + (f"; {summary}" if summary else ""), file=sys.stderr)


def _train_epoch(loop: _Loop, epoch: int, summary: str) -> None:
    """One pass over the training data, into the loop's loss and accuracy sums. Nothing is read
    back to the host: the batch orders are drawn on the device, and the progress bar shows the
    previous epoch's summary."""
    protocol, n = loop.protocol, len(loop.data.train)
    steps = math.ceil(n / protocol.batch_size)
    # each network's order from its own generator, on the device (CPU: the same stream as ever)
    perms = torch.stack([torch.randperm(n, generator=g, device=loop.device) for g in loop.order_gens])  # (orders, N)
    loop.loss_sum.zero_()
    loop.correct.zero_()
    bar = tqdm(range(steps), desc=f"{loop.label} epoch {epoch}/{protocol.epochs}", leave=False,
               disable=None if loop.progress else True, unit="step", postfix=summary or None)
    method, total = loop.method, protocol.epochs * steps
    for step in bar:
        idx = perms[:, step * protocol.batch_size:(step + 1) * protocol.batch_size]
        position = (epoch - 1) * steps + step
        if loop.scheduled:  # host code around the step (eager, or between graph replays)
            for group in loop.optimizer.param_groups:
                rate = protocol.lr * method.lr_factor(position, total)
                if torch.is_tensor(group["lr"]):
                    group["lr"].fill_(rate)
                else:
                    group["lr"] = rate
        if loop.steps is None:
            _step(loop, idx)
        else:
            loop.steps(idx)
        with torch.no_grad():
            method.after_step(loop.model, loop.state, position, total)
    bar.close()


def _step(loop: _Loop, idx: torch.Tensor) -> None:
    """One optimiser step on the batch ``idx`` (one row per data order, B), adding its task loss and correct
    predictions to the epoch's sums. Every tensor it writes outside autograd is updated in place, and
    it reads nothing back to the host, so it can be captured in a CUDA graph (the learning rate and
    ``after_step`` are set and run around it, by ``_train_epoch``)."""
    method, model, members = loop.method, loop.model, loop.members
    runs = len(loop.order_gens) if method.joint else 1
    # (M, B, D), (M, B): each member its own batch. Joint methods: each run's members see the run's
    # batch; one run's is one (B, D) batch that the model broadcasts to its members.
    if loop.order_rows is not None:
        idx = idx.index_select(0, loop.order_rows)
    xb, yb = loop.data.train.gather(idx)
    if method.joint and runs == 1:
        xb, yb = xb[0], yb.expand(members.count, -1)
    xb, yb = method.training_batch(xb, yb, loop.state)
    with step_autocast(loop.protocol.precision, loop.device):
        logits = method.training_forward(model, xb, loop.state).float()  # bf16: the forward pass in bfloat16, the loss in fp32
    task = method.task_loss(logits, yb)
    penalty = method.penalty(model, task, Batch(xb, yb, logits, loop.state, runs, len(loop.data.train)))
    # joint: each run one objective (1/M) sum_m task_m + term; independent: member m minimises task_m + penalty_m
    loss = task * loop.task_weight if penalty is None else task * loop.task_weight + penalty
    loop.optimizer.zero_grad(set_to_none=True)
    (loss * members.active).sum().backward()  # sum, not mean: member m's gradient is its own loss's
    loop.optimizer.step()
    members.hold_stopped()
    with torch.no_grad():
        rows = idx.shape[1]
        loop.loss_sum.add_(task.detach() * rows)
        hits = (logits.argmax(-1) == yb).sum(dim=1)
        # a method may train on more rows than the batch (MIMO's batch repetition): counted per batch row
        loop.correct.add_(hits if yb.shape[1] == rows else hits * (rows / yb.shape[1]))


def _end_epoch(loop: _Loop, epoch: int, history: list[dict], started: float) -> tuple[bool, str]:
    """After an epoch: stop non-finite members, checkpoint, record the history and stop the members
    that reached the early-stop accuracy, all as masks on the device; then the epoch's one read back
    to the host. Returns whether any member trains on, and the epoch's summary for the progress bar."""
    method, members, early_stop_acc, n = loop.method, loop.members, loop.protocol.early_stop_acc, len(loop.data.train)
    epoch_loss, epoch_acc = loop.loss_sum / n, loop.correct / n
    members.stop_nonfinite(epoch_loss, epoch)
    val_loss = validation_loss(method, loop.model, loop.data.val) if loop.data.val is not None else None
    if val_loss is not None and method.takes_checkpoints:
        members.checkpoint(method.checkpoint_saves, val_loss, epoch)
    recorded = members.active.clone()  # the members that trained this epoch and stayed finite
    if early_stop_acc is not None and not method.fixed_schedule:
        members.stop(members.active & (members.per_unit(epoch_acc) >= early_stop_acc), epoch)
    nan = torch.full_like(epoch_loss, float("nan"))
    loss, acc, val, abs_mean, kept, active = torch.stack([  # the epoch's one read back to the host
        epoch_loss, epoch_acc, nan if val_loss is None else val_loss,
        member_abs_mean(loop.model, members.run_index, members.runs),
        recorded.float(), members.active.float()]).tolist()
    for i, m in enumerate(loop.member_ids):
        if kept[i]:
            history.append({"network": i, "epoch": epoch, "member": m, "train_loss": loss[i], "train_acc": acc[i],
                            "val_loss": val[i], "param_abs_mean": abs_mean[i]})
    members.holding = not all(active)
    trained = [i for i, k in enumerate(kept) if k]
    if not trained:
        return any(active), ""
    # networks x epochs per second: a pack's throughput, comparable across pack sizes
    rate = len(trained) / max(time.perf_counter() - started, 1e-9)
    summary = (f"last epoch: loss={sum(loss[i] for i in trained) / len(trained):.3f}, "
               f"acc={sum(acc[i] for i in trained) / len(trained):.3f}, "
               f"networks={int(sum(active))}/{members.count} active, net_epochs_per_s={rate:.2f}")
    return any(active), summary
