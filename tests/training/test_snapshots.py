"""A pack cut short goes on from its last snapshot (bench.training.resume) and ends exactly where
an uninterrupted pack ends: the same weights, history, stops and checkpoints."""
import pytest
import torch

from bench.config import make_protocol
from bench.provenance import commit
from bench.conformance import toy_split
from bench.training.loop import train, train_pack
from bench.training.packs import packed_method
from bench.training.resume import TrainingSnapshot
from methods.deep_ensemble import DeepEnsemble
from methods.mc_dropout import MCDropout
from methods.mimo import MIMO
from methods.vi import VariationalInference

TRAIN, VAL = toy_split(64, seed=1, label_noise=0.2), toy_split(40, seed=2)
EPOCHS = 6


def protocol(**kw):
    return make_protocol({"hidden": [16], "epochs": EPOCHS, "batch_size": 16, "lr": 0.02, "early_stop_acc": None} | kw)


class Killed(BaseException):
    """The process ends here (a session's end, SIGKILL): nothing after it runs."""


class CutShort(TrainingSnapshot):
    """Kept after every epoch; the process is killed right after the snapshot of epoch ``after``."""

    def __init__(self, path, key, after):
        super().__init__(path, key, every=1e-9)
        self.after = after

    def save(self, loop, history, epoch, seconds):
        super().save(loop, history, epoch, seconds)
        if epoch == self.after:
            raise Killed


def assert_same_training(resumed, whole):
    for (name, p), q in zip(resumed.model.state_dict().items(), whole.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert repr(resumed.history) == repr(whole.history)  # repr: exact floats, and nan equals nan
    assert repr((resumed.epochs_run, resumed.kept_epochs, resumed.val_loss)) == repr((whole.epochs_run,
                                                                                    whole.kept_epochs, whole.val_loss))


CASES = {
    # checkpoints on the validation loss: the saved weights travel in the snapshot
    "deep ensemble, best checkpoint": (lambda: DeepEnsemble(members=3, checkpoint="best"), {}),
    # members that stop early are frozen: their masks and frozen weights travel too
    "deep ensemble, early stop": (lambda: DeepEnsemble(members=3), {"early_stop_acc": 0.85}),
    "mc dropout (counter-stream masks)": (lambda: MCDropout(), {}),
    "vi (torch's global generator draws the weight noise)": (lambda: VariationalInference(samples=2), {}),
    "mimo (a joint run: one shared data order)": (lambda: MIMO(members=2), {}),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("after", [1, 4])
def test_a_run_resumed_after_a_kill_ends_as_an_uninterrupted_one(case, after, tmp_path):
    make, kw = CASES[case]
    path = tmp_path / "partial" / "pack.pt"
    whole = train(make(), protocol(**kw), TRAIN, 3, seed=5, progress=False, val=VAL)
    with pytest.raises(Killed):
        train(make(), protocol(**kw), TRAIN, 3, seed=5, progress=False, val=VAL, snapshot=CutShort(path, "k", after))
    assert path.exists()
    snapshot = TrainingSnapshot(path, "k", every=0)
    resumed = train(make(), protocol(**kw), TRAIN, 3, seed=5, progress=False, val=VAL, snapshot=snapshot)
    assert resumed.resumed_epoch == after and whole.resumed_epoch == 0
    assert snapshot.resumed_commit == (commit() or "")  # the code that kept it, for the record
    assert_same_training(resumed, whole)


def test_a_pack_of_runs_resumes_as_one(tmp_path):
    path = tmp_path / "pack.pt"
    methods = [DeepEnsemble(members=2), DeepEnsemble(members=2)]

    def pack(snapshot=None):
        return train_pack([(m, s) for m, s in zip(methods, (0, 1))], packed_method(methods), protocol(), TRAIN, 3,
                          progress=False, val=VAL, snapshot=snapshot)
    whole = pack()
    with pytest.raises(Killed):
        pack(CutShort(path, "k", 3))
    resumed = pack(TrainingSnapshot(path, "k", every=0))
    for r, w in zip(resumed, whole):
        assert r.resumed_epoch == 3
        assert_same_training(r, w)


def test_the_snapshot_schedule_and_the_recorded_time(tmp_path):
    path = tmp_path / "pack.pt"
    never = TrainingSnapshot(path, "k", every=0)
    train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, snapshot=never)
    assert not path.exists()  # every=0 keeps nothing
    with pytest.raises(Killed):
        train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, snapshot=CutShort(path, "k", 2))
    kept = torch.load(path, weights_only=False)
    assert kept["epoch"] == 2 and kept["seconds"] > 0
    snapshot = TrainingSnapshot(path, "k", every=0)
    resumed = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, snapshot=snapshot)
    assert snapshot.seconds_before == kept["seconds"] and resumed.seconds > kept["seconds"]
    assert path.exists()  # the runner discards it once the records are stored, not the loop
    snapshot.discard()
    assert not path.exists()


def test_no_snapshot_after_the_last_epoch(tmp_path):
    path = tmp_path / "pack.pt"
    train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False,
          snapshot=TrainingSnapshot(path, "k", every=1e-9))
    kept = torch.load(path, weights_only=False)
    assert kept["epoch"] == EPOCHS - 1  # the last epoch ends training: nothing is left to resume


@pytest.mark.parametrize("damage", ["truncated", "another pack", "another model", "another device"])
def test_an_unusable_snapshot_is_one_warning_and_training_starts_afresh(damage, tmp_path):
    path = tmp_path / "pack.pt"
    whole = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False)
    with pytest.raises(Killed):
        other = DeepEnsemble(members=3) if damage == "another model" else DeepEnsemble(members=2)
        train(other, protocol(), TRAIN, 3, seed=0, progress=False, snapshot=CutShort(path, "k", 2))
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    if damage == "another device":  # kept on a GPU: its generators' states are the GPU's own
        torch.save(torch.load(path, weights_only=False) | {"device": "cuda"}, path)
    key = "other" if damage == "another pack" else "k"
    with pytest.warns(UserWarning, match="cannot resume from it") as caught:
        resumed = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False,
                        snapshot=TrainingSnapshot(path, key, every=0))
    assert len(caught) == 1
    assert resumed.resumed_epoch == 0
    assert_same_training(resumed, whole)


def test_a_snapshot_kept_before_its_device_was_recorded_is_resumed(tmp_path):
    path = tmp_path / "pack.pt"
    whole = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, val=VAL)
    with pytest.raises(Killed):
        train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, val=VAL,
              snapshot=CutShort(path, "k", 3))
    kept = torch.load(path, weights_only=False)
    del kept["device"], kept["commit"]
    torch.save(kept, path)
    snapshot = TrainingSnapshot(path, "k", every=0)
    resumed = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False, val=VAL, snapshot=snapshot)
    assert resumed.resumed_epoch == 3 and snapshot.resumed_commit == ""
    assert_same_training(resumed, whole)


def test_a_snapshot_that_cannot_be_written_is_one_warning_and_training_goes_on(tmp_path):
    (tmp_path / "blocked").write_text("a file where the snapshot folder should be")
    whole = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False)
    with pytest.warns(UserWarning, match="cannot keep the training state") as caught:
        result = train(DeepEnsemble(members=2), protocol(), TRAIN, 3, seed=0, progress=False,
                       snapshot=TrainingSnapshot(tmp_path / "blocked" / "pack.pt", "k", every=1e-9))
    assert len(caught) == 1  # not one per epoch: the pack trains on without snapshots
    assert_same_training(result, whole)
