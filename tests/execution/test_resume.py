"""Runs that survive: resume after SIGINT/SIGKILL, corrupt records, data integrity, and the same
records whatever the order or the executor."""
import json
import os
import shutil
import signal
import subprocess
import struct
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from idx import write_both

from bench.cli.main import main
from bench.data.files import check_dataset_files
from bench.errors import DataError
from bench.store import UnreadableScores, read_arrays
from bench.training.resume import TrainingSnapshot


def grid(epochs: int) -> list[str]:
    """Two methods, three seeds: six runs of ``epochs`` epochs."""
    return ["--methods", "deep_ensemble", "mc_dropout", "--seeds", "0", "1", "2", "--epochs", str(epochs),
            "--val-size", "50", "--early-stop-acc", "none", "-o", "members=2", "-o", "passes=3",
            "--no-download", "--no-plots"]


GRID = grid(2)  # compared across orders, executors and damaged records
LONG_GRID = grid(20)  # long enough for a test to stop its process mid-way
METRICS = ["run_id", "id_acc", "id_nll_nats", "auroc_pred_entropy_vs_fashion_mnist",
           "auroc_mutual_info_vs_fashion_mnist", "fpr95_pred_entropy_vs_fashion_mnist"]


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "runs.csv")[METRICS].sort_values("run_id").reset_index(drop=True)


@pytest.fixture(scope="module")
def reference_folder(tiny_data, tmp_path_factory):
    """The grid run once, uninterrupted, in this process: its folder, for the tests to copy, never to change."""
    out = tmp_path_factory.mktemp("reference")
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *GRID]) == 0
    return out


@pytest.fixture(scope="module")
def reference(reference_folder):
    return metrics(reference_folder)


@pytest.fixture(scope="module")
def long_reference(tiny_data, tmp_path_factory):
    """LONG_GRID run once, uninterrupted, in this process."""
    out = tmp_path_factory.mktemp("long_reference")
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *LONG_GRID]) == 0
    return metrics(out)


def start_grid(tiny_data, out):
    # SIGINT's default action in the child: a test run launched in the background (nohup ... &)
    # would otherwise hand it an ignored SIGINT, and Python then never raises KeyboardInterrupt
    return subprocess.Popen([sys.executable, "-m", "bench", "run", "--data-dir", str(tiny_data),
                             "--out", str(out), "-q", *LONG_GRID], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_records(out: Path, n: int, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(list((out / "records").glob("*.json"))) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"grid ended early: {proc.stderr.read()}")
        time.sleep(0.05)
    pytest.fail("no record appeared in time")


def temp_files(out: Path) -> dict[Path, bytes]:
    """The store's half-written files (``.<name>.<random>.tmp`` beside records and scores) and their bytes."""
    return {p: p.read_bytes() for p in out.glob("*/.*.tmp")}


@pytest.mark.slow  # a grid in its own process: the full suite runs it, CI's command does not (README, Tests);
# CI's resumes after a kill: test_packs' kill -9 mid-pack, test_a_pack_killed_mid_training_goes_on_from_its_snapshot
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_grid_resumes_and_gives_the_same_tables(sig, tiny_data, tmp_path, long_reference):
    out = tmp_path / "out"
    proc = start_grid(tiny_data, out)
    wait_for_records(out, 2, proc)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    stderr = proc.stderr.read()
    done = {p.stem for p in (out / "records").glob("*.json")}
    assert 2 <= len(done) < 6, "the grid must be stopped mid-way for this test to mean anything"
    if sig == signal.SIGINT:  # caught: the write under way is cleaned up and the user told how to go on
        assert proc.returncode == 130 and "run the same command again to resume" in stderr
        assert not temp_files(out)
    else:  # no chance to clean up: a write under way is left as a temp file, as the one planted here
        assert proc.returncode == -signal.SIGKILL and "run the same command again" not in stderr
        todo = sorted(set(long_reference["run_id"]) - done)[0]
        planted = out / "records" / f".{todo}.json.killed.tmp"
        planted.write_text('{"run_id": "' + todo + '", "status": "o')  # a record cut off mid-write
    left = temp_files(out)
    stamps = {p: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}

    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *LONG_GRID]) == 0
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # finished runs were not redone
    # the resume reads no temp file and leaves none of its own; the store never looks at the kill's
    # leftovers (bench/store.py reads only <run_id>.json): they stay, untouched and harmless
    assert temp_files(out) == left
    assert {p.stem for p in (out / "records").glob("*.json")} == set(long_reference["run_id"])
    pd.testing.assert_frame_equal(metrics(out), long_reference)


