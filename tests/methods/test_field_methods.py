"""MIMO, SWAG / MultiSWAG, the Laplace ensemble and snapshot ensembles: each method's own invariants
and its end-to-end run (the conformance checks of every registered method are in test_conformance)."""
import math

import numpy as np
import pytest
import torch

import methods
from bench.models.registry import ArchSpec
from bench.cli.main import main
from bench.conformance import toy_split
from bench.config import make_protocol
from bench.errors import ConfigError
from bench.options import validate
from bench.training.loop import train
from methods.base import FITTED_TEMPERATURE
from methods.mimo import HeadShuffles
from methods.snapshot_ensemble import cycle_of
from methods.laplace import glm_predictive

FEATURES, CLASSES = 6, 3
PROTOCOL = make_protocol({"hidden": (8,), "epochs": 3, "batch_size": 16, "early_stop_acc": 0.5, "val_size": 20,
                          "lr": 0.01})
TRAIN, VAL, TEST = (toy_split(n, FEATURES, CLASSES, seed=s) for n, s in ((64, 0), (20, 1), (30, 2)))


def make(name: str, **options):
    cls = methods.get_method(name)
    return cls(**validate(cls, options, name))


def trained(method, seed: int = 0):
    return train(method, PROTOCOL, TRAIN, CLASSES, seed, progress=False, val=VAL)


def test_the_five_are_registered_with_labels():
    assert {"mimo", "swag", "laplace", "snapshot_ensemble"} <= set(methods.REGISTRY)
    assert make("swag").label == "SWAG" and make("swag", members=3).label == "MultiSWAG"
    assert make("laplace").label == "Laplace ensemble" and make("laplace", members=1).label == "Laplace"


# ---- MIMO


def test_mimo_with_one_head_is_the_single_network():
    single, mimo = trained(make("single_network")), trained(make("mimo", members=1))
    assert single.epochs_run == mimo.epochs_run
    assert [h["train_loss"] for h in single.history] == [h["train_loss"] for h in mimo.history]
    torch.testing.assert_close(make("mimo", members=1).logits(mimo.model, TEST.x),
                               make("single_network").logits(single.model, TEST.x), rtol=0, atol=0)


def test_mimo_heads_see_their_own_shuffles_and_the_same_test_image():
    method = make("mimo", members=3, input_repetition=0.25, batch_repetition=2)
    x = torch.arange(8.0).unsqueeze(1).expand(8, FEATURES)  # row i holds the number i
    y = torch.arange(8).expand(3, 8)
    shuffles = HeadShuffles.of_run(0, 3, torch.device("cpu"))
    xb, yb = method.training_batch(x, y, shuffles)
    assert xb.shape == (3, 16, FEATURES) and yb.shape == (3, 16)
    assert shuffles.step.item() == 1 and not torch.equal(method.training_batch(x, y, shuffles)[1], yb)  # a new draw
    assert torch.equal(xb[..., 0].long(), yb)  # inputs and targets stay paired
    for head in range(3):  # every image of the batch twice in each head's rows
        assert sorted(yb[head].tolist()) == sorted(list(range(8)) * 2)
    own = int(16 * 0.75)  # the last quarter of the rows: one image for all heads
    assert torch.equal(yb[0, own:], yb[1, own:]) and torch.equal(yb[1, own:], yb[2, own:])
    assert not torch.equal(yb[0, :own], yb[1, :own])
    # the network: head m reads its own input block; a test image goes to every head
    net = method.build_model(0, [0, 1, 2], ArchSpec.mlp(FEATURES, (8,), CLASSES, "torch"))
    torch.testing.assert_close(net(TEST.x[:5]), net(TEST.x[:5].expand(3, -1, -1)))
    assert net(TEST.x[:5]).shape == (3, 5, CLASSES)


def test_mimo_trains_its_heads_into_different_predictions():
    method = make("mimo", members=3)
    result = trained(method)
    proba, _ = method.predict(result.model, TEST.x)
    assert proba.shape == (3, 30, CLASSES) and np.abs(proba[0] - proba[1]).max() > 1e-3


