import sys

import pytest
import torch

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.training.loop import Diverged, train
from methods.dare import DARE
from methods.deep_ensemble import DeepEnsemble


def protocol(**kw):
    return make_protocol({"hidden": [16], "epochs": 4, "batch_size": 16, "early_stop_acc": None, **kw})


def test_a_member_trains_the_same_alone_or_stacked_with_others():
    """Own init and own data order: member 0 of a 3-member run equals a 1-member run."""
    data = toy_split(seed=1)
    alone = train(DeepEnsemble(members=1), protocol(), data, 3, seed=7, progress=False).model
    stacked = train(DeepEnsemble(members=3), protocol(), data, 3, seed=7, progress=False).model
    for a, s in zip(alone.parameters(), stacked.parameters()):
        torch.testing.assert_close(a[0], s[0], rtol=1e-4, atol=1e-5)


def test_seeds_reproduce_and_differ():
    data = toy_split(seed=1)
    a = train(DeepEnsemble(members=2), protocol(), data, 3, seed=1, progress=False).model
    b = train(DeepEnsemble(members=2), protocol(), data, 3, seed=1, progress=False).model
    c = train(DeepEnsemble(members=2), protocol(), data, 3, seed=2, progress=False).model
    torch.testing.assert_close(a.weights[0], b.weights[0])
    assert not torch.allclose(a.weights[0], c.weights[0])


def test_training_learns_the_task():
    data = toy_split(seed=1)
    method = DeepEnsemble(members=2)
    model = train(method, protocol(epochs=15, lr=0.01), data, 3, seed=0, progress=False).model
    acc = (method.predict_proba(model, data.x).mean(0).argmax(-1) == data.y).float().mean()
    assert acc > 0.9


def test_early_stop_ends_training_and_records_epochs():
    data = toy_split(seed=1)
    result = train(DeepEnsemble(members=2), protocol(epochs=20, early_stop_acc=0.01), data, 3, seed=0,
                   progress=False)
    assert result.epochs_run == [1, 1]
    assert {h["epoch"] for h in result.history} == {1}




def test_a_stopped_member_no_longer_changes():
    # member 1 reaches the target in epoch 1 only if the target is tiny; force it by a target that
    # one member meets: train 1 epoch, find each member's accuracy, then set the target between.
    data = toy_split(seed=1)
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
    def penalty(self, model, task_loss, batch):
        return task_loss * float("inf")


def test_divergence_is_reported_with_its_epoch():
    with pytest.raises(Diverged) as info:
        train(Exploding(members=1), protocol(), toy_split(seed=1), 3, seed=0, progress=False)
    assert info.value.epoch == 1


# lr 0.01: member losses fall from ~1.08 to ~0.43 over 4 epochs, so a DARE threshold of 0.6 is
# crossed mid-training and the switch is on for some member-steps and off for others
FAST = dict(lr=0.01)


@pytest.mark.parametrize("method", [DeepEnsemble(members=3), DARE(members=3, threshold=0.6)],
                         ids=["deep_ensemble", "dare"])
def test_batched_and_sequential_paths_train_the_same_members(method):
    data = toy_split(seed=1)
    kw = dict(n_classes=3, seed=11, progress=False)
    batched = train(method, protocol(**FAST), data, vectorize=True, **kw)
    sequential = train(method, protocol(**FAST), data, vectorize=False, **kw)
    for b, s in zip(batched.model.parameters(), sequential.model.parameters()):
        torch.testing.assert_close(b, s, rtol=1e-4, atol=1e-5)
    assert batched.epochs_run == sequential.epochs_run


def test_dare_switch_fires_for_some_steps_only():
    """Threshold between the members' losses: some steps on, some off, decided per member."""
    data = toy_split(seed=1)
    def weights(threshold):
        return train(DARE(members=2, threshold=threshold), protocol(**FAST), data, 3, seed=11,
                     progress=False).model.weights[0]
    sometimes, never, always = weights(0.6), weights(0.0), weights(1e6)
    assert not torch.allclose(sometimes, never)   # the switch fired at least once
    assert not torch.allclose(sometimes, always)  # ... and was off at least once


def test_per_member_early_stop_is_the_same_on_both_paths():
    data = toy_split(seed=1)
    first = train(DeepEnsemble(members=2), protocol(epochs=1), data, 3, seed=3, progress=False)
    accs = sorted(h["train_acc"] for h in first.history)
    target = (accs[0] + accs[1]) / 2  # one member stops after epoch 1, the other goes on
    kw = dict(n_classes=3, seed=3, progress=False)
    batched = train(DeepEnsemble(members=2), protocol(epochs=3, early_stop_acc=target), data, **kw)
    sequential = train(DeepEnsemble(members=2), protocol(epochs=3, early_stop_acc=target), data,
                       vectorize=False, **kw)
    assert batched.epochs_run == sequential.epochs_run and sorted(batched.epochs_run)[0] == 1
    for b, s in zip(batched.model.parameters(), sequential.model.parameters()):
        torch.testing.assert_close(b, s, rtol=1e-4, atol=1e-5)


def test_importing_the_training_loop_flushes_subnormal_floats():
    import bench.training.loop  # noqa: F401 - the import sets the flag
    import numpy as np
    tiny = np.array([0x000AE398], dtype=np.uint32).view(np.float32)  # the float32 subnormal 1e-39, bit by bit
    assert tiny.view(np.uint32)[0] != 0
    assert torch.from_numpy(tiny).mul(1.0).item() == 0.0  # read as 0 in arithmetic


def test_a_log_file_gets_epoch_lines_where_a_terminal_gets_bars(capsys, monkeypatch):
    """stderr is no terminal under pytest (as under nohup): bars are off, so plain lines say how far
    training got, at most one a minute and one at the last epoch; a terminal gets the bars alone."""
    def epoch_lines(whole=False):
        return [line if whole else line.split(" after")[0] for line in capsys.readouterr().err.splitlines()
                if line.startswith("DE seed 0: epoch")]

    data = toy_split(seed=1)
    run = dict(data=data, n_classes=3, seed=0, label="DE seed 0")
    train(DeepEnsemble(members=2), protocol(epochs=3), progress=True, **run)
    lines = epoch_lines(whole=True)
    assert [line.split(" after")[0] for line in lines] == ["DE seed 0: epoch 3/3"]  # within a minute: the last only
    assert "networks=2/2 active" in lines[0]  # with the epoch's summary
    train(DeepEnsemble(members=2), protocol(epochs=3), progress=False, **run)
    assert epoch_lines() == []
    with monkeypatch.context() as patch:
        patch.setattr(sys.stderr, "isatty", lambda: True)
        train(DeepEnsemble(members=2), protocol(epochs=3), progress=True, **run)
        assert epoch_lines() == []
    clock = iter(range(0, 10_000, 100))  # every reading of the clock 100 s after the last
    monkeypatch.setattr("bench.training.loop.time.perf_counter", lambda: next(clock))
    train(DeepEnsemble(members=2), protocol(epochs=3), progress=True, **run)
    assert epoch_lines() == [f"DE seed 0: epoch {e}/3" for e in (1, 2, 3)]
