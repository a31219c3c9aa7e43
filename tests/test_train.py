import pytest
import torch

from bench.config import make_protocol
from bench.data import Split
from bench.train import Diverged, train
from methods.base import Method
from methods.deep_ensemble import DeepEnsemble


def split(n=96, d=6, k=3):
    g = torch.Generator().manual_seed(1)
    y = torch.randint(0, k, (n,), generator=g)
    return Split(torch.randn(n, d, generator=g) + torch.nn.functional.one_hot(y, d).float() * 3, y)


def protocol(**kw):
    return make_protocol({"hidden": [16], "epochs": 4, "batch_size": 16, "early_stop_acc": None, **kw})


def test_a_member_trains_the_same_alone_or_stacked_with_others():
    """Own init and own data order: member 0 of a 3-member run equals a 1-member run."""
    data = split()
    alone = train(DeepEnsemble(members=1), protocol(), data, 3, seed=7, progress=False).model
    stacked = train(DeepEnsemble(members=3), protocol(), data, 3, seed=7, progress=False).model
    for a, s in zip(alone.parameters(), stacked.parameters()):
        torch.testing.assert_close(a[0], s[0], rtol=1e-4, atol=1e-5)


def test_seeds_reproduce_and_differ():
    data = split()
    a = train(DeepEnsemble(members=2), protocol(), data, 3, seed=1, progress=False).model
    b = train(DeepEnsemble(members=2), protocol(), data, 3, seed=1, progress=False).model
    c = train(DeepEnsemble(members=2), protocol(), data, 3, seed=2, progress=False).model
    torch.testing.assert_close(a.weights[0], b.weights[0])
    assert not torch.allclose(a.weights[0], c.weights[0])


def test_training_learns_the_task():
    data = split()
    method = DeepEnsemble(members=2)
    model = train(method, protocol(epochs=15, lr=0.01), data, 3, seed=0, progress=False).model
    acc = (method.predict_proba(model, data.x).mean(0).argmax(-1) == data.y).float().mean()
    assert acc > 0.9


def test_early_stop_ends_training_and_records_epochs():
    data = split()
    result = train(DeepEnsemble(members=2), protocol(epochs=20, early_stop_acc=0.01), data, 3, seed=0,
                   progress=False)
    assert result.epochs_run == [1, 1]
    assert {h["epoch"] for h in result.history} == {1}




def test_a_stopped_member_no_longer_changes():
    # member 1 reaches the target in epoch 1 only if the target is tiny; force it by a target that
    # one member meets: train 1 epoch, find each member's accuracy, then set the target between.
    data = split()
    first = train(DeepEnsemble(members=2), protocol(epochs=1), data, 3, seed=3, progress=False)
    accs = sorted(h["train_acc"] for h in first.history)
    assert accs[0] < accs[1], "need two members with different first-epoch accuracy"
    target = (accs[0] + accs[1]) / 2
    fast = max(first.history, key=lambda h: h["train_acc"])["member"]
    result = train(DeepEnsemble(members=2), protocol(epochs=3, early_stop_acc=target), data, 3, seed=3,
                   progress=False)
    assert result.epochs_run[fast] == 1
    for after, epoch1 in zip(result.model.parameters(), first.model.parameters()):
        torch.testing.assert_close(after[fast], epoch1[fast])  # frozen at its epoch-1 values
        assert not torch.allclose(after[1 - fast], epoch1[1 - fast])  # the other went on


class Exploding(DeepEnsemble):
    def penalty(self, model, task_loss):
        return task_loss * float("inf")


def test_divergence_is_reported_with_its_epoch():
    with pytest.raises(Diverged) as info:
        train(Exploding(members=1), protocol(), split(), 3, seed=0, progress=False)
    assert info.value.epoch == 1