class Killed(BaseException):
    """The process ends here: no handler of the command's sees it."""


def snapshotted(tiny_data) -> list[str]:
    """One pack of two runs, a snapshot after every epoch."""
    return ["run", "--data-dir", str(tiny_data), "-q", "--methods", "deep_ensemble", "--seeds", "0", "1",
            "--epochs", "6", "--val-size", "50", "--early-stop-acc", "none", "-o", "members=2", "--no-download",
            "--no-plots", "--snapshot-every", "0.001"]


def test_a_pack_killed_mid_training_goes_on_from_its_snapshot(tiny_data, tmp_path, monkeypatch):
    command = snapshotted(tiny_data)
    whole, out = tmp_path / "whole", tmp_path / "cut"
    assert main([*command, "--out", str(whole)]) == 0
    keep = TrainingSnapshot.save

    def keep_then_die(self, loop, history, epoch, seconds):
        keep(self, loop, history, epoch, seconds)
        if epoch == 4:
            raise Killed

    monkeypatch.setattr(TrainingSnapshot, "save", keep_then_die)
    with pytest.raises(Killed):
        main([*command, "--out", str(out)])
    assert len(list((out / "partial").glob("*.pt"))) == 1 and not list((out / "records").glob("*.json"))
    monkeypatch.undo()
    assert main([*command, "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(metrics(out), metrics(whole))  # the same numbers as never cut short
    records = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert sorted(r["resumed_epoch"] for r in records) == [4, 4]  # one pack: both runs went on from epoch 4
    assert all("resumed_commit" in r for r in records)  # the code that kept the snapshot
    assert all("resumed_epoch" not in json.loads(p.read_text()) for p in (whole / "records").glob("*.json"))
    assert not list((out / "partial").iterdir())  # the records are stored: the snapshot is gone


def test_a_pack_whose_training_fails_keeps_its_snapshot_for_the_next_try(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    keep = TrainingSnapshot.save

    def keep_then_fail(self, loop, history, epoch, seconds):
        keep(self, loop, history, epoch, seconds)
        if epoch == 4:
            raise RuntimeError("out of memory")  # a failure of this try, not of the runs

    monkeypatch.setattr(TrainingSnapshot, "save", keep_then_fail)
    main([*snapshotted(tiny_data), "--out", str(out)])
    assert {json.loads(p.read_text())["status"] for p in (out / "records").glob("*.json")} == {"error"}
    assert len(list((out / "partial").glob("*.pt"))) == 1  # error records are trained again: the snapshot stays
    monkeypatch.undo()
    assert main([*snapshotted(tiny_data), "--out", str(out)]) == 0
    assert [json.loads(p.read_text())["resumed_epoch"] for p in (out / "records").glob("*.json")] == [4, 4]
    assert not list((out / "partial").iterdir())


def damage_a_member(path) -> None:
    """Flip bytes inside the first member's data of a zip, leaving its directories intact: the file is
    still a zip archive, and np.load opens it, but reading that member fails (a CRC mismatch where
    the member is stored, a broken deflate stream or a CRC mismatch where it is compressed)."""
    blob = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.infolist()[0]
    # the local header's own name and extra lengths (numpy's zip64 extra is in the local header only)
    name_length, extra_length = struct.unpack("<HH", blob[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    for i in range(start + info.compress_size // 2, start + info.compress_size // 2 + 8):
        blob[i] ^= 0xFF
    path.write_bytes(bytes(blob))


def readable(path) -> bool:
    try:
        read_arrays(path)
    except UnreadableScores:
        return False
    return True


def test_the_store_reads_every_member_of_a_scores_file(tmp_path):
    # a stored (uncompressed) member: only its CRC tells that a data byte changed
    plain = tmp_path / "plain.npz"
    np.savez(plain, scores=np.zeros(50, dtype=np.float32))  # uncompressed
    assert readable(plain)
    damaged = shutil.copy(plain, tmp_path / "damaged.npz")  # another file: the one that passed is kept
    damage_a_member(damaged)
    with zipfile.ZipFile(damaged) as z:
        assert z.testzip() == "scores.npy"  # the CRC check is what finds it
    assert not readable(damaged)
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, scores=np.arange(4096, dtype=np.float32))
    damage_a_member(compressed)
    assert zipfile.is_zipfile(compressed) and not readable(compressed)


def test_a_scores_file_is_read_once_and_again_when_rewritten(tmp_path, monkeypatch):
    path = tmp_path / "run.npz"
    np.savez_compressed(path, scores=np.arange(3, dtype=np.float32))
    reads = []
    real_zipfile = zipfile.ZipFile
    def counted(*args, **kwargs):
        if kwargs.get("mode", args[1] if len(args) > 1 else "r") == "r":
            reads.append(args[0])
        return real_zipfile(*args, **kwargs)
    monkeypatch.setattr(zipfile, "ZipFile", counted)
    first, second = read_arrays(path), read_arrays(path)
    assert second is first and len(reads) == 1
    assert not first["scores"].flags.writeable  # shared: a reader that writes into it fails loudly
    np.savez_compressed(path, scores=np.arange(4, dtype=np.float32))
    assert read_arrays(path)["scores"].tolist() == [0, 1, 2, 3] and len(reads) == 2


@pytest.mark.parametrize("damage", ["garbage", "wrong_id", "bad_scores", "damaged_scores", "bad_status"])
def test_a_corrupt_record_is_reported_and_redone(damage, tiny_data, tmp_path, reference_folder, reference, capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out)  # the finished grid, as the same command leaves it
    run_id = reference["run_id"][0]
    path = out / "records" / f"{run_id}.json"
    record = json.loads(path.read_text())
    if damage == "garbage":
        path.write_text(path.read_text()[:40])
    elif damage == "wrong_id":
        path.write_text(json.dumps({**record, "run_id": "somethingelse"}))
    elif damage == "bad_scores":
        (out / "predictions" / f"{run_id}.npz").write_bytes(b"not a zip")
    elif damage == "damaged_scores":
        damage_a_member(out / "predictions" / f"{run_id}.npz")
    else:
        path.write_text(json.dumps({**record, "status": "running"}))
    capsys.readouterr()
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID]) == 0
    captured = capsys.readouterr()
    assert f"warning: record {path} is corrupt" in captured.out + captured.err
    assert "5 of 6 runs already finished" in captured.out
    pd.testing.assert_frame_equal(metrics(out), reference)  # redone, identical


def test_a_grid_reuses_runs_copied_without_their_predictions_and_force_trains_them_again(tiny_data, tmp_path,
                                                                                        reference_folder, reference,
                                                                                        capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out, ignore=shutil.ignore_patterns("predictions"))
    stamps = {p: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    capsys.readouterr()
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--dry-run", *GRID]) == 0
    dry = [line for line in capsys.readouterr().out.splitlines() if "  finished  " in line]
    assert len(dry) == 6 and all(line.endswith("(no cached predictions: reused from its record)") for line in dry)
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID]) == 0
    captured = capsys.readouterr()
    assert f"warning: 6 of the grid's finished runs have no cached predictions in {out / 'predictions'}" in captured.out
    assert "6 of 6 runs already finished" in captured.out
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # nothing retrained
    pd.testing.assert_frame_equal(metrics(out), metrics(reference_folder))
    # a seed added: its two runs train, the six copied ones stay as they are, the tables hold all eight
    more = GRID.copy()
    more.insert(more.index("--seeds") + 4, "3")
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *more]) == 0
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert len(list((out / "predictions").glob("*.npz"))) == 2 and len(pd.read_csv(out / "runs.csv")) == 8
    assert set(pd.read_csv(out / "selective.csv")["run_id"]) == set(pd.read_csv(out / "runs.csv")["run_id"])
    capsys.readouterr()
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--force", *GRID]) == 0
    assert "reused as they are" not in capsys.readouterr().out
    assert {p.name for p in (out / "predictions").glob("*.npz")} >= {
        p.name for p in (reference_folder / "predictions").glob("*.npz")}  # trained again: the same records
    pd.testing.assert_frame_equal(metrics(out)[metrics(out)["run_id"].isin(reference["run_id"])].reset_index(drop=True),
                                  metrics(reference_folder))


