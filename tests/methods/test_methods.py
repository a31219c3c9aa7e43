import math

import pytest
import torch

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.errors import ConfigError
from bench.models.mlp import StackedMLP
from bench.training.loop import train
from methods import REGISTRY, get_method
from methods.dare import DARE, EPS, anti_regularizer
from methods.deep_ensemble import DeepEnsemble
from methods.mc_dropout import MCDropout


def test_registry_has_the_three_methods_and_unknown_names_fail_clearly():
    assert {"deep_ensemble", "dare", "mc_dropout"} <= set(REGISTRY)
    with pytest.raises(ConfigError, match=r"unknown method 'nope' \(registered: deep_ensemble, dare, mc_dropout"):
        get_method("nope")


def test_anti_regularizer_is_a_mean_of_logs_over_every_scalar_of_a_member():
    w = torch.tensor([[[1.0, 2.0]], [[0.5, 0.0]]])  # (M=2, 1, 2)
    b = torch.tensor([[3.0], [-1.0]])              # (M=2, 1): biases count too
    r = anti_regularizer([w, b])
    expect0 = (math.log(1 + EPS) + math.log(4 + EPS) + math.log(9 + EPS)) / 3
    expect1 = (math.log(0.25 + EPS) + math.log(EPS) + math.log(1 + EPS)) / 3
    assert EPS == pytest.approx(1.1920929e-07)
    assert r.tolist() == pytest.approx([expect0, expect1], rel=1e-6)


def test_dare_switch_is_per_member_and_inclusive_at_the_threshold():
    model = StackedMLP.for_seed(0, [0, 1, 2], 4, (5,), 2)
    method = DARE(members=3, threshold=0.3)
    task = torch.tensor([0.2, 0.3, 0.31])
    penalty = method.penalty(model, task, None)
    r = anti_regularizer(model.parameters())
    assert penalty[0].item() == pytest.approx(-r[0].item())
    assert penalty[1].item() == pytest.approx(-r[1].item())  # loss == threshold: on
    assert penalty[2].item() == 0.0                           # above: off, no other coefficient


def test_dare_switch_uses_the_detached_loss():
    model = StackedMLP.for_seed(0, [0], 4, (5,), 2)
    task = torch.tensor([0.1], requires_grad=True)
    DARE(members=1, threshold=1.0).penalty(model, task, None).sum().backward()
    assert task.grad is None  # the switch adds no gradient through the task loss


PROTOCOL = make_protocol({"hidden": [8], "epochs": 3, "batch_size": 16, "early_stop_acc": None})


def test_dare_with_a_zero_threshold_trains_exactly_like_a_deep_ensemble():
    data = toy_split(64)
    de = train(DeepEnsemble(members=2), PROTOCOL, data, 3, seed=5, progress=False).model
    dare = train(DARE(members=2, threshold=0.0), PROTOCOL, data, 3, seed=5, progress=False).model
    for a, b in zip(de.parameters(), dare.parameters()):
        torch.testing.assert_close(a, b)


def test_dare_with_the_switch_on_grows_the_weights():
    data = toy_split(64)
    de = train(DeepEnsemble(members=2), PROTOCOL, data, 3, seed=5, progress=False).model
    dare = train(DARE(members=2, threshold=1e6), PROTOCOL, data, 3, seed=5, progress=False).model
    assert (anti_regularizer(dare.parameters()) > anti_regularizer(de.parameters()) + 0.1).all()


def test_mc_dropout_passes_differ_even_after_model_eval():
    data = toy_split(64)
    method = MCDropout(dropout=0.5, passes=4)
    model = train(method, PROTOCOL, data, 3, seed=0, progress=False).model
    model.eval()  # the classic bug: this must not switch the test-time passes off
    probs = method.predict_proba(model, data.x)
    assert probs.shape == (4, len(data), 3)
    assert not torch.allclose(probs[0], probs[1])
    assert torch.allclose(probs.sum(-1), torch.ones(4, len(data)))


def test_ensembles_predict_without_dropout_and_members_differ():
    data = toy_split(64)
    method = DeepEnsemble(members=3)
    model = train(method, PROTOCOL, data, 3, seed=0, progress=False).model
    p1, p2 = method.predict_proba(model, data.x), method.predict_proba(model, data.x)
    assert p1.shape == (3, len(data), 3)
    torch.testing.assert_close(p1, p2)            # deterministic
    assert not torch.allclose(p1[0], p1[1])        # independently initialised members
