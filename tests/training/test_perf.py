import pandas as pd
import pytest

from bench.cli.main import main
from bench.training.perf import Work, run_perf, training_flops


def test_training_flops_by_hand():
    work = Work(members=2, epochs=3, hidden=(4,))
    # layers 784->4 and 4->10: fwd + weight grad 4*in*out each, input grad 2*in*out for the second only
    per_sample = 4 * (784 * 4 + 4 * 10) + 2 * (4 * 10)
    assert training_flops(work, samples=100) == per_sample * 100 * 2 * 3


def test_perf_writes_a_table_of_the_same_work(tiny_data, tmp_path):
    import torch
    work = Work(members=2, epochs=1, batch_size=64, hidden=(8,), peak_size=256)
    table = run_perf(work, tiny_data, tmp_path, torch.device("cpu"), log=lambda *_: None)
    saved = pd.read_csv(tmp_path / "perf.csv")
    assert list(saved["path"]) == ["harness", "seed_loop", "torch_uncertainty"]
    rows = table.set_index("path")
    harness, seed = rows.loc["harness"], rows.loc["seed_loop"]
    assert harness["train_seconds"] > 0 and seed["train_seconds"] > 0
    assert harness["speedup_vs_seed_loop"] == pytest.approx(seed["train_seconds"] / harness["train_seconds"])
    assert harness["fraction_of_peak"] == pytest.approx(
        training_flops(work, 300) / harness["train_seconds"] / 1e9 / harness["matmul_peak_gflops"])
    tu = rows.loc["torch_uncertainty"]
    assert tu["train_seconds"] > 0 or "skipped" in tu["note"]


def test_perf_without_data_is_one_line(tmp_path, capsys):
    assert main(["perf", "--data-dir", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "mnist not found in" in capsys.readouterr().err


def test_perf_takes_the_paper_protocol_from_its_preset(tiny_data, tmp_path):
    assert main(["perf", "--preset", "paper-fmnist", "--epochs", "1", "--peak-size", "64", "--skip-seed-loop",
                 "--data-dir", str(tiny_data), "--out", str(tmp_path)]) == 0
    row = pd.read_csv(tmp_path / "perf.csv").set_index("path").loc["harness"]
    assert (row["members"], row["hidden"], row["batch_size"], row["dataset"]) == (5, "100-100-100", 128,
                                                                                   "fashion_mnist")
    assert 0 < row["fraction_of_peak"] and row["preset"] == "paper-fmnist"
    assert main(["perf", "--preset", "paper-fmnist", "--members", "2", "--epochs", "1", "--peak-size", "64",
                 "--skip-seed-loop", "--data-dir", str(tiny_data), "--out", str(tmp_path)]) == 0
    assert pd.read_csv(tmp_path / "perf.csv").set_index("path").loc["harness", "members"] == 2  # flags win


def test_perf_times_packs_of_each_size(tiny_data, tmp_path, capsys):
    assert main(["perf", "--networks", "1,3", "--epochs", "1", "--hidden", "8", "--peak-size", "64",
                 "--data-dir", str(tiny_data), "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "perf_packs.csv")
    assert table["networks"].tolist() == [1, 3] and (table["train_seconds"] > 0).all()
    work = Work(members=3, epochs=1, hidden=(8,))
    row = table.set_index("networks").loc[3]
    assert row["train_tflop"] == pytest.approx(training_flops(work, 300) / 1e12)
    assert row["fraction_of_peak"] == pytest.approx(row["train_tflop"] * 1e3 / row["train_seconds"]
                                                    / row["matmul_peak_gflops"])
    assert row["network_epochs_per_second"] == pytest.approx(3 / row["train_seconds"])
    assert row["matmuls_only_gflops"] > 0 and row["matmuls_only_fraction_of_peak"] > 0
    assert main(["perf", "--networks", "0,2", "--data-dir", str(tiny_data)]) == 2
    assert "--networks '0,2': expected integers >= 1" in capsys.readouterr().err


def test_perf_times_lenet_packs_beside_a_plain_loop(tiny_data, tmp_path, capsys):
    assert main(["perf", "--arch", "lenet5", "--networks", "1,2", "--epochs", "1", "--peak-size", "64",
                 "--data-dir", str(tiny_data), "--out", str(tmp_path)]) == 0
    assert "perf_packs_lenet5.csv" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "perf_packs_lenet5.csv")
    assert table[["path", "networks"]].values.tolist() == [["pack", 1], ["plain_loop", 1], ["pack", 2],
                                                           ["plain_loop", 2]]
    assert (table["train_seconds"] > 0).all() and (table["arch"] == "lenet5").all() and "hidden" not in table
    # the same work on both paths: LeNet-5's 2,263,920 training FLOPs a sample (tests/models/test_architectures.py)
    row = table.set_index(["path", "networks"]).loc[("plain_loop", 2)]
    assert row["train_tflop"] == pytest.approx(2_263_920 * 300 * 2 / 1e12)
    assert row["fraction_of_peak"] == pytest.approx(row["train_tflop"] * 1e3 / row["train_seconds"]
                                                    / row["matmul_peak_gflops"])
    assert (table["matmuls_only_fraction_of_peak"] > 0).all()
    assert main(["perf", "--arch", "lenet5", "--data-dir", str(tiny_data), "--out", str(tmp_path)]) == 2
    assert "arch=lenet5: perf times it with --networks" in capsys.readouterr().err
    assert main(["perf", "--arch", "resnet", "--networks", "1", "--data-dir", str(tiny_data)]) == 2
    assert "arch='resnet' is out of range; allowed: mlp or lenet5 or lenet5_same" in capsys.readouterr().err