# ---- SWAG / MultiSWAG


def test_swag_mean_is_the_average_of_the_collected_weights():
    method = make("swag", members=2, swa_start=0.5, moments=4, rank=3)
    model = method.build_model(0, [0, 1], ArchSpec.mlp(FEATURES, (8,), CLASSES, "torch"))
    seen = []
    for step in range(12):  # weights moved by hand; burn-in 6 steps, then 4 moments over the 6 left
        with torch.no_grad():
            for p in model.net.parameters():
                p.add_(step * 0.01)
        if method.collects_at(step, 12):
            seen.append(model.net.flat().clone())
        method.after_step(model, None, step, 12)
    assert [s for s in range(12) if method.collects_at(s, 12)] == [6, 8, 9, 11]
    assert int(model.collected) == 4
    stacked = torch.stack(seen)
    torch.testing.assert_close(model.mean, stacked.mean(0))
    torch.testing.assert_close(model.sq_mean, stacked.square().mean(0))
    # the ring keeps the last 3 deviations, each from the running mean after its collection
    running = [stacked[:i + 1].mean(0) for i in range(4)]
    expected = {round(float((seen[i] - running[i])[0, 0]), 5) for i in (1, 2, 3)}
    assert {round(float(model.deviations[0, j, 0]), 5) for j in range(3)} == expected


def test_swag_draws_have_the_papers_covariance():
    # per coordinate: var = scale * (Sigma_diag + sum over kept deviations of D^2 / (R - 1))
    method = make("swag", members=1, moments=6, rank=4)
    model = trained(method).model
    draws = model.sample(20000, 0.5).flat()
    kept = model.deviations[0, :4]
    expected = 0.5 * ((model.sq_mean[0] - model.mean[0].square()).clamp(min=0) + kept.square().sum(0) / 3)
    measured = draws.var(dim=0)
    big = expected > expected.median()  # relative error of a variance estimate from 20000 draws: ~1 %
    assert ((measured[big] / expected[big] - 1).abs() < 0.05).float().mean() > 0.99


def test_swag_with_more_moments_than_steps_collects_at_each_and_says_so():
    method = make("swag", moments=20, rank=20)
    assert [s for s in range(30) if method.collects_at(s, 30)] == list(range(15, 30))  # burn-in 15, 15 left
    model = trained(method).model  # 12 steps: 6 after the burn-in
    assert method.post_fit(model, VAL.x, VAL.y)["swag_moments_collected"] == 6


def test_swag_trains_one_model_without_vectorising():
    method = make("swag", members=2, moments=5, rank=5)
    sequential = train(method, PROTOCOL, TRAIN, CLASSES, 0, progress=False, val=VAL, vectorize=False)
    torch.testing.assert_close(sequential.model.mean, trained(method).model.mean, rtol=0, atol=0)


def test_swag_samples_centre_on_the_swa_weights_and_scale_zero_is_swa():
    method = make("swag", members=2, moments=5, rank=5)
    result = trained(method)
    model = result.model
    swa = model.net.with_flat(model.mean)
    torch.testing.assert_close(model.sample(3, 0.0).flat(), swa.flat().repeat_interleave(3, dim=0))
    draws = model.sample(4000, 0.5).flat().view(2, 4000, -1)
    spread = (model.sq_mean - model.mean.square()).clamp(min=0).sqrt().max()
    assert (draws.mean(1) - model.mean).abs().max() < 6 * spread / math.sqrt(4000) + 1e-6
    # members x samples predictive members, the same draws for every split
    proba, _ = make("swag", members=2, moments=5, rank=5, samples=7).predict(model, TEST.x)
    assert proba.shape == (14, 30, CLASSES)
    again, _ = make("swag", members=2, moments=5, rank=5, samples=7).predict(model, TEST.x)
    assert np.array_equal(proba, again)


