"""The checks every registered method must pass (in the spirit of scikit-learn's
``check_estimator``): run them on your own method with

    from bench.conformance import check_method
    check_method(MyMethod)          # raises AssertionError naming the first broken rule

The test suite runs them over every method in the registry, plugins included.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from bench.config import make_protocol
from bench.data import Split
from bench.options import describe, validate
from bench.train import train
from methods.base import Batch, Method

N_FEATURES, N_CLASSES = 12, 3


def tiny_split(n: int = 48, seed: int = 0) -> Split:
    """A separable 3-class problem: class c lights up features 4c..4c+3."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % N_CLASSES
    x = torch.rand(n, N_FEATURES, generator=g) * 0.3
    for c in range(N_CLASSES):
        x[y == c, 4 * c:4 * c + 4] += 1.0
    return Split(x, y)


def check_method(cls: type[Method], options: dict | None = None) -> Method:
    """Assert the method API's contract on a tiny problem; returns the trained method instance."""
    name = getattr(cls, "name", "")
    assert isinstance(cls, type) and issubclass(cls, Method), f"{cls!r} is not a methods.Method subclass"
    assert isinstance(name, str) and name.isidentifier(), f"{cls.__name__}: name {name!r} is not an identifier"
    assert isinstance(cls.summary, str) and cls.summary.strip(), f"{name}: no one-line summary"
    assert dataclasses.is_dataclass(cls), f"{name}: not a dataclass (decorate it with @dataclasses.dataclass(frozen=True))"
    for opt, default, allowed, help_text in describe(cls):
        assert allowed.strip(), f"{name}.{opt}: no 'allowed' text"
        assert help_text.strip(), f"{name}.{opt}: no help text"
    values = validate(cls, dict(options or {}), f"method {name}")  # the defaults must validate
    method = cls(**values)
    assert isinstance(method.label, str) and method.label, f"{name}: empty label"
    assert method.n_networks >= 1, f"{name}: n_networks < 1"

    protocol = make_protocol({"hidden": (8,), "epochs": 2, "batch_size": 16, "early_stop_acc": "none",
                              "val_size": 12})
    train_split, val = tiny_split(48, 0), tiny_split(12, 1)
    if method.references():  # e.g. DARE with delta: bind it to a made-up finished reference
        fake = {role: {"run_id": "reference", "status": "ok", "val_task_loss": 1.0} for role in method.references()}
        method, _ = method.bind(fake)

    # the penalty on one batch: None or a finite per-member tensor
    model = method.build_model(0, list(range(method.n_networks)), N_FEATURES, protocol.hidden, N_CLASSES, "torch")
    assert hasattr(model, "members"), f"{name}: build_model's module has no 'members' attribute"
    state = method.prepare(model, 0, list(range(method.n_networks)))
    members = model.members
    xb = train_split.x[:16]
    x_in = xb if method.joint else xb.expand(members, -1, -1)
    yb = train_split.y[:16].expand(members, -1)
    logits = model(x_in, dropout=True)
    assert logits.shape == (members, 16, N_CLASSES), f"{name}: training logits have shape {tuple(logits.shape)}"
    task = method.task_loss(logits, yb)
    assert task.shape == (members,) and torch.isfinite(task).all(), f"{name}: task loss is not finite of shape (M,)"
    penalty = method.penalty(model, task, Batch(x_in, yb, logits, state))
    if penalty is not None:
        assert isinstance(penalty, torch.Tensor), f"{name}: penalty is not a tensor"
        assert penalty.shape == (members,), f"{name}: penalty has shape {tuple(penalty.shape)}, not ({members},)"
        assert torch.isfinite(penalty).all(), f"{name}: penalty is not finite"

    # a tiny training run, then predictions: (samples, N, classes), each row a distribution
    result = train(method, protocol, train_split, N_CLASSES, seed=0, progress=False, val=val)
    assert len(result.epochs_run) == method.n_networks, f"{name}: epochs_run has one entry per network"
    test = tiny_split(20, 2)
    proba, own = method.predict(result.model, test.x)
    assert isinstance(proba, np.ndarray) and proba.ndim == 3, f"{name}: predict must give a (samples, N, K) array"
    assert proba.shape[0] >= 1, f"{name}: predict gave no samples"
    assert proba.shape[1:] == (20, N_CLASSES), f"{name}: predictions have shape {proba.shape}"
    assert np.isfinite(proba).all() and (proba >= 0).all(), f"{name}: predictions are not probabilities"
    assert np.allclose(proba.sum(axis=-1), 1.0, atol=1e-4), f"{name}: predictions do not sum to 1"
    for score, values in own.items():
        assert isinstance(values, np.ndarray) and values.shape == (20,), f"{name}: own score {score} is not (N,)"
        assert np.isfinite(values).all(), f"{name}: own score {score} is not finite"
    assert method.primary_score in ("pred_entropy", "mutual_info", "one_minus_max_prob", *own), \
        f"{name}: primary_score {method.primary_score!r} is neither a shared score nor one of its own"
    return method
