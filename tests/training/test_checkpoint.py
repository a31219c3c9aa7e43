"""Per-member checkpointing on the validation task loss: the kept epoch and its weights."""
import pytest
import torch

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.training.loop import train
from methods.base import checkpoint_mask
from methods.dare import DARE
from methods.deep_ensemble import DeepEnsemble

# 3 classes, weakly separated, 30 % of labels redrawn: a 32-unit MLP at lr 0.02 overfits within a few epochs
NOISY = dict(separation=1.5, label_noise=0.3)
TRAIN, VAL = toy_split(64, seed=1, **NOISY), toy_split(200, seed=2, **NOISY)


def protocol(epochs=10):
    return make_protocol({"hidden": [32], "epochs": epochs, "batch_size": 16, "early_stop_acc": None, "lr": 0.02})


def val_curve(result, member):
    return [h["val_loss"] for h in result.history if h["member"] == member]


def assert_member_equals(model, member, reference):
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p[member], q[member])


def test_checkpoint_mask_rules():
    loss = torch.tensor([0.5, 1.0, 2.0])
    best = torch.tensor([0.4, 1.0, 3.0])
    assert checkpoint_mask("best", loss, best, None).tolist() == [False, False, True]  # a tie keeps the earlier
    assert checkpoint_mask("last_below_threshold", loss, best, 1.0).tolist() == [True, True, False]  # <= tau
    assert checkpoint_mask("none", loss, best, None).tolist() == [False, False, False]


def test_best_restores_each_members_lowest_validation_epoch():
    result = train(DeepEnsemble(members=2, checkpoint="best"), protocol(), TRAIN, 3, seed=0,
                   progress=False, val=VAL)
    expected = [min(range(10), key=lambda e: val_curve(result, m)[e]) + 1 for m in range(2)]
    assert result.kept_epochs == expected
    assert all(e < 10 for e in expected)  # the validation loss rose again: restoring matters here
    for m, epoch in enumerate(expected):
        # the same member trained for exactly `epoch` epochs, no checkpoint: the same weights
        short = train(DeepEnsemble(members=2), protocol(epoch), TRAIN, 3, seed=0, progress=False).model
        assert_member_equals(result.model, m, short)
        assert result.val_loss[m] == pytest.approx(min(val_curve(result, m)), rel=1e-5)
    # the recorded validation loss is the plain task loss of the restored weights, computed here apart
    with torch.no_grad():
        logits = result.model(VAL.x)
    for m in range(2):
        ce = torch.nn.functional.cross_entropy(logits[m], VAL.y).item()
        assert result.val_loss[m] == pytest.approx(ce, rel=1e-5)


def test_none_keeps_the_final_weights():
    kept = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, val=VAL)
    assert kept.kept_epochs == [0, 0]
    assert kept.val_loss == pytest.approx([val_curve(kept, m)[-1] for m in range(2)], rel=1e-5)


def test_last_below_threshold_keeps_the_last_qualifying_epoch_or_the_final_weights():
    # tau 2.0 on the scaled MSE: member 0 dips below it (last time in epoch 4), member 1 never does
    method = DARE(members=2, loss="mse", threshold=2.0, checkpoint="last_below_threshold")
    result = train(method, protocol(), TRAIN, 3, seed=0, progress=False, val=VAL)
    curves = [val_curve(result, m) for m in range(2)]
    expected = [max((e + 1 for e, v in enumerate(c) if v <= 2.0), default=0) for c in curves]
    assert result.kept_epochs == expected == [4, 0]
    for m, epoch in enumerate(expected):
        same = dict(members=2, loss="mse", threshold=2.0)  # same tau, so the same trajectory
        reference = train(DARE(**same), protocol(epoch or 10), TRAIN, 3, seed=0, progress=False).model
        assert_member_equals(result.model, m, reference)


def test_checkpointing_is_the_same_on_the_sequential_path():
    kw = dict(n_classes=3, seed=0, progress=False, val=VAL)
    method = DeepEnsemble(members=2, checkpoint="best")
    a = train(method, protocol(), TRAIN, vectorize=True, **kw)
    b = train(method, protocol(), TRAIN, vectorize=False, **kw)
    assert a.kept_epochs == b.kept_epochs
    for p, q in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


class BlowsUpMember1AfterEpoch2(DeepEnsemble):
    """Member 1's penalty turns NaN from its third epoch on (the state counts training steps)."""

    def prepare(self, model, seed, member_ids):
        return {"steps": 0}

    def penalty(self, model, task_loss, batch):
        batch.state["steps"] += 1
        if batch.state["steps"] <= 2 * 4:  # 64 images / batch 16 = 4 steps per epoch
            return None
        return torch.tensor([0.0, float("nan")]) * task_loss


def test_a_member_that_goes_non_finite_keeps_its_checkpoint_and_the_run_goes_on():
    method = BlowsUpMember1AfterEpoch2(members=2, checkpoint="best")
    result = train(method, protocol(6), TRAIN, 3, seed=0, progress=False, val=VAL)
    assert result.nonfinite_epochs == [0, 3] and result.epochs_run == [6, 3]
    # member 1 keeps its best epoch among the finite ones (1 or 2), member 0 its best of all six
    curve1 = val_curve(result, 1)[:2]
    assert result.kept_epochs[1] == 1 + curve1.index(min(curve1))
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    reference = train(DeepEnsemble(members=2, checkpoint="best"), protocol(result.kept_epochs[1]), TRAIN, 3, seed=0,
                      progress=False, val=VAL)
    for kept, ref in zip(result.model.parameters(), reference.model.parameters()):
        torch.testing.assert_close(kept[1], ref[1])  # exactly the weights of its kept epoch
    # member 0 trained on, unaffected: the same as a deep ensemble trained alone
    alone = train(DeepEnsemble(members=2, checkpoint="best"), protocol(6), TRAIN, 3, seed=0, progress=False, val=VAL)
    for kept, ref in zip(result.model.parameters(), alone.model.parameters()):
        torch.testing.assert_close(kept[0], ref[0])


def test_a_member_that_goes_non_finite_without_a_checkpoint_diverges_the_run():
    from bench.training.loop import Diverged
    with pytest.raises(Diverged) as info:
        train(BlowsUpMember1AfterEpoch2(members=2, checkpoint="none"), protocol(6), TRAIN, 3, seed=0,
              progress=False, val=VAL)
    assert info.value.epoch == 3
