"""Every registered method honours the method API (bench.conformance), and the checks can fail."""
import dataclasses
import re

import pytest
import torch

from bench.conformance import check_method
from bench.options import option, parse_int
from methods import REGISTRY, load_entry_points
from methods.base import Method
from methods.deep_ensemble import DeepEnsemble

load_entry_points()  # methods that installed packages register are checked too


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_method_conforms(name):
    check_method(REGISTRY[name])


def test_dare_with_a_relative_threshold_conforms():
    check_method(REGISTRY["dare"], {"delta": 0.25, "loss": "mse"})


@dataclasses.dataclass(frozen=True)
class NotNormalised(DeepEnsemble):
    name = "not_normalised"
    summary = "returns raw scores instead of probabilities"

    def predict_proba(self, model, x):
        return self.logits(model, x).exp()


@dataclasses.dataclass(frozen=True)
class WrongPenalty(DeepEnsemble):
    name = "wrong_penalty"
    summary = "a scalar penalty instead of one per member"

    def penalty(self, model, task_loss, batch):
        return task_loss.sum() * 0


@dataclasses.dataclass(frozen=True)
class NoHelp(Method):
    name = "no_help"
    summary = "an option without help text"
    members: int = option(2, parse=parse_int, allowed="an integer >= 1")


@dataclasses.dataclass(frozen=True)
class InfinitePenalty(DeepEnsemble):
    name = "infinite_penalty"
    summary = "a penalty that is not finite"

    def penalty(self, model, task_loss, batch):
        return torch.full_like(task_loss, float("inf"))


@dataclasses.dataclass(frozen=True)
class NoSamples(DeepEnsemble):
    name = "no_samples"
    summary = "predicts nothing"

    def predict_proba(self, model, x):
        return self.logits(model, x)[:0].softmax(-1)


@pytest.mark.parametrize("cls, message", [
    (NotNormalised, "predict: values outside [0, 1]"),
    (NoSamples, "predict: shape (0, 20, 3), expected (samples, 20, 3)"),
    (WrongPenalty, "penalty has shape ()"),
    (NoHelp, "no_help.members: no help text"),
    (InfinitePenalty, "penalty is not finite"),
])
def test_the_checks_catch_a_broken_method(cls, message):
    with pytest.raises(AssertionError, match=re.escape(message)):
        check_method(cls)
