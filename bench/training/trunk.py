"""A frozen trunk (``Protocol.trunk``): the DARE paper's recipe for convolutional data, an ensemble
of fully-connected heads on one frozen feature extractor (their CIFAR-10 rows put MLP heads on a
pretrained ResNet-32). Here the trunk is a network of the architecture ``trunk`` (a LeNet-5),
trained once per run seed as a single network on the run's ID training split with the protocol's
optimiser, batch, epochs and init (cross-entropy, final weights, no early stop), then frozen; every
split a run reads (train, validation, test, the OOD sets, and any set ``bench evaluate`` makes later)
becomes the trunk's penultimate features, the 84 ReLU units before its last layer, and the run's
members (``arch = mlp``) are heads on those rows.

The runs of one protocol and seed share a trunk: a process keeps it, and ``OUT/trunks/<key>.pt`` keeps
its weights for the other workers and for scoring stored weights again, ``<key>.json`` what training it
took (seconds, device, test accuracy; committed with the records); the key is the run id of the
single-network run the trunk is (``trunk_run``): every protocol value it depends on, and the seed.
Training it again on the same kind of device gives the same trunk (its init and data order come from
the seed's member-0 streams), so a lost file costs time, not results; a trunk trained on a GPU and
retrained on a CPU differs at the level of float rounding, and so do the features.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from bench import provenance
from bench.config import Protocol, RunConfig, make_run_config
from bench.data.loaders import BenchData, Split
from bench.fileio import atomic_write
from bench.training.loop import TrainResult, train

TRUNKS = "trunks"  # the folder of a results folder that keeps the trunks' weights
CHUNK = 4096


def trunk_protocol(protocol: Protocol) -> Protocol:
    """The protocol the trunk trains under: the run's, with the trunk's architecture, no trunk of
    its own, no early stop (a feature extractor trains its epochs) and no OOD sets (they do not
    change the trunk)."""
    return dataclasses.replace(protocol, arch=protocol.trunk, trunk="none", early_stop_acc=None, ood_sets=())


def trunk_run(protocol: Protocol, seed: int) -> RunConfig:
    """The trunk as the run it is: a single network of ``trunk_protocol`` at ``seed``. Its run id names
    the trunk (``trunk_key``, OUT/trunks/<run id>.pt), as a run's id names its record."""
    return make_run_config("single_network", {}, trunk_protocol(protocol), seed)


def trunk_key(protocol: Protocol, seed: int) -> str:
    return trunk_run(protocol, seed).run_id


_TRUNKS: dict[str, torch.nn.Module] = {}  # key -> the frozen feature module, per process


def trunk_features(protocol: Protocol, seed: int, data: BenchData, out: Path | None,
                   device: torch.device | str = "cpu", progress: bool = False) -> torch.nn.Module:
    """The frozen feature module of (protocol, seed): from this process, from OUT/trunks, or trained."""
    run = trunk_run(protocol, seed)
    key = run.run_id
    if key in _TRUNKS:
        return _TRUNKS[key]
    inner, method = run.protocol, run.built_method
    spec = inner.arch_spec.fitted(data.in_features, data.n_classes)
    path = None if out is None else Path(out) / TRUNKS / f"{key}.pt"
    if path is not None and path.is_file():
        model = method.build_model(seed, [0], spec)
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    else:
        result = train(method, inner, data.train, data.n_classes, seed, progress=progress, label=f"trunk seed {seed}",
                       device=device)
        model = result.model.cpu()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, lambda f: torch.save(model.state_dict(), f))
            about = trunk_card(run, result, model, data, device)
            atomic_write(path.with_suffix(".json"), lambda f: f.write((json.dumps(about, indent=1) + "\n").encode()))
            # two workers may train one trunk at once: each goes on with the file that stayed, so the
            # runs of a seed read one trunk even where the workers' devices round differently
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    features = model.as_module(0)[:-1].eval()  # every layer but the last: the penultimate ReLU units
    for parameter in features.parameters():
        parameter.requires_grad_(False)
    _TRUNKS[key] = features
    return features


@torch.no_grad()
def trunk_card(run: RunConfig, result: TrainResult, model: torch.nn.Module, data: BenchData,
               device: torch.device | str) -> dict:
    """What training a trunk took and gave (``model``: its trained network on the CPU): kept beside its
    weights as OUT/trunks/<key>.json."""
    accuracy = (_apply(model.as_module(0).eval(), data.test.x).argmax(-1) == data.test.y).double().mean().item()
    return {"run_id": run.run_id, "seed": run.seed, "arch": run.protocol.arch, "epochs": result.epochs_run[0],
            "seconds": round(result.seconds, 1), "device": str(device), "test_acc": accuracy, **provenance.stamp()}


@torch.no_grad()
def _apply(features: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return features(x) if len(x) <= CHUNK else torch.cat([features(part) for part in x.split(CHUNK)])


def featurized(protocol: Protocol, seed: int, data: BenchData, out: Path | None,
               device: torch.device | str = "cpu", progress: bool = False) -> BenchData:
    """``data`` with every split as the frozen trunk's features (unchanged when the protocol has no trunk);
    its ``prepare`` maps images to features too, so sets made later (shifts) take the same path."""
    if protocol.trunk == "none":
        return data
    features = trunk_features(protocol, seed, data, out, device, progress)
    prepare = data.prepare

    def split(s: Split) -> Split:
        return Split(_apply(features, s.x), s.y)

    return dataclasses.replace(data, train=split(data.train), val=split(data.val), test=split(data.test),
                               ood={name: split(s) for name, s in data.ood.items()},
                               prepare=lambda images: _apply(features, prepare(images)))