def test_report_leaves_out_a_run_whose_predictions_have_a_damaged_member(tmp_path, reference_folder, reference,
                                                                         capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out)
    run_id = reference["run_id"][0]
    damage_a_member(out / "predictions" / f"{run_id}.npz")
    capsys.readouterr()
    assert main(["report", "--out", str(out), "--no-plots", "--bootstrap", "50"]) == 0  # no traceback mid-report
    err = capsys.readouterr().err
    assert f"record {out / 'records' / f'{run_id}.json'} is corrupt (its scores" in err and "left out" in err
    assert set(pd.read_csv(out / "runs.csv")["run_id"]) == set(reference["run_id"]) - {run_id}


def test_report_on_a_folder_copied_without_its_predictions_keeps_every_table(tmp_path, reference_folder, capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out, ignore=shutil.ignore_patterns("predictions"))
    tables = {name: (reference_folder / name).read_bytes() for name in ("runs.csv", "selective.csv", "paired.csv")}
    capsys.readouterr()
    assert main(["report", "--out", str(out), "--no-plots"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"6 of 6 finished runs have no cached predictions in {out / 'predictions'}" in err
    assert "for 6 of them, their selective-prediction metrics from the last selective.csv" in err
    # the records' metrics and the last selective.csv's rows: the same tables, byte for byte
    assert {name: (out / name).read_bytes() for name in tables} == tables
    summary, reference_summary = pd.read_csv(out / "summary.csv"), pd.read_csv(reference_folder / "summary.csv")
    assert list(summary.columns) == list(reference_summary.columns)
    pd.testing.assert_frame_equal(summary, reference_summary, rtol=1e-8)  # selective.csv keeps 10 digits

    (out / "selective.csv").unlink()  # nor the selective table: the records' metrics alone
    assert main(["report", "--out", str(out), "--no-plots"]) == 0
    assert "for 0 of them" in capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv")
    pd.testing.assert_frame_equal(metrics(out), metrics(reference_folder))
    assert not any(c.startswith("augrc_") for c in runs.columns) and pd.read_csv(out / "selective.csv").empty
    paired = pd.read_csv(out / "paired.csv").set_index("metric")
    assert paired.loc["augrc_one_minus_max_prob", "note"] == "no run of either row has a value of augrc_one_minus_max_prob"

    (out / "predictions").mkdir(exist_ok=True)  # one run's scores back: its selective rows are computed again
    shutil.copy(sorted((reference_folder / "predictions").glob("*.npz"))[0], out / "predictions")
    assert main(["report", "--out", str(out), "--no-plots"]) == 0
    assert "5 of 6 finished runs have no cached predictions" in capsys.readouterr().err
    assert set(pd.read_csv(out / "selective.csv")["run_id"]) == {sorted((out / "predictions").glob("*.npz"))[0].stem}


@pytest.mark.parametrize("damage", ["older", "empty", "garbage", "numeric_ids"])
def test_a_folder_without_predictions_reads_what_its_last_selective_table_holds(damage, tmp_path, reference_folder,
                                                                               capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out, ignore=shutil.ignore_patterns("predictions"))
    last = pd.read_csv(reference_folder / "selective.csv", dtype={"run_id": str})
    if damage == "older":  # written before smECE
        last.drop(columns="smece").to_csv(out / "selective.csv", index=False)
    elif damage == "empty":
        (out / "selective.csv").write_text("")
    elif damage == "garbage":
        (out / "selective.csv").write_text("no,table\nhere\n")
    else:  # run ids that read as numbers unless read as text
        ids = {run_id: f"{i}{i}{i}" for i, run_id in enumerate(sorted(last["run_id"].unique()), start=1)}
        for old, new in ids.items():
            (out / "records" / f"{old}.json").write_text(
                (out / "records" / f"{old}.json").read_text().replace(f'"{old}"', f'"{new}"'))
            (out / "records" / f"{old}.json").rename(out / "records" / f"{new}.json")
        last.assign(run_id=last["run_id"].map(ids)).to_csv(out / "selective.csv", index=False)
    capsys.readouterr()
    assert main(["report", "--out", str(out), "--no-plots"]) == 0
    kept = {"older": 6, "empty": 0, "garbage": 0, "numeric_ids": 6}[damage]
    assert f"for {kept} of them, their selective-prediction metrics" in capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv")
    assert ("augrc_one_minus_max_prob" in runs) == bool(kept)
    if damage == "older":
        assert "smece_one_minus_max_prob" not in runs
    pd.testing.assert_frame_equal(metrics(out).drop(columns="run_id"), metrics(reference_folder).drop(columns="run_id"))


def test_report_on_a_folder_whose_records_are_all_corrupt_rewrites_nothing(tmp_path, reference_folder, capsys):
    out = tmp_path / "out"
    shutil.copytree(reference_folder, out)
    for path in (out / "records").glob("*.json"):
        path.write_text(path.read_text()[:40])  # cut off mid-write
    tables = {p.name: p.read_bytes() for p in out.glob("*.csv")}
    capsys.readouterr()
    assert main(["report", "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no record in {out / 'records'} can be read, so no table was rewritten: 6 are corrupt" in err
    assert "not valid JSON" in err and tables and {p.name: p.read_bytes() for p in out.glob("*.csv")} == tables


def test_grid_order_does_not_change_results(tiny_data, tmp_path, reference):
    reversed_grid = GRID.copy()
    i = reversed_grid.index("--seeds")
    reversed_grid[i + 1:i + 4] = ["2", "1", "0"]
    j = reversed_grid.index("--methods")
    reversed_grid[j + 1:j + 3] = ["mc_dropout", "deep_ensemble"]
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *reversed_grid]) == 0
    pd.testing.assert_frame_equal(metrics(out), reference)


def test_worker_processes_give_the_same_records(tiny_data, tmp_path, reference):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", "--jobs", "2", *GRID]) == 0
    pd.testing.assert_frame_equal(metrics(out), reference)
    assert set(pd.read_csv(out / "runs.csv")["threads"]) == {max(1, (os.cpu_count() or 1) // 2)}


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_dask_cluster_gives_the_same_records(tiny_data, tmp_path, reference):
    pytest.importorskip("dask.distributed")
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", "--dask", "local",
                 "--jobs", "2", *GRID]) == 0
    pd.testing.assert_frame_equal(metrics(out), reference)


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_dask_scheduler_address_that_answers_nothing_is_one_line(tiny_data, tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    code = main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), "-q", "--dask",
                 "tcp://127.0.0.1:9", *GRID])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err and err.count("\n") == 1


