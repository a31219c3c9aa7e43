"""Many workers on one results folder: claims, heartbeats, takeover of a dead worker's runs, the
record schema, and commands that split one grid (bench.execution.claims)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.cli.main import main
from bench.execution.claims import Claims, RunsToDo
from bench.provenance import worker_name
from bench.store import RECORD_SCHEMA, NewerSchema, RunStore

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_1 = ROOT / "results" / "paper-fmnist"    # written by dare-bench 0.2.0: no schema field
SCHEMA_2 = Path(__file__).parents[1] / "records" / "schema-2"  # a tiny run's folder, written by 0.4.0


# ---- claims, in one process --------------------------------------------------------------------

def test_a_claim_is_exclusive_until_released(tmp_path):
    first, second = Claims(tmp_path, timeout=60), Claims(tmp_path, timeout=60)
    assert first.acquire("run1") and not second.acquire("run1")
    assert first.acquire("run1")  # its own claim: still held
    claim = second.held_by_others(["run1", "run2"])["run1"]
    assert claim.worker == worker_name() and claim.heartbeat_age < 5 and not claim.stale(60)
    first.release("run1")
    assert not (tmp_path / "claims" / "run1.json").exists() and second.acquire("run1")
    first.release("run1")  # not its claim any more: left alone
    assert (tmp_path / "claims" / "run1.json").exists()


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_stale_claim_is_taken_over_once_and_said_in_one_line(tmp_path):
    lines = []
    dead, taker, late = Claims(tmp_path, 10), Claims(tmp_path, 10, log=lines.append), Claims(tmp_path, 10)
    assert dead.acquire("run1")
    path = tmp_path / "claims" / "run1.json"
    age(path, 5)
    assert not taker.acquire("run1")  # 5 s without a heartbeat is within the timeout
    age(path, 11)
    stale_ns = path.stat().st_mtime_ns
    assert taker.acquire("run1")
    assert len(lines) == 1 and re.fullmatch(rf"took over run run1 from {worker_name()}: no heartbeat for 11 s "
                                            r"\(claim timeout 10 s\)", lines[0])
    assert json.loads(path.read_text())["token"] == taker.token
    assert not late.acquire("run1")  # the new claim is live
    # a worker that saw the same stale claim finds the takeover marker and moves on
    assert (tmp_path / "claims" / f"run1.{stale_ns}.takeover1").exists()
    taker.release("run1")
    assert not list((tmp_path / "claims").iterdir())


def test_a_dead_takers_marker_leads_to_the_next_level(tmp_path):
    dead, taker, other = Claims(tmp_path, 10), Claims(tmp_path, 10), Claims(tmp_path, 10)
    assert dead.acquire("run1")
    path = tmp_path / "claims" / "run1.json"
    age(path, 20)
    marker = tmp_path / "claims" / f"run1.{path.stat().st_mtime_ns}.takeover1"
    marker.touch()  # another taker won the takeover, then died before it wrote its claim
    assert not taker.acquire("run1")  # its marker is recent: that taker may still be writing
    age(marker, 20)
    assert taker.acquire("run1") and marker.exists()  # the next level, never a marker removed under a live taker
    assert (tmp_path / "claims" / f"run1.{marker.name.split('.')[1]}.takeover2").exists()
    assert not other.acquire("run1")
    taker.release("run1")
    assert not list((tmp_path / "claims").iterdir())


def test_a_claim_is_stale_only_after_three_of_its_holders_heartbeats(tmp_path):
    slow = Claims(tmp_path, timeout=100)  # touches its claims every 10 s
    assert slow.acquire("run1")
    age(tmp_path / "claims" / "run1.json", 20)
    assert not Claims(tmp_path, timeout=5).acquire("run1")  # a shorter timeout does not rob it


def test_heartbeats_keep_a_claim_live_and_the_end_releases_it(tmp_path):
    with Claims(tmp_path, timeout=1.0).holding() as claims:  # a heartbeat every 0.1 s
        assert claims.acquire("run1")
        time.sleep(2.5)  # more than twice the timeout: the heartbeat kept it fresh
        assert Claims(tmp_path, timeout=1.0).held_by_others(["run1"])
    assert not (tmp_path / "claims" / "run1.json").exists()


def test_a_heartbeat_notices_a_claim_taken_over(tmp_path):
    lines = []
    claims, other = Claims(tmp_path, 10, log=lines.append), Claims(tmp_path, 10)
    assert claims.acquire("run1")
    age(tmp_path / "claims" / "run1.json", 60)
    assert other.acquire("run1")
    claims.beat()
    claims.beat()
    assert len(lines) == 1 and lines[0].startswith("warning: the claim on run run1 was taken over")
    assert json.loads((tmp_path / "claims" / "run1.json").read_text())["token"] == other.token


def test_a_claim_released_during_a_heartbeat_raises_no_alarm(tmp_path, monkeypatch):
    lines = []
    claims = Claims(tmp_path, 10, log=lines.append)
    assert claims.acquire("run1")
    real_read = claims.read

    def read_after_release(run_id):  # the record is written and the claim released while the beat looks
        monkeypatch.setattr(claims, "read", real_read)
        claims.release(run_id)
        return real_read(run_id)

    monkeypatch.setattr(claims, "read", read_after_release)
    claims.beat()
    assert not lines


def test_a_claims_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "claims").write_text("a file where the folder goes")
    with pytest.raises(Exception, match="cannot create the claims folder"):
        Claims(tmp_path).acquire("run1")


def write_record(store: RunStore, run_id: str, status: str) -> None:
    store.ensure()
    path = store.record_path(run_id)
    tmp = path.with_suffix(".tmp")  # written as the store writes: a new file renamed into place
    tmp.write_text(json.dumps({"run_id": run_id, "status": status, "config_columns": [], "error": "x"}))
    os.replace(tmp, path)


def test_runs_to_do_are_read_from_the_records(tmp_path):
    store = RunStore(tmp_path)
    for run_id, status in [("old_error", "error"), ("old_diverged", "diverged"), ("rewritten", "diverged")]:
        write_record(store, run_id, status)
    ids = ["missing", "old_error", "old_diverged", "rewritten", "new_error"]
    todo, forced = RunsToDo.at_start(store, ids), RunsToDo.at_start(store, ids, force=True)
    write_record(store, "new_error", "error")  # other workers' results during this grid
    write_record(store, "rewritten", "diverged")
    assert todo.needs("missing") and todo.needs("old_error")  # an error before this grid runs again
    assert not todo.needs("new_error")  # another worker's result of this grid: not run twice
    assert not todo.needs("old_diverged") and not todo.needs("rewritten")
    assert forced.needs("old_diverged") and forced.needs("old_error")  # --force: every record the grid found
    assert not forced.needs("new_error") and not forced.needs("rewritten")  # but none written since


# ---- the record schema ---------------------------------------------------------------------------

@pytest.mark.parametrize("folder, schema", [(SCHEMA_1, 1), (SCHEMA_2, 2)], ids=["schema-1", "schema-2"])
def test_a_committed_record_of_each_schema_is_read(folder, schema, tmp_path):
    run_id = sorted(p.stem for p in (folder / "records").glob("*.json"))[0]
    out = tmp_path / "out"
    for sub in ("records", "predictions"):
        (out / sub).mkdir(parents=True)
        for path in (folder / sub).glob(f"{run_id}.*"):
            shutil.copy(path, out / sub)
    raw = json.loads((out / "records" / f"{run_id}.json").read_text())
    assert raw.get("schema", 1) == schema
    store = RunStore(out)
    record = store.load(run_id)
    assert record["status"] == "ok" and isinstance(record["id_acc"], float)
    tables = store.write_tables()
    assert not tables.problems and list(tables.runs["run_id"]) == [run_id] and tables.summary["n"].tolist() == [1]
    assert "schema" not in tables.runs and "worker" not in tables.runs  # record-only fields: the tables stay as they were


def test_a_record_of_a_newer_schema_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(SCHEMA_2, out)
    path = next((out / "records").glob("*.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema": RECORD_SCHEMA + 1,
                                "harness_version": "9.0.0"}))
    with pytest.raises(NewerSchema, match=rf"has record schema {RECORD_SCHEMA + 1} \(written by dare-bench 9.0.0\); "
                       rf"this dare-bench \S+ reads schemas 1 to {RECORD_SCHEMA}"):
        RunStore(out).load(path.stem)
    assert main(["report", "--out", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"record schema {RECORD_SCHEMA + 1}" in err
    assert json.loads(path.read_text())["schema"] == RECORD_SCHEMA + 1  # never redone or rewritten


def test_every_record_written_says_its_schema(tmp_path):
    store = RunStore(tmp_path)
    store.add({"run_id": "r", "status": "diverged"}, None)
    record = json.loads(store.record_path("r").read_text())
    assert record["schema"] == RECORD_SCHEMA


# ---- workers as processes ------------------------------------------------------------------------

def grid(epochs: int, seeds=("0", "1", "2")) -> list[str]:
    return ["--methods", "deep_ensemble", "-o", "members=2", "--seeds", *seeds, "--epochs", str(epochs),
            "--val-size", "50", "--early-stop-acc", "none", "--no-download", "--no-plots"]


SIX = [*grid(8, [str(s) for s in range(6)]), "--pack-size", "1"]  # six short runs, one by one
METRICS = ["run_id", "id_acc", "id_nll_nats", "auroc_pred_entropy_vs_fashion_mnist", "id_ece"]


def metrics(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "runs.csv")[METRICS].sort_values("run_id").reset_index(drop=True)


class Worker:
    """`python -m bench run` in its own process; its output collected as it comes."""

    def __init__(self, data: Path, out: Path, args: list[str], quiet: bool = False):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "bench", "run", "--data-dir", str(data), "--out",
                                      str(out), "--threads", "1", *(["-q"] if quiet else []), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def wait_for(self, condition, what: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if condition():
                return
            if self.proc.poll() is not None:
                pytest.fail(f"the worker ended before {what}: {self.text}")
            time.sleep(0.02)
        pytest.fail(f"no {what} in time")

    def wait_for_line(self, part: str) -> None:
        self.wait_for(lambda: any(part in line for line in list(self.lines)), f"line with {part!r}")

    def finish(self) -> str:
        """Wait for the exit (status 0 required); the whole output."""
        code = self.proc.wait(timeout=300)
        self.reader.join(timeout=60)
        assert code == 0, self.text
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.lines)


def trained_lines(output: str) -> list[str]:
    """The per-run lines a worker prints for each run it trained."""
    return [line for line in output.splitlines() if re.match(r"\S+\(.*\) seed \d+: (acc|error|diverged)", line)]


def claim_files(out: Path) -> list[Path]:
    return list((out / "claims").glob("*.json"))


def records(out: Path) -> list[Path]:
    return list((out / "records").glob("*.json"))


def others_line(n: int, pid: int) -> str:
    host = worker_name().rsplit(" pid ", 1)[0]
    return f"{n} run{'s' if n > 1 else ''} of this grid trained meanwhile by other workers on the same folder: " \
           f"{host} pid {pid} ({n})"


def run_here(data: Path, out: Path, args: list[str]) -> None:
    """`bench run` as a Worker runs it (one thread), in this process: one interpreter start fewer."""
    threads = torch.get_num_threads()
    try:
        assert main(["run", "--data-dir", str(data), "--out", str(out), "--threads", "1", *args]) == 0
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def one_worker(tiny_data, tmp_path_factory):
    """SIX trained by one worker, in this process: the records a shared folder must end with."""
    out = tmp_path_factory.mktemp("one_worker")
    run_here(tiny_data, out, ["-q", *SIX])
    return metrics(out)


def test_workers_on_one_folder_train_every_run_once(tiny_data, tmp_path, one_worker):
    out = tmp_path / "out"
    workers = [Worker(tiny_data, out, SIX) for _ in range(3)]  # more workers than cores: they contend
    outputs = [w.finish() for w in workers]
    trained = [line for output in outputs for line in trained_lines(output)]
    assert len(trained) == 6 and len(set(trained)) == 6  # every run once, by one worker or another
    pd.testing.assert_frame_equal(metrics(out), one_worker)
    assert not list((out / "claims").iterdir())
    names = {json.loads(p.read_text())["worker"] for p in records(out)}
    assert names <= {f"{worker_name().rsplit(' pid ', 1)[0]} pid {w.pid}" for w in workers}


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_two_workers_split_a_grid_and_say_what_the_other_trained(tiny_data, tmp_path, one_worker):
    out = tmp_path / "out"
    first = Worker(tiny_data, out, SIX)
    first.wait_for(lambda: claim_files(out), "a claim")
    first.signal(signal.SIGSTOP)  # holds one claim, its process alive (so never taken over within the timeout)
    try:
        held = {p.stem for p in claim_files(out)} - {p.stem for p in records(out)}
        assert held, "the first worker must hold an unfinished run for this test to mean anything"
        second = Worker(tiny_data, out, SIX)
        second.wait_for_line("waiting for 1 run claimed by other workers")  # it trained the rest meanwhile
    finally:
        first.signal(signal.SIGCONT)
    first_text, second_text = first.finish(), second.finish()
    n_first, n_second = len(trained_lines(first_text)), len(trained_lines(second_text))
    assert n_first >= 1 and n_second >= 1 and n_first + n_second == 6
    assert others_line(n_second, second.pid) in first_text and others_line(n_first, first.pid) in second_text
    pd.testing.assert_frame_equal(metrics(out), one_worker)


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_a_second_command_waits_and_says_what_the_first_trained(tiny_data, tmp_path):
    out = tmp_path / "out"
    first = Worker(tiny_data, out, grid(15), quiet=True)
    first.wait_for(lambda: len(claim_files(out)) == 3, "claims")
    first.signal(signal.SIGSTOP)  # holds its claims while the second starts
    try:
        assert not records(out), "the first worker must still be training"
        second = Worker(tiny_data, out, grid(15))
        second.wait_for_line("waiting for 3 runs claimed by other workers")
    finally:
        first.signal(signal.SIGCONT)
    first.finish()
    text = second.finish()
    assert not trained_lines(text)  # 3 trainings in all, not 6
    assert others_line(3, first.pid) in text and len(records(out)) == 3


def killed_mid_pack(tiny_data, out: Path, args: list[str]) -> int:
    """Start a worker, SIGKILL it once it holds its three claims; its pid."""
    first = Worker(tiny_data, out, args, quiet=True)
    first.wait_for(lambda: len(claim_files(out)) == 3, "claims")
    first.signal(signal.SIGKILL)
    first.proc.wait(timeout=60)
    assert not records(out), "the worker must die mid-pack for this test to mean anything"
    assert len(claim_files(out)) == 3  # a killed worker cannot release its claims
    return first.pid


def check_finished(out: Path, text: str, took_over: str) -> None:
    assert len(re.findall(took_over, text)) == 3, text
    assert len(trained_lines(text)) == 3 and len(records(out)) == 3
    assert not list((out / "claims").iterdir())


def test_a_killed_workers_claims_on_this_machine_are_taken_over_at_once(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    pid = killed_mid_pack(tiny_data, out, grid(10))
    # the default timeout (5 min) does not apply: the claims' process is gone from this machine
    capsys.readouterr()
    run_here(tiny_data, out, grid(10))
    check_finished(out, capsys.readouterr().out, rf"took over run \w+ from \S+ pid {pid}: its process {pid} has ended")


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_a_dead_nodes_claims_are_waited_for_then_taken_over_after_the_timeout(tiny_data, tmp_path):
    out = tmp_path / "out"
    args = [*grid(15), "--claim-timeout", "3"]
    pid = killed_mid_pack(tiny_data, out, args)
    for path in claim_files(out):  # as if the worker had run on another machine
        path.write_text(json.dumps({**json.loads(path.read_text()), "host": "node-b", "machine": "another",
                                    "worker": f"node-b pid {pid}"}))
    stop = threading.Event()

    def heartbeats():
        while not stop.wait(0.2):
            for path in claim_files(out):
                os.utime(path)

    beating = threading.Thread(target=heartbeats)
    beating.start()  # the dead node's heartbeats go on until the second worker has seen its claims live
    try:
        second = Worker(tiny_data, out, args)
        second.wait_for_line(f"waiting for 3 runs claimed by other workers: node-b pid {pid} holds 3")
    finally:
        stop.set()
        beating.join()
    check_finished(out, second.finish(), rf"took over run \w+ from node-b pid {pid}: no heartbeat for \d+ s "
                   r"\(claim timeout 3 s\)")


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
@pytest.mark.parametrize("pack_size", ["1", "auto"])
def test_a_walk_split_across_two_workers_makes_the_sequential_choice(pack_size, tiny_data, tmp_path, capsys):
    args = ["--methods", "mod", "--seeds", "0", "--epochs", "8", "--val-size", "50", "-o", "members=2",
            "--select", "mod.lam=0,0.1,1,10,100", "--no-download", "--no-plots", "--pack-size", pack_size]
    sequential = tmp_path / "sequential"
    capsys.readouterr()
    run_here(tiny_data, sequential, args)
    alone_text = capsys.readouterr().out
    shared = tmp_path / "shared"
    workers = [Worker(tiny_data, shared, args) for _ in range(2)]
    outputs = [w.finish() for w in workers]

    def selection(out):
        sel = next(r for r in map(json.loads, map(Path.read_text, records(out))) if "candidates" in r)
        return sel["selected"], [c["run_id"] for c in sel["candidates"]], [c["val_nll_nats"] for c in sel["candidates"]]

    assert selection(shared) == selection(sequential)
    walked = selection(sequential)[1]
    assert len(trained_lines(alone_text)) == len(walked)
    assert len([line for output in outputs for line in trained_lines(output)]) == len(walked)  # each once


# ---- what the user sees ---------------------------------------------------------------------------

def test_dry_run_shows_who_holds_a_claim(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--dry-run", *grid(2)]
    assert main(args) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    holder = Claims(out, timeout=60)
    assert holder.acquire(ids[0]) and holder.acquire(ids[1])
    age(out / "claims" / f"{ids[1]}.json", 600)
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.search(rf"\(claimed by {re.escape(worker_name())}, heartbeat \d+ s ago\)$", lines[0])
    assert lines[1].endswith(f"(stale claim of {worker_name()}: no heartbeat for 10 min (claim timeout 300 s); "
                             "the grid takes it over)")
    assert lines[-1] == "3 runs in the grid, 3 to do; 1 of them claimed by other workers, 1 stale claim to take over"


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf"])
def test_a_bad_claim_timeout_is_one_line(value, tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--claim-timeout", value, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"claim_timeout='{value}'" in err and "a number of seconds > 0" in err
