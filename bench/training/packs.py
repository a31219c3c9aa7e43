"""Packs: runs of a grid that train together as one stacked computation.

Runs pack together when their method is ``packable`` (no draw from torch's global generator while
training; a joint method's coupling computed run by run), and they share the method, the protocol
and every option but the seed, the member count (joint methods: equal member counts) and the
method's ``pack_options`` (which become per-network tensors, e.g. DARE's threshold). Seeds whose
train/validation splits differ (split_seed = run) pack too: each network gathers its batches from
its own run's split. Runs of methods that ``mixes`` share a pack by protocol alone (a MixedPack),
each method's runs one part of it. Every network (run x member; a joint run's members as one
unit) keeps its own init and data-order streams,
optimiser state, early stop, checkpoint and non-finite handling, so packing changes speed, not the
computation: ``tests/training/test_packs.py`` checks it bitwise on small networks;
on full-size networks two CPU kernels round a packed network's values differently (docs/usage.md,
"Packs", gives the measured bound).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import torch

from bench.config import Execution, Protocol, RunConfig
from bench.models.stacked import MemberSlice
from methods import Method
from methods.base import Batch

# --pack-size auto never packs more networks than this. On the CPU, measured on the paper MLP (2
# threads, one step of 5-member runs): a deep ensemble trains 6.5 network-epochs/s in packs of 25
# and 50 networks and 4.6 in a pack of 125; AnchorNet 3.1, 3.0 and 2.1 (its penalty's element-wise
# passes over every parameter outgrow the caches). On an H200 a paper-MLP step costs 2-3 ms up to
# ~100 networks (launch-bound); 400 networks beat 200 on both MLPs, and 800 against 400 gained 8-9 %
# on the paper MLP but went either way on the seed MLP (results/gpu-h200).
MAX_AUTO_NETWORKS = {"cpu": 50, "cuda": 400}
AUTO_MEMORY_SHARE = 0.25     # of the device's memory


def mixes(method: Method) -> bool:
    """Whether runs of this method may share a pack with runs of other methods (a mixed pack): a
    packable method on the stacked MLP whose step is the loop's own (its task loss and penalty are
    computed on its own networks' part of the pack: ``MixedPack``). A joint method's runs keep their
    unit in it: shared batches, one objective, one stop."""
    cls = type(method)
    return (cls.packs_runs() and not cls.fixed_schedule and method.dropout_rate == 0
            and all(getattr(cls, hook) is getattr(Method, hook)
                    for hook in ("build_model", "training_batch", "training_forward", "lr_factor", "after_step")))


def loose_options(method: Method) -> set[str]:
    """The options that may differ between the runs of one method in a pack: its pack options, and
    its member count where members are its networks (not a joint method's unit, not snapshot
    ensembles' cycles)."""
    networks = not method.joint and method.n_networks == getattr(method, "members", None)
    return {*method.pack_options} | ({"members"} if networks else set())


def part_key(config: RunConfig) -> tuple | None:
    """What runs of one method must share to pack together; None for a run that trains alone."""
    method = config.built_method
    if not method.packs_runs():
        return None
    loose = loose_options(method)
    fixed = {k: v for k, v in config.method_options.items() if k not in loose}
    unset = tuple(k for k in method.pack_options if config.method_options.get(k) is None)
    return config.method, json.dumps(fixed, sort_keys=True, default=str), unset, config.protocol


def pack_key(config: RunConfig) -> tuple | None:
    """What runs must share to pack together (None: the run trains alone): runs of methods that mix
    need only the protocol (the architecture and the batch schedule); others, their ``part_key``."""
    key = part_key(config)
    return ("mixed", config.protocol) if key is not None and mixes(config.built_method) else key


def make_packs(configs: list[RunConfig], max_networks: int) -> list[list[RunConfig]]:
    """The configs in packs of at most ``max_networks`` networks (a larger run alone), in the order
    of each pack's first run."""
    groups: dict[Any, list[RunConfig]] = {}
    for i, config in enumerate(configs):
        key = pack_key(config) if max_networks > 1 else None
        groups.setdefault(("alone", i) if key is None else key, []).append(config)
    packs = []
    for group in groups.values():
        parts: dict[Any, list[RunConfig]] = {}  # a mixed pack: each method's runs together (MixedPack's parts)
        for config in group:
            parts.setdefault(part_key(config), []).append(config)
        group = [config for part in parts.values() for config in part]
        pack, size = [], 0
        for config in group:
            n = config.built_method.n_networks
            if pack and size + n > max_networks:
                packs.append(pack)
                pack, size = [], 0
            pack.append(config)
            size += n
        packs.append(pack)
    return packs


def packed_method(methods: list[Method], device: torch.device | str = "cpu") -> Method:
    """The runs' method for the training loop: the first run's, with each pack option whose value
    differs between the runs as a per-network float32 tensor; for the runs of several methods (a
    mixed pack, each method's runs consecutive), a MixedPack of each method's runs so made."""
    parts: list[list[Method]] = []
    for method in methods:
        if parts and _same_part(parts[-1][0], method):
            parts[-1].append(method)
        else:
            parts.append([method])
    if len(parts) > 1:
        bounds = [0]
        for part in parts:
            bounds.append(bounds[-1] + sum(m.n_networks for m in part))
        return MixedPack(parts=tuple((_packed_part(part, device), a, b) for part, a, b in zip(parts, bounds, bounds[1:])),
                         runs=tuple(len(part) for part in parts))
    return _packed_part(methods, device)


def _same_part(a: Method, b: Method) -> bool:
    """Whether two runs' methods are one part of a pack: one class, every option alike but the loose
    ones, and the same pack options unset (as part_key)."""
    if type(a) is not type(b):
        return False
    loose = loose_options(a)
    return (all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a) if f.name not in loose)
            and all((getattr(a, k) is None) == (getattr(b, k) is None) for k in a.pack_options))  # as part_key