@pytest.mark.parametrize("jobs, problem", [("0", "is out of range"), ("-1", "is out of range"),
                                           ("two", "is not valid")])
def test_bad_jobs_value(jobs, problem, tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--jobs", jobs]) == 2
    assert f"execution: jobs='{jobs}' {problem}; allowed: an integer >= 1" in capsys.readouterr().err


@pytest.fixture
def own_data(tmp_path):
    return write_both(tmp_path / "data")


def test_truncated_file_is_named(own_data):
    path = own_data / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match=f"{path} is truncated or corrupt: its header promises"):
        check_dataset_files(own_data, "mnist", download=False)


def test_file_that_is_not_idx_is_named(own_data):
    path = own_data / "FashionMNIST" / "raw" / "train-labels-idx1-ubyte"
    path.write_bytes(b"<html>404</html>")
    with pytest.raises(DataError, match=f"{path} is corrupt: not an IDX labels file"):
        check_dataset_files(own_data, "fashion_mnist", download=False)


def test_images_and_labels_must_agree(own_data):
    import numpy as np
    from idx import write_idx_labels
    write_idx_labels(own_data / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", np.zeros(7, dtype=int))
    with pytest.raises(DataError, match="t10k images and labels disagree in count"):
        check_dataset_files(own_data, "mnist", download=False)


def test_official_sized_file_with_a_wrong_checksum_is_named(own_data):
    import struct
    path = own_data / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    path.write_bytes(struct.pack(">ii", 2049, 10000) + bytes(10000))  # official size, wrong bytes
    with pytest.raises(DataError, match=f"{path} is corrupt: md5 differs from the official file's"):
        check_dataset_files(own_data, "mnist", download=False)


def test_corrupt_data_through_the_cli_is_one_line(own_data, tmp_path, capsys):
    path = own_data / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:1000])
    assert main(["run", "--data-dir", str(own_data), "--out", str(tmp_path / "out"), "-q", *GRID]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} is truncated or corrupt" in err


