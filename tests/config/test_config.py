import subprocess
import sys

import pytest

from bench.cli.main import main
from bench.config import make_protocol, make_run_config
from methods import get_method
from bench.errors import ConfigError
from bench.design.grid import expand_grid
from bench.config import load_preset


@pytest.mark.parametrize("args, message", [
    (["--methods", "nope"], "unknown method 'nope' (registered: deep_ensemble, dare, mc_dropout, single_network, anchor_net, mod, negcorr, rde, batch_ensemble, packed_ensemble, mimo, swag, laplace, snapshot_ensemble, vi)"),
    (["-o", "dare.threshold=-1"], "method dare: threshold='-1' is out of range; allowed: a finite number >= 0"),
    (["-o", "dare.threshold=inf"], "threshold='inf' is out of range"),
    (["-o", "members=0"], "members='0' is out of range; allowed: an integer >= 1"),
    (["-o", "mc_dropout.dropout=1"], "dropout='1' is out of range; allowed: a number in [0, 1)"),
    (["-o", "mc_dropout.dropout=-0.1"], "dropout='-0.1' is out of range"),
    (["-o", "mc_dropout.passes=0"], "passes='0' is out of range"),
    (["-o", "dare.bogus=1"], "method dare: unknown option 'bogus' (known options: checkpoint, temperature, members, loss, threshold, delta)"),
    (["-o", "dare.members=two"], "members='two' is not valid; allowed: an integer >= 1"),
    (["-o", "threshold"], "expected METHOD.NAME=VALUE"),
    (["--methods", "dare", "-o", "passes=3"], "no selected method has an option 'passes'"),
    (["--epochs", "0"], "protocol: epochs='0' is out of range"),
    (["--batch-size", "-4"], "protocol: batch_size='-4' is out of range"),
    (["--id-dataset", "cifar10"], "id_dataset='cifar10' is out of range; allowed: mnist or fashion_mnist"),
    (["--preprocess", "zscore"], "preprocess='zscore' is out of range"),
    (["--seeds", "x"], "seed='x' is not valid"),
    (["--preset", "nope"], "unknown preset 'nope'"),
])
def test_bad_input_is_one_clear_line_and_exit_code_2(args, message, capsys, tmp_path):
    assert main(["run", "--out", str(tmp_path), "--no-download", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and err.startswith("dare-bench: error: ")


def test_missing_data_directory_names_the_folder_and_files(tmp_path, capsys):
    code = main(["run", "--data-dir", str(tmp_path / "none"), "--no-download", "--methods", "dare",
                 "--seeds", "0", "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"mnist not found in {tmp_path / 'none' / 'MNIST' / 'raw'}" in err
    assert "train-images-idx3-ubyte" in err and "--data-dir" in err and "DARE_BENCH_DATA" in err
    assert not (tmp_path / "out").exists()  # no folder of empty tables left behind


def test_failed_download_is_one_line(tmp_path, capsys, monkeypatch):
    from bench.data import files

    class Offline:
        def __init__(self, **kwargs):
            raise OSError("network unreachable")

    monkeypatch.setattr(files, "dataset_class", lambda dataset: Offline)
    files.load_images.cache_clear()
    code = main(["run", "--data-dir", str(tmp_path), "--methods", "dare", "--seeds", "0",
                 "--out", str(tmp_path / "out"), "-q"])
    assert code == 2
    assert "and download failed (OSError)" in capsys.readouterr().err


def test_bad_input_from_a_real_process_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "run", "-o", "dare.threshold=-1",
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as exit_code:  # in this process: the test above runs the real one
        main(["run", "--help"])
    assert exit_code.value.code == 0
    printed = capsys.readouterr().out
    for flag in ("--preset", "--methods", "--seeds", "--option", "--data-dir", "--out", "--quiet",
                 "--epochs", "--preprocess", "--early-stop-acc", "--hidden", "--val-size", "--no-download"):
        assert flag in printed


def test_grid_expansion_and_option_targets():
    _, values = load_preset("seed")
    configs = expand_grid("seed", values, ["dare", "deep_ensemble"], [0, 1], {"epochs": "2"},
                          ["dare.threshold=0.1,0.3", "members=5"])
    dare = [c for c in configs if c.method == "dare"]
    assert len(dare) == 4 and {c.method_options["threshold"] for c in dare} == {0.1, 0.3}
    assert all(c.method_options["members"] == 5 for c in configs)  # unprefixed: every method
    assert all(c.protocol.epochs == 2 for c in configs)
    assert len({c.run_id for c in configs}) == len(configs)


def test_run_id_is_stable_and_covers_every_value():
    p = make_protocol({})
    a = make_run_config("dare", {}, p, 0)
    assert a.run_id == make_run_config("dare", {"threshold": 0.3}, p, 0).run_id  # defaults filled in
    assert a.run_id != make_run_config("dare", {"threshold": 0.31}, p, 0).run_id
    assert a.run_id != make_run_config("dare", {}, make_protocol({"preprocess": "standardize"}), 0).run_id
    assert a.run_id != make_run_config("dare", {}, p, 1).run_id


def test_preset_with_an_unknown_key_is_rejected(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('seeds = [0]\nmethods = ["dare"]\nepochz = 3\n')
    name, values = load_preset(str(path))
    with pytest.raises(ConfigError, match="preset mine: unknown key 'epochz'"):
        expand_grid(name, values, None, None, {}, [])


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "execution: device='tpu' is out of range; allowed: auto, cpu, cuda or cuda:N"),
    (["--threads", "0"], "execution: threads='0' is out of range; allowed: an integer >= 1"),
])
def test_bad_execution_values(args, message, capsys, tmp_path):
    assert main(["run", "--out", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err


def test_cuda_without_a_gpu_is_one_line(capsys, tmp_path, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["run", "--out", str(tmp_path), "--device", "cuda"]) == 2
    assert "no CUDA GPU is available" in capsys.readouterr().err


def test_a_run_config_holds_its_method_built_once_and_travels_by_name():
    import pickle
    config = make_run_config("dare", {"members": 2, "delta": 0.1}, make_protocol({"val_size": 10}), 3)
    assert config.built_method == get_method("dare")(**config.method_options)  # its validated options
    assert config.references() is config.references()  # made once: the executor, packs and walks all ask
    assert set(config.references()) == {"tau_reference"}
    copy = pickle.loads(pickle.dumps(config))  # as a worker process gets it: rebuilt there from the registered name
    assert copy == config and copy.run_id == config.run_id and copy.built_method == config.built_method