def _packed_part(methods: list[Method], device: torch.device | str) -> Method:
    first = methods[0]
    if len(methods) == 1:
        return first
    networks = [m.n_networks for m in methods]
    changes = {}
    for name in first.pack_options:
        values = [getattr(m, name) for m in methods]
        if any(v != values[0] for v in values):
            per_network = [float(v) for v, n in zip(values, networks) for _ in range(n)]
            changes[name] = torch.tensor(per_network, dtype=torch.float32, device=device)
    return dataclasses.replace(first, **changes)


@dataclasses.dataclass(frozen=True)
class MixedPack(Method):
    """The training objective of a pack of several methods' runs (``mixes``): ``parts`` holds each
    method (its runs' ``packed_method``) and its networks' range [a, b) of the member axis. Each part's
    task loss, penalty and checkpoint rule are computed on its own networks (a penalty sees a
    ``MemberSlice`` of the model), so each network trains as in a pack of its own method; a joint
    part's runs keep their unit (the loop gives them one data order and one objective per run)."""
    parts: tuple[tuple[Method, int, int], ...] = ()
    runs: tuple[int, ...] = ()  # each part's runs

    @property
    def n_networks(self) -> int:
        return self.parts[-1][2]

    def task_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.cat([m.task_loss(logits[a:b], targets[a:b]) for m, a, b in self.parts])

    def penalty(self, model, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor | None:
        terms = []
        for (m, a, b), state, runs in zip(self.parts, batch.state, self.runs):
            # a joint part sees its batch as in a pack of its own: one run's (B, D), shared by its members
            x = batch.x[a] if m.joint and runs == 1 else batch.x[a:b]
            part = Batch(x, batch.y[a:b], batch.logits[a:b], state, runs if m.joint else 1, batch.train_size)
            term = m.penalty(MemberSlice(model, a, b), task_loss[a:b], part)
            terms.append(torch.zeros_like(task_loss[a:b]) if term is None else term)
        return torch.cat(terms)

    def stack_states(self, states: list[Any]) -> list[Any]:
        """Each part's runs' states, stacked by the part's method (runs in the parts' order)."""
        out, first = [], 0
        for (m, _, _), runs in zip(self.parts, self.runs):
            out.append(m.stack_states(states[first:first + runs]) if runs > 1 else states[first])
            first += runs
        return out

    @property
    def takes_checkpoints(self) -> bool:
        return any(m.takes_checkpoints for m, _, _ in self.parts)

    def checkpoint_saves(self, val_loss: torch.Tensor, best_so_far: torch.Tensor) -> torch.Tensor:
        return torch.cat([m.checkpoint_saves(val_loss[a:b], best_so_far[a:b]) for m, a, b in self.parts])

    def capturable_step(self) -> bool:
        return all(m.capturable_step() for m, _, _ in self.parts)


def pack_limit(execution: Execution, protocols: list[Protocol]) -> int:
    """The most networks a pack of runs of these protocols may hold under ``execution``."""
    if not execution.vectorize or not protocols:
        return 1
    if execution.pack_size != "auto":
        return execution.pack_size
    return min(auto_pack_networks(p, execution.torch_device()) for p in dict.fromkeys(protocols))


def network_bytes(protocol: Protocol) -> int:
    """A bound on one network's training memory: parameters with their gradient, Adam moments,
    checkpoint and frozen copies, its batch's activations forward and backward, and its copy of
    its run's validation split with that split's activations (runs whose splits differ,
    bench.training.sources.PackData)."""
    cost = protocol.arch_spec.cost()
    activations = protocol.batch_size * cost.activation_floats_per_sample * 3
    validation = protocol.val_size * cost.activation_floats_per_sample
    return 4 * (6 * cost.parameters + activations + validation)


def auto_pack_networks(protocol: Protocol, device: torch.device) -> int:
    """--pack-size auto: as many networks as fit in a share of the device's memory, at most
    MAX_AUTO_NETWORKS for the device's type."""
    if device.type == "cuda":
        memory = torch.cuda.get_device_properties(device).total_memory
    else:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cap = MAX_AUTO_NETWORKS.get(device.type, MAX_AUTO_NETWORKS["cuda"])
    return max(1, min(cap, math.floor(memory * AUTO_MEMORY_SHARE / network_bytes(protocol))))
