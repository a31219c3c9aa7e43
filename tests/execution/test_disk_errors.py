"""A full disk, a quota or a permission problem in the middle of a command: one line naming the file
and how many finished runs the folder keeps, exit 2, nothing finished lost, no partial file, and the
same command goes on from there. The failure is made by making the store's writes fail."""
import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import store as store_module
from bench.cli.main import main

TINY = ["--epochs", "1", "--val-size", "50", "--hidden", "8", "--early-stop-acc", "none", "--no-download",
        "--no-plots", "-q", "--methods", "deep_ensemble", "-o", "members=1"]


def failing_after(monkeypatch, writes: int, code=errno.ENOSPC, name="predictions"):
    """The store's atomic writes into files whose path holds ``name`` fail with ``code`` once ``writes``
    of them have succeeded, from inside the write (as a full disk fails numpy's savez)."""
    real, done = store_module.atomic_write, []

    def write(path, fill):
        if name in str(path) and len(done) >= writes:
            def fail(f):
                f.write(b"partial")
                raise OSError(code, __import__("os").strerror(code))
            return real(path, fail)
        if name in str(path):
            done.append(path)
        return real(path, fill)
    monkeypatch.setattr(store_module, "atomic_write", write)


def leftovers(out):
    return sorted(p.name for p in out.rglob(".*.tmp"))


def test_a_full_disk_mid_grid_is_one_line_keeps_the_finished_runs_and_the_same_command_resumes(
        tiny_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "2", "3", *TINY]
    with monkeypatch.context() as patch:
        failing_after(patch, 2)
        assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "No space left on device; 2 finished runs kept in " + str(out / "records") in err
    assert str(out / "predictions") in err and err.rstrip().endswith("the same command goes on from there")
    kept = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert len(kept) == 2 and all(r["status"] == "ok" for r in kept)
    assert len(list((out / "predictions").glob("*.npz"))) == 2 and leftovers(out) == []
    assert main(args) == 0
    assert "2 of 4 runs already finished" in capsys.readouterr().out
    assert len(list((out / "records").glob("*.json"))) == 4


@pytest.fixture(scope="module")
def finished(tiny_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "--save-weights",
                 *TINY]) == 0
    return out


@pytest.mark.parametrize("command, code, name", [
    (["report", "--no-plots"], errno.EACCES, "summary"),
    (["evaluate", "--no-plots", "--ood-sets", "inverted", "--shifts", "none", "-q", "--no-download"], errno.ENOSPC,
     "records"),
    (["evaluate", "--no-plots", "--ood-sets", "none", "--shifts", "stripe", "-q", "--no-download"], errno.EROFS,
     "records"),
])
def test_report_and_evaluate_say_the_file_and_the_kept_runs_in_one_line(finished, tiny_data, tmp_path, monkeypatch,
                                                                       capsys, command, code, name):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    before = {p.name: p.read_bytes() for p in (out / "records").glob("*.json")}
    full = [*command, "--out", str(out)] + (["--data-dir", str(tiny_data)] if command[0] == "evaluate" else [])
    with monkeypatch.context() as patch:
        failing_after(patch, 1 if name == "records" else 0, code, name)
        assert main(full) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{__import__('os').strerror(code)}; 2 finished runs kept in {out / 'records'}" in err
    after = {p.name: p.read_bytes() for p in (out / "records").glob("*.json")}
    assert after.keys() == before.keys() and leftovers(out) == []
    for blob in after.values():
        json.loads(blob)  # every record whole: the old one or the new one
    assert main(full) == 0


def test_ablate_says_it_too(tiny_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    args = ["ablate", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", *TINY[:-1], "members=1,2"]
    with monkeypatch.context() as patch:
        failing_after(patch, 1, errno.EDQUOT)
        assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Disk quota exceeded; 1 finished run kept in" in err
    assert main(args) == 0 and len(list((out / "records").glob("*.json"))) == 2


def test_an_os_error_a_user_cannot_fix_keeps_its_traceback(tiny_data, tmp_path, monkeypatch):
    with monkeypatch.context() as patch:
        failing_after(patch, 0, errno.EIO)
        with pytest.raises(OSError, match="Input/output error"):
            main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path / "out"), "--seeds", "0", *TINY])


def test_output_piped_into_a_reader_that_stops_early_ends_quietly():
    """A closed pipe is an OSError too, but no error of the user's: `bench list | head -1` prints no traceback."""
    shell = subprocess.run(f"{sys.executable} -m bench list | head -1", shell=True, capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[2])
    assert shell.stdout.count("\n") == 1 and shell.stderr == ""
