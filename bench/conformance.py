"""The checks every registered method must pass (in the spirit of scikit-learn's
``check_estimator``): run them on your own method with

    from bench.conformance import check_method
    check_method(MyMethod)                  # raises AssertionError naming the first broken rule
    check_method(MyMethod, arch="lenet5")   # on another architecture (bench.models.registry)

The test suite runs them over every method in the registry, plugins included, on every
architecture: a pair trains on tiny data and predicts valid probabilities, or the method refuses the
architecture before training with one ConfigError line (``Method.check_protocol``).
"""
from __future__ import annotations

import dataclasses

import torch

from bench.config import make_protocol
from bench.models.registry import ARCHITECTURES
from bench.data.loaders import Split
from bench.evaluation import scores
from bench.evaluation.contract import InvalidPredictions, check_own_scores, check_probabilities
from bench.options import describe, validate
from bench.training.loop import train
from methods.base import Batch, Method

N_FEATURES, N_CLASSES = 12, 3


def toy_split(n: int = 96, features: int = 6, classes: int = 3, seed: int = 0, separation: float = 3.0,
              label_noise: float = 0.0) -> Split:
    """A small synthetic classification problem, the same for a given set of arguments.

    Labels are drawn uniformly from ``range(classes)``; features are standard Gaussian noise, plus
    ``separation`` on the feature whose index is the sample's class (so ``features >= classes``;
    0 gives pure noise). Then a fraction ``label_noise`` of the labels is redrawn uniformly at random
    (a redrawn label may come out unchanged), which makes a small network overfit.
    """
    if features < classes:
        raise ValueError(f"toy_split: features={features} must be >= classes={classes}")
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randn(n, features, generator=g) + torch.nn.functional.one_hot(y, features).float() * separation
    if label_noise:
        redraw = torch.rand(n, generator=g) < label_noise
        y = torch.where(redraw, torch.randint(0, classes, (n,), generator=g), y)
    return Split(x, y)


def check_method(cls: type[Method], options: dict | None = None, arch: str = "mlp") -> Method:
    """Assert the method API's contract on a tiny problem, its networks of architecture ``arch``
    (the MLP on 12 features, an image architecture on 28 x 28 images); returns the trained method
    instance. A method that refuses the architecture raises its ConfigError (one line)."""
    method = _declared(cls, options)
    name = cls.name

    small = {"hidden": (8,)} if "hidden" in ARCHITECTURES[arch].options else {}
    protocol = make_protocol({**small, "arch": arch, "epochs": 2, "batch_size": 16, "early_stop_acc": "none",
                              "val_size": 12})
    method.check_protocol(protocol, f"method {name}")  # a refused architecture: its one-line ConfigError
    features = N_FEATURES if ARCHITECTURES[arch].any_rows else protocol.arch_spec.in_features
    train_split = toy_split(48, features, N_CLASSES, seed=0)
    val = toy_split(12, features, N_CLASSES, seed=1)
    if method.references():  # e.g. DARE with delta: bind it to a made-up finished reference
        fake = {role: {"run_id": "reference", "status": "ok", "val_task_loss": 1.0} for role in method.references()}
        method, _ = method.bind(fake)

    # the penalty on one batch: None or a finite per-member tensor
    model = method.build_model(0, list(range(method.n_networks)), protocol.arch_spec.fitted(features, N_CLASSES))
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
    penalty = method.penalty(model, task, Batch(x_in, yb, logits, state, train_size=len(train_split.y)))
    if penalty is not None:
        assert isinstance(penalty, torch.Tensor), f"{name}: penalty is not a tensor"
        assert penalty.shape == (members,), f"{name}: penalty has shape {tuple(penalty.shape)}, not ({members},)"
        assert torch.isfinite(penalty).all(), f"{name}: penalty is not finite"

    # a tiny training run, then predictions: (samples, N, classes), each row a distribution
    result = train(method, protocol, train_split, N_CLASSES, seed=0, progress=False, val=val)
    assert len(result.epochs_run) == method.n_networks, f"{name}: epochs_run has one entry per network"
    test = toy_split(20, features, N_CLASSES, seed=2)
    fitted = method.post_fit(result.model, val.x, val.y,  # as the harness does, before any prediction
                             train=(train_split.x, train_split.y) if method.post_fit_uses_train else None)
    assert isinstance(fitted, dict), f"{name}: post_fit returned {type(fitted).__name__}, not a dict"
    proba, own = method.predict(result.model, test.x)
    try:  # the same contract every run's predictions are checked against before any metric
        check_probabilities(proba, 20, N_CLASSES, "predict")
        check_own_scores(own, 20)
    except InvalidPredictions as exc:
        raise AssertionError(f"{name}: {exc}") from None
    assert method.primary_score in (*scores.shared(), *own), \
        f"{name}: primary_score {method.primary_score!r} is neither a shared score nor one of its own"
    return method


def _declared(cls: type[Method], options: dict | None) -> Method:
    """The declaration checks: a named dataclass with a summary, documented options whose defaults
    validate, a label and at least one network; returns the method with ``options``."""
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
    return method