def test_dry_run_lists_the_grid_and_trains_nothing(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--dry-run", *GRID]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "6 runs in the grid, 6 to do" and sum("to do" in line for line in lines[:-1]) == 6
    assert not list((out / "records").glob("*.json"))
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", *GRID[:4], "0",
                 *GRID[7:]]) == 0  # seed 0 only
    capsys.readouterr()
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--dry-run", *GRID]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "6 runs in the grid, 4 to do"


def test_a_folder_copied_without_its_predictions_renders_the_same_tables(tiny_data, tmp_path):
    """A light clone (results/**/predictions/ left out) re-renders every table byte for byte: the selective
    metrics it reads back from selective.csv are the values the full folder computed, at that precision."""
    import shutil
    out = tmp_path / "full"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "2", "--epochs", "1",
                 "--val-size", "50", "--hidden", "8", "--methods", "deep_ensemble", "single_network", "-o",
                 "deep_ensemble.members=2", "--no-download", "--no-plots", "-q"]) == 0
    light = tmp_path / "light"
    shutil.copytree(out, light, ignore=shutil.ignore_patterns("predictions"))
    assert main(["report", "--out", str(light), "--no-plots"]) == 0
    assert main(["report", "--out", str(out), "--no-plots"]) == 0
    for name in ("runs.csv", "summary.csv", "selective.csv", "paired.csv", "ood.csv", "summary.md"):
        assert (light / name).read_bytes() == (out / name).read_bytes(), name