def test_schedule_methods_ignore_the_early_stop_and_refuse_checkpoints():
    # PROTOCOL stops a member at train accuracy 0.5, which the toy problem reaches in epoch 1
    assert trained(make("deep_ensemble", members=1)).epochs_run == [1]
    assert trained(make("swag", moments=5)).epochs_run == [3] and trained(make("snapshot_ensemble")).epochs_run == [3]
    for name in ("swag", "snapshot_ensemble"):
        with pytest.raises(ConfigError, match="collects its ensemble along the whole schedule"):
            validate(methods.get_method(name), {"checkpoint": "best"}, name)


# ---- snapshot ensembles


def snapshot_steps(method, total: int) -> list[int]:
    model = method.build_model(0, [0], ArchSpec.mlp(FEATURES, (8,), CLASSES, "torch"))
    taken = []
    for step in range(total):
        before = int(model.taken)
        method.after_step(model, None, step, total)
        if int(model.taken) > before:
            taken.append(step)
    return taken


def test_snapshot_learning_rate_restarts_each_cycle_and_a_snapshot_ends_each():
    method = make("snapshot_ensemble", members=3)
    assert [cycle_of(s, 3, 12) for s in (0, 3, 4, 11)] == [(0, 4), (0, 4), (4, 4), (8, 4)]
    factors = [method.lr_factor(step, 12) for step in range(12)]
    assert factors[0] == factors[4] == factors[8] == 1.0
    assert factors[2] == pytest.approx(0.5) and factors[3] == pytest.approx(0.5 * (math.cos(math.pi * 3 / 4) + 1))
    assert snapshot_steps(method, 12) == [3, 7, 11]
    # 10 steps: cycles of 3, 3 and 4 steps, each annealed to its end, three snapshots
    assert snapshot_steps(method, 10) == [2, 5, 9]
    assert [round(method.lr_factor(s, 10), 4) for s in (6, 9)] == [1.0, round(0.5 * (math.cos(math.pi * 3 / 4) + 1), 4)]
    assert snapshot_steps(make("snapshot_ensemble", members=4), 5) == [0, 1, 2, 4]
    with pytest.raises(ValueError, match="3 cycles need at least as many optimiser steps"):
        method.lr_factor(0, 2)


def test_snapshot_members_are_the_weights_at_the_cycle_ends():
    method = make("snapshot_ensemble", members=3)
    result = trained(method)  # 3 epochs of 4 steps: one cycle per epoch
    model = result.model
    assert int(model.taken) == 3
    torch.testing.assert_close(model.snapshots[2], model.net.flat()[0])  # the last snapshot: the final weights
    assert not torch.equal(model.snapshots[0], model.snapshots[1])
    proba, _ = method.predict(model, TEST.x)
    assert proba.shape == (3, 30, CLASSES)


def test_snapshot_training_follows_the_cyclic_rate():
    method = make("snapshot_ensemble", members=3)
    seen = []

    class Spy(torch.optim.Adam):
        def step(self, *args, **kwargs):
            seen.append(self.param_groups[0]["lr"])
            return super().step(*args, **kwargs)

    original = torch.optim.Adam
    torch.optim.Adam = Spy
    try:
        trained(method)
    finally:
        torch.optim.Adam = original
    assert seen == pytest.approx([PROTOCOL.lr * method.lr_factor(s, 12) for s in range(12)])


# ---- Laplace


def test_laplace_member_network_is_the_stacked_member():
    model = make("deep_ensemble", members=2).build_model(0, [0, 1], ArchSpec.mlp(FEATURES, (8,), CLASSES, "torch"))
    for m in range(2):
        torch.testing.assert_close(model.as_module(m)(TEST.x), model(TEST.x)[m])


