"""A frozen trunk (Protocol.trunk, bench.training.trunk): one LeNet-5 per seed, trained once, its
penultimate features the rows every member and every split reads."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from bench import api
from bench.cli.main import main
from bench.config import make_protocol
from bench.data.loaders import load_benchmark_data
from bench.errors import ConfigError
from bench.training import trunk
from bench.training.loop import train
from methods import get_method

FLAGS = ["--seeds", "0", "1", "--epochs", "1", "--val-size", "50", "--early-stop-acc", "none", "--no-download",
         "--no-plots", "-q", "--trunk", "lenet5", "--hidden", "8"]


def test_every_split_becomes_the_features_of_the_trunk_trained_alone(tiny_data, tmp_path):
    protocol = make_protocol({"trunk": "lenet5", "epochs": 1, "val_size": 50, "early_stop_acc": None,
                              "ood_sets": ["fashion_mnist", "inverted"]})
    raw = load_benchmark_data(protocol, tiny_data, download=False, seed=3)
    data = trunk.featurized(protocol, 3, raw, tmp_path)
    # the same network as a single LeNet-5 trained on the split under the trunk's protocol, last layer cut
    alone = train(get_method("single_network")(), trunk.trunk_protocol(protocol), raw.train, raw.n_classes, 3,
                  progress=False).model.as_module(0)
    with torch.no_grad():
        expected = torch.relu(alone[-3](alone[:-3](raw.test.x)))  # flatten -> dense 84 -> ReLU
    assert torch.equal(data.test.x, expected) and data.test.x.shape[1] == 84
    assert torch.equal(data.test.y, raw.test.y) and set(data.ood) == {"fashion_mnist", "inverted"}
    assert all(s.x.shape[1] == 84 for s in (data.train, data.val, *data.ood.values()))
    assert torch.equal(data.prepare(raw.test_images.flatten(1).float()), data.test.x)  # sets made later: same path
    assert (tmp_path / "trunks" / f"{trunk.trunk_key(protocol, 3)}.pt").is_file()
    card = json.loads((tmp_path / "trunks" / f"{trunk.trunk_key(protocol, 3)}.json").read_text())
    with torch.no_grad():
        accuracy = (alone(raw.test.x).argmax(-1) == raw.test.y).double().mean().item()
    assert (card["seed"], card["arch"], card["epochs"], card["device"]) == (3, "lenet5", 1, "cpu")
    assert card["test_acc"] == pytest.approx(accuracy) and card["seconds"] >= 0 and card["harness_version"]
    assert trunk.trunk_key(protocol, 3) != trunk.trunk_key(protocol, 4)
    plain = make_protocol({"epochs": 1, "val_size": 50})
    assert trunk.featurized(plain, 0, raw, tmp_path) is raw  # no trunk: the data as they are


def test_workers_that_train_one_trunk_at_once_go_on_with_the_file_that_stayed(tiny_data, tmp_path, monkeypatch):
    protocol = make_protocol({"trunk": "lenet5", "epochs": 1, "val_size": 50, "early_stop_acc": None})
    raw = load_benchmark_data(protocol, tiny_data, download=False, seed=5)
    write = trunk.atomic_write

    def and_another_worker(path, writer, durable=True):  # another worker's trunk lands right after this one's
        write(path, writer, durable)
        if path.suffix == ".pt":
            torch.save({k: v + 0.01 for k, v in torch.load(path, weights_only=True).items()}, path)

    monkeypatch.setattr(trunk, "atomic_write", and_another_worker)
    raced = trunk.featurized(protocol, 5, raw, tmp_path)
    monkeypatch.setattr(trunk, "atomic_write", write)
    trunk._TRUNKS.clear()
    from_file = trunk.featurized(protocol, 5, raw, tmp_path)  # as a later worker: the file on disk
    trunk._TRUNKS.clear()
    own = trunk.featurized(protocol, 5, raw, tmp_path / "alone")
    trunk._TRUNKS.clear()
    assert torch.equal(raced.test.x, from_file.test.x) and not torch.equal(raced.test.x, own.test.x)


def test_a_trunk_grid_trains_one_trunk_per_seed_shared_by_every_method_and_scores_again(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *FLAGS, "--methods", "deep_ensemble",
                 "dare", "-o", "members=2", "-o", "dare.threshold=0.5"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["trunk"]) == {"lenet5"} and len(runs) == 4 and (runs["status"] == "ok").all()
    assert len(list((out / "trunks").glob("*.pt"))) == 2  # seeds 0 and 1, each shared by both methods
    trunk._TRUNKS.clear()  # as a new process: the trunks come from OUT/trunks
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out / "again"), *FLAGS, "--methods",
                 "deep_ensemble", "-o", "members=2", "--save-weights"]) == 0
    first = pd.read_csv(out / "again" / "runs.csv")
    trunk._TRUNKS.clear()
    scored = api.evaluate(out / "again", data_dir=tiny_data, ood_sets="letters", shifts="rotation", download=False,
                          progress=False)
    # every stored metric again from the weights through the stored trunks, bit for bit; new sets and shifts
    # through the same features
    assert (scored.scored, scored.missing, scored.differing) == (2, [], []) and scored.shift_sets > 0
    again = pd.read_csv(out / "again" / "runs.csv")
    assert again["id_acc"].tolist() == first["id_acc"].tolist() and again["auroc_pred_entropy_vs_letters"].notna().all()


def test_a_trunk_under_an_image_architecture_is_refused_in_one_line(capsys):
    with pytest.raises(ConfigError, match="trunk=lenet5 feeds its features to heads that read rows"):
        make_protocol({"trunk": "lenet5", "arch": "lenet5_same"})
    assert main(["run", "--trunk", "mlp", "--dry-run"]) == 2
    assert "trunk='mlp' is out of range; allowed: none or lenet5 or lenet5_same" in capsys.readouterr().err
