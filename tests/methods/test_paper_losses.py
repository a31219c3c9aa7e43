"""The DARE paper's model and losses: Glorot init, the scaled MSE, Eq. 35's distance, Adam's eps."""
import math

import numpy as np
import pytest
import torch

from bench.config import make_protocol
from bench.models.mlp import StackedMLP
from methods.base import scaled_mse_loss
from methods.deep_ensemble import eq35_distance



# -- model, losses, scores ------------------------------------------------------------------------

def test_glorot_init_is_uniform_in_its_bound_with_zero_biases():
    model = StackedMLP.for_seed(0, [0, 1], 784, (100,), 10, init="glorot")
    for weight, bias in zip(model.weights, model.biases):
        bound = math.sqrt(6 / (weight.shape[1] + weight.shape[2]))
        assert weight.abs().max().item() <= bound and weight.abs().max().item() > 0.95 * bound
        assert weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)  # U(-a, a) has sd a/sqrt(3)
        assert torch.count_nonzero(bias) == 0
    torch_init = StackedMLP.for_seed(0, [0], 784, (100,), 10)
    assert torch_init.biases[0].abs().max().item() > 0  # nn.Linear's default draws biases too


def test_scaled_mse_by_hand():
    logits = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])  # one member, two samples, K = 2
    targets = torch.tensor([[0, 1]])                      # targets 2 * onehot: (2, 0) and (0, 2)
    # sample 1: ((1-2)^2 + 0^2) / 2 = 0.5; sample 2: (0^2 + (3-2)^2) / 2 = 0.5; mean 0.5
    assert scaled_mse_loss(logits, targets).tolist() == pytest.approx([0.5])
    logits2 = torch.tensor([[[0.0, 0.0]], [[2.0, 0.0]]])  # two members, one sample of class 0
    assert scaled_mse_loss(logits2, torch.tensor([[0], [0]])).tolist() == pytest.approx([2.0, 0.0])


def test_eq35_distance_by_hand():
    # K = 2, two members, one sample. Member 0 outputs (1.5, 0): closest to K=2 is class 0, y = (2, 0),
    # fit 0.25. Member 1 outputs (0, 3): closest to 2 is class 1 (|3-2| = 1 < |0-2|), y = (0, 2), fit 1.
    # mean output (0.75, 1.5); spread: member 0 0.75^2 + 1.5^2 = 2.8125, member 1 the same.
    h = np.array([[[1.5, 0.0]], [[0.0, 3.0]]])
    assert eq35_distance(h).tolist() == pytest.approx([(0.25 + 1.0) / 2 + 2.8125])
    agreeing = np.array([[[2.0, 0.0]], [[2.0, 0.0]]])  # members agree on K * onehot: score 0
    assert eq35_distance(agreeing).tolist() == [0.0]


def test_adam_eps_is_the_protocols():
    from bench.conformance import toy_split
    from bench.training.loop import train
    from methods.deep_ensemble import DeepEnsemble
    data = toy_split(32, features=4, classes=2, separation=0.0)  # any data: only the optimiser's eps differs
    weights = [train(DeepEnsemble(members=1), make_protocol({"hidden": [4], "epochs": 1, "batch_size": 8,
                                                              "adam_eps": eps}), data, 2, 0, progress=False)
               .model.weights[0] for eps in (1e-8, 1e-8, 10.0)]
    torch.testing.assert_close(weights[0], weights[1])
    assert not torch.allclose(weights[0], weights[2])