@pytest.mark.parametrize("hessian", ["kron", "diag"])
def test_laplace_matches_laplace_torch_used_directly(hessian):
    from laplace import Laplace

    method = make("laplace", members=2, hessian=hessian)
    model = trained(method).model
    values = method.post_fit(model, VAL.x, VAL.y, train=(TRAIN.x, TRAIN.y))
    precisions = [float(p) for p in values["laplace_prior_precision"].split()]
    proba = method.predict_proba(model, TEST.x)
    grid = torch.logspace(-4, 4, 100)
    for m in range(2):
        direct = Laplace(model.as_module(m), "classification", subset_of_weights="last_layer",
                         hessian_structure=hessian)
        direct.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(TRAIN.x, TRAIN.y), batch_size=7))
        nlls = []
        for precision in grid:  # the grid search by hand: the validation NLL of the probit predictive
            direct.prior_precision = precision
            p = direct(VAL.x, pred_type="glm", link_approx="probit")
            nlls.append(float(-p[torch.arange(20), VAL.y].log().mean()))
        best = float(grid[int(np.argmin(nlls))])
        assert precisions[m] == pytest.approx(best, rel=1e-5)
        direct.prior_precision = best
        torch.testing.assert_close(proba[m], direct(TEST.x, pred_type="glm", link_approx="probit"),
                                   rtol=0, atol=1e-5)
    # link=mc: Monte-Carlo samples of the same Gaussian logits, close to the probit's probabilities
    mc = make("laplace", members=2, hessian=hessian, link="mc", mc_samples=2000)
    mc.post_fit(model, VAL.x, VAL.y, train=(TRAIN.x, TRAIN.y))
    assert (mc.predict_proba(model, TEST.x) - proba).abs().max() < 0.05
    # a posterior widens the prediction: less confident than the member's softmax
    plain = make("deep_ensemble", members=2).predict_proba(model, TEST.x)
    assert (proba.max(-1).values <= plain.max(-1).values + 1e-6).float().mean() > 0.9


def test_laplace_mc_draws_survive_a_near_singular_logit_covariance():
    class Fixed:  # a posterior whose functional variance is the same rank-one matrix for every row
        posterior_precision = torch.tensor([1.0] * 9 + [1e-9] * 3)  # diag: W (3 x 3) then b (3)
        n_outputs = 3

    features = torch.tensor([[1.0, 0.0, 0.0]])
    probs = glm_predictive(Fixed(), features, torch.tensor([[2.0, 0.0, -1.0]]), "mc", 500,
                           torch.Generator().manual_seed(0))
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(1))


def test_laplace_refuses_temperature_and_needs_a_validation_split():
    with pytest.raises(ConfigError, match="temperature=fit is not supported"):
        validate(methods.get_method("laplace"), {"temperature": "fit"}, "laplace")
    with pytest.raises(ConfigError, match="set val_size > 0"):
        make("laplace").check_protocol(make_protocol({"val_size": 0}), "laplace")


def test_temperature_scaling_applies_to_the_collected_ensembles():
    method = make("snapshot_ensemble", temperature="fit")
    model = trained(method).model
    raw = method.logits(model, TEST.x)  # the snapshots' logits: 3 members
    assert raw.shape == (3, 30, CLASSES)
    values = method.post_fit(model, VAL.x, VAL.y)
    assert values[FITTED_TEMPERATURE] > 0
    torch.testing.assert_close(method.logits(model, TEST.x), raw / values[FITTED_TEMPERATURE])


# ---- end to end, scored again from the stored weights


def test_each_runs_end_to_end_and_is_reproduced_from_its_weights(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--data-dir", str(tiny_data), "--out", str(out), "--no-download", "-q"]
    assert main(["run", *args, "--methods", "mimo", "swag", "laplace", "snapshot_ensemble", "--seeds", "0",
                 "--epochs", "2", "--val-size", "50", "--hidden", "16", "--early-stop-acc", "none", "--no-plots",
                 "-o", "members=2", "-o", "swag.moments=3", "-o", "swag.rank=3", "-o", "swag.samples=4",
                 "--save-weights"]) == 0
    capsys.readouterr()
    assert main(["evaluate", *args, "--ood-sets", "inverted", "--shifts", "stripe", "--no-plots"]) == 0
    assert "reproduced exactly for 4 of 4" in capsys.readouterr().out
