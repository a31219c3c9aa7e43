"""Packs (bench.training.packs): runs that train as one stacked computation give the runs' results, bit for
bit, and a network that goes non-finite leaves the others untouched."""
import dataclasses
import json
import re

import pandas as pd
import pytest
import torch

from bench.models.registry import ArchSpec
from bench.cli.main import main
from bench.config import make_protocol, make_run_config
from bench.conformance import toy_split
from bench.options import option, parse_int
from bench.training.packs import make_packs, pack_key, packed_method
from bench.training.loop import Diverged, TrainResult, train, train_pack
from methods import REGISTRY
from methods.deep_ensemble import DeepEnsemble

# Every layer's per-network parameter count is a multiple of 32: fused Adam's vectorised loop (two
# AVX-512 vectors) then never splits one network between its vector body and its scalar tail, whose
# roundings differ. With other shapes a packed network can differ from the same network alone by an
# ulp in a few parameters (see the last test and docs/performance.md).
PROTOCOL = make_protocol({"hidden": (32, 32), "epochs": 6, "batch_size": 16, "early_stop_acc": 0.9,
                          "val_size": 24})
TRAIN, VAL = toy_split(128, 32, 32, seed=1, separation=4.0), toy_split(24, 32, 32, seed=2, separation=4.0)


def alone(method, seed):
    try:
        return train(method, PROTOCOL, TRAIN, 32, seed, progress=False, val=VAL)
    except Diverged as exc:
        return exc


def assert_same(a, b):
    if isinstance(a, Diverged):
        assert isinstance(b, Diverged) and a.epoch == b.epoch
        return
    assert isinstance(b, TrainResult)
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), name  # parameters, and buffers such as SWAG's moments
    for field in ("epochs_run", "history", "kept_epochs", "val_loss", "param_abs_mean", "nonfinite_epochs"):
        assert getattr(a, field) == getattr(b, field), field


@pytest.mark.parametrize(("name", "runs"), [
    ("deep_ensemble", [({"members": 1}, 0), ({"members": 3}, 1), ({"members": 2, "checkpoint": "best"}, 2)]),
    ("dare", [({"members": 2, "threshold": 0.3}, 0), ({"members": 2, "threshold": 1.0}, 0),
              ({"members": 3, "threshold": 0.05, "checkpoint": "last_below_threshold"}, 1)]),
    ("anchor_net", [({"members": 2, "sigma": 0.1, "lam": 10.0}, 0), ({"members": 2, "sigma": 1.0, "lam": 0.1}, 1)]),
    ("single_network", [({}, 0), ({}, 1), ({}, 2)]),
    ("laplace", [({"members": 2}, 0), ({"members": 3}, 1)]),
    ("mc_dropout", [({"dropout": 0.2}, 0), ({"dropout": 0.5}, 1), ({"dropout": 0.2}, 2)]),
    ("swag", [({"members": 2, "moments": 3, "rank": 2}, 0), ({"members": 1, "moments": 3, "rank": 2}, 1)]),
    ("snapshot_ensemble", [({"members": 3}, 0), ({"members": 3}, 1), ({"members": 3}, 2)]),
])
def test_a_pack_trains_each_run_as_it_trains_alone(name, runs):
    cls = REGISTRY[name]
    methods = [cls(**{**options, "checkpoint": options.get("checkpoint", "none")}) for options, _ in runs]
    if len({m.checkpoint for m in methods}) > 1:  # the checkpoint rule is shared by a pack
        methods = [dataclasses.replace(m, checkpoint=methods[-1].checkpoint) for m in methods]
    packed = train_pack([(m, seed) for m, (_, seed) in zip(methods, runs)], packed_method(methods), PROTOCOL,
                        TRAIN, 32, progress=False, val=VAL)
    for method, (_, seed), result in zip(methods, runs, packed):
        assert_same(alone(method, seed), result)


def poison_option():
    return option(0, parse=parse_int, allowed="an integer >= 0", help="the step it breaks at")


def poisoned_scale(cls, poison, task_loss, step_of=lambda calls: calls):
    """Per network: NaN where its ``poison`` step (> 0) has come (``step_of`` the class's penalty calls
    so far, this one included), else 0. Multiplied into a penalty term: a NaN gradient for those only."""
    cls._steps = getattr(cls, "_steps", 0) + 1
    broken = (torch.as_tensor(poison) > 0) & (torch.as_tensor(poison) <= step_of(cls._steps))
    return torch.where(broken, torch.full_like(task_loss, float("nan")), torch.zeros_like(task_loss))


@dataclasses.dataclass(frozen=True)
class Poisoned(DeepEnsemble):
    """A deep ensemble whose members go non-finite from the step ``poison`` on (0: never)."""
    name = "poisoned"
    summary = "goes non-finite on purpose"
    packable = True
    pack_options = ("poison",)
    poison: int = poison_option()

    def penalty(self, model, task_loss, batch):
        scale = poisoned_scale(Poisoned, self.poison, task_loss, lambda calls: calls // 2 + 1)
        return model.weights[0].flatten(1).sum(1) * scale


def test_a_network_that_goes_non_finite_leaves_the_others_untouched():
    runs = [Poisoned(members=2, checkpoint="best"), Poisoned(members=2, poison=3, checkpoint="best"),
            Poisoned(members=1, checkpoint="best")]
    Poisoned._steps = 0
    packed = train_pack([(m, s) for m, s in zip(runs, (0, 1, 2))], packed_method(runs), PROTOCOL, TRAIN, 32,
                        progress=False, val=VAL)
    assert isinstance(packed[1], Diverged)
    for method, seed, result in [(runs[0], 0, packed[0]), (runs[2], 2, packed[2])]:
        assert_same(alone(method, seed), result)


def test_runs_pack_by_method_protocol_and_fixed_options_across_seeds_and_splits():
    protocol = make_protocol({"split_seed": "run", "val_size": 10})
    configs = [make_run_config("dare", {"members": m, "threshold": t}, protocol, s)
               for s in (0, 1) for m in (1, 3) for t in (0.1, 0.3)]
    configs += [make_run_config("dare", {"members": 2, "threshold": 0.1, "loss": "mse"}, protocol, 0),
                make_run_config("mod", {"members": 2, "lam": 0.1}, protocol, 0),
                make_run_config("mod", {"members": 2, "lam": 1.0}, protocol, 1),
                make_run_config("mod", {"members": 3}, protocol, 0),
                make_run_config("batch_ensemble", {}, protocol, 0), make_run_config("batch_ensemble", {}, protocol, 1),
                make_run_config("batch_ensemble", {"members": 2}, protocol, 1)]
    packs = make_packs(configs, max_networks=16)
    # seeds 0 and 1 pack although their splits differ; loss=mse is another part of the (mixed) pack;
    # a joint method's part holds runs of equal member counts only; BatchEnsemble (its own model)
    # packs with its own method only
    assert [[(c.method, c.seed, c.method_options["members"]) for c in p] for p in packs] == [
        [("dare", s, m) for s in (0, 1) for m in (1, 1, 3, 3)],
        [("dare", 0, 2), ("mod", 0, 2), ("mod", 1, 2), ("mod", 0, 3)],
        [("batch_ensemble", 0, 4), ("batch_ensemble", 1, 4)], [("batch_ensemble", 1, 2)]]
    assert [c.method_options["threshold"] for c in packs[0]] == [0.1, 0.3] * 4
    mixed = packed_method([c.built_method for c in packs[1]])
    assert [(type(m).__name__, a, b) for m, a, b in mixed.parts] == [("DARE", 0, 2), ("MOD", 2, 6), ("MOD", 6, 9)]
    assert mixed.runs == (1, 2, 1)
    assert [len(p) for p in make_packs(configs[:4], max_networks=5)] == [3, 1]  # 1 + 1 + 3 networks, then 3
    assert [len(p) for p in make_packs(configs[:4], max_networks=1)] == [1, 1, 1, 1]


SPLITS = {seed: (toy_split(128, 32, 32, seed=10 + seed, separation=4.0), toy_split(24, 32, 32, seed=20 + seed,
                                                                                  separation=4.0))
          for seed in (0, 1, 2)}


def test_runs_whose_splits_differ_train_in_one_pack_as_each_trains_alone():
    # split_seed = run: each seed its own train and validation split, one pack
    methods = [DeepEnsemble(members=2, checkpoint="best"), DeepEnsemble(members=1, checkpoint="best"),
               DeepEnsemble(members=3, checkpoint="best")]
    seeds = (0, 1, 2)
    packed = train_pack([(m, s) for m, s in zip(methods, seeds)], packed_method(methods), PROTOCOL,
                        [SPLITS[s][0] for s in seeds], 32, progress=False, val=[SPLITS[s][1] for s in seeds])
    for method, seed, result in zip(methods, seeds, packed):
        train_split, val_split = SPLITS[seed]
        assert_same(train(method, PROTOCOL, train_split, 32, seed, progress=False, val=val_split), result)


@pytest.mark.parametrize(("name", "runs"), [
    ("mod", [({"members": 2, "lam": 0.1}, 0), ({"members": 2, "lam": 1.0}, 1), ({"members": 2, "lam": 0.1}, 2)]),
    ("negcorr", [({"members": 3, "lam": 0.5}, 0), ({"members": 3, "lam": 0.01}, 1)]),
    ("rde", [({"members": 2}, 0), ({"members": 2}, 1), ({"members": 2}, 2)]),
    ("batch_ensemble", [({"members": 3}, 0), ({"members": 3}, 1), ({"members": 3}, 2)]),
    ("batch_ensemble", [({"members": 2, "rank1_init": "random_sign"}, 0),
                        ({"members": 2, "rank1_init": "random_sign"}, 2)]),
    ("packed_ensemble", [({"members": 2}, 0), ({"members": 2}, 1), ({"members": 2}, 2)]),
    ("packed_ensemble", [({"members": 3, "gamma": 2, "alpha": 3.0}, 1),
                         ({"members": 3, "gamma": 2, "alpha": 3.0}, 2)]),
    ("mimo", [({"members": 3}, 0), ({"members": 3}, 1), ({"members": 3}, 2)]),
    ("mimo", [({"members": 2, "input_repetition": 0.5, "batch_repetition": 2}, 0),
              ({"members": 2, "input_repetition": 0.5, "batch_repetition": 2}, 1)]),
    ("mimo", [({"members": 1}, 0), ({"members": 1}, 1)]),
])
def test_a_pack_of_joint_runs_trains_each_run_as_it_trains_alone(name, runs):
    # each run keeps its unit: its members share the run's batches, its term, its checkpoint and stop
    methods = [REGISTRY[name](**options, checkpoint="best") for options, _ in runs]
    seeds = [seed for _, seed in runs]
    packed = train_pack([(m, s) for m, s in zip(methods, seeds)], packed_method(methods), PROTOCOL,
                        [SPLITS[s][0] for s in seeds], 32, progress=False, val=[SPLITS[s][1] for s in seeds])
    for method, seed, result in zip(methods, seeds, packed):
        train_split, val_split = SPLITS[seed]
        assert_same(train(method, PROTOCOL, train_split, 32, seed, progress=False, val=val_split), result)
    assert all(len(set(r.epochs_run)) == 1 for r in packed)  # a run's members stop together


def test_a_packed_grid_writes_the_records_of_the_run_by_run_grid(tiny_data, tmp_path):
    grid = ["--data-dir", str(tiny_data), "--seeds", "0", "1", "--epochs", "2", "--val-size", "50", "--hidden", "8",
            "--batch-size", "32", "--no-download", "--no-plots", "-q", "--methods", "deep_ensemble", "dare",
            "single_network", "-o", "members=1,2", "-o", "dare.threshold=0.1,1", "-o", "checkpoint=best"]
    assert main(["run", "--out", str(tmp_path / "alone"), "--pack-size", "1", *grid]) == 0
    assert main(["run", "--out", str(tmp_path / "packed"), *grid]) == 0
    execution = {"train_seconds", "eval_seconds", "finished_at", "pack_id", "pack_runs", "pack_networks"}

    def records(folder):
        return {p.name: {k: v for k, v in json.loads(p.read_text()).items() if k not in execution}
                for p in (tmp_path / folder / "records").glob("*.json")}

    alone, packed = records("alone"), records("packed")
    assert alone.keys() == packed.keys()
    for run_id, record in alone.items():  # bitwise here; an ulp apart where fused Adam's tails differ
        for key, value in record.items():
            if isinstance(value, float):
                assert packed[run_id][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
            elif key != "history":
                assert packed[run_id][key] == value, key
    runs = pd.read_csv(tmp_path / "packed" / "runs.csv")
    assert set(pd.read_csv(tmp_path / "alone" / "runs.csv")["pack_runs"]) == {1}
    # one split for both seeds (split_seed 0): the three methods mix, and all 14 runs make one pack
    assert set(runs["pack_runs"]) == {14} and set(runs["pack_networks"]) == {12 + 6 + 2}


def test_a_grid_ends_with_its_efficiency_line_and_row(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    grid = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "--epochs", "2",
            "--val-size", "50", "--hidden", "8", "--early-stop-acc", "none", "--no-download", "--no-plots",
            "--methods", "deep_ensemble", "-o", "members=2"]
    assert main(grid) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if "TFLOP in" in x]
    assert len(line) == 1 and "of the" in line[0] and "GFLOP/s peak measured at start" in line[0]
    efficiency = pd.read_csv(out / "efficiency.csv")
    runs = pd.read_csv(out / "runs.csv")
    # 250 training images, 2 members x 2 epochs, MLP 784-8-10: forward and weight gradient of both
    # layers, input gradient of the second
    per_sample = 4 * (784 * 8 + 8 * 10) + 2 * 8 * 10
    assert runs["train_tflop"].tolist() == pytest.approx([per_sample * 250 * 4 / 1e12] * 2)
    assert efficiency["train_tflop"].tolist() == pytest.approx([runs["train_tflop"].sum()])
    row = efficiency.iloc[0]
    assert row["fraction_of_peak"] == pytest.approx(row["train_tflop"] * 1e3 / row["wall_seconds"]
                                                    / row["matmul_peak_gflops"])
    assert main(grid) == 0  # nothing to train: no peak measured, no row, no line
    assert len(pd.read_csv(out / "efficiency.csv")) == 1 and "TFLOP in" not in capsys.readouterr().out


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_packs_run_as_submitit_jobs_with_the_same_records(tiny_data, tmp_path):
    pytest.importorskip("submitit")
    grid = ["--data-dir", str(tiny_data), "--seeds", "0", "1", "--epochs", "1", "--val-size", "50", "--hidden", "8",
            "--no-download", "--no-plots", "-q", "--methods", "deep_ensemble", "single_network", "-o", "members=2",
            "--pack-size", "4"]  # the methods mix; 4 networks: a pack of each method's runs
    assert main(["run", "--out", str(tmp_path / "here"), *grid]) == 0
    quiet = grid.index("-q")
    assert main(["run", "--out", str(tmp_path / "jobs"), *grid[:quiet], *grid[quiet + 1:], "--submitit",
                 str(tmp_path / "logs"), "--submitit-cluster", "local", "--submitit-param", "timeout_min=10"]) == 0
    columns = ["run_id", "status", "id_acc", "auroc_pred_entropy_vs_fashion_mnist", "pack_runs"]
    here, jobs = (pd.read_csv(tmp_path / d / "runs.csv")[columns] for d in ("here", "jobs"))
    pd.testing.assert_frame_equal(here, jobs)
    assert set(jobs["pack_runs"]) == {2}
    jobs_dirs = [d for d in (tmp_path / "logs").iterdir() if d.name.isdigit()]
    assert len(jobs_dirs) == 2  # one job per pack
    for job in jobs_dirs:  # each job's log says how far its pack got (bench.training.loop.EpochLines)
        log = "".join(p.read_text() for p in job.glob("*_log.err"))
        assert re.search(r"pack of 2 \w+ runs \(\d networks\): epoch 1/1 after", log), log


def test_kept_weights_are_saved_and_score_the_run_again(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "--epochs", "1",
                 "--val-size", "50", "--hidden", "8", "--no-download", "--no-plots", "-q", "--methods",
                 "deep_ensemble", "-o", "members=2", "--save-weights"]) == 0
    from bench.config import make_protocol as protocol_of
    from bench.data.loaders import load_benchmark_data
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(p.stem for p in (out / "weights").glob("*.pt")) == sorted(runs["run_id"])
    record = json.loads((out / "records" / f"{runs['run_id'][0]}.json").read_text())
    protocol = protocol_of(record["config"]["protocol"])
    data = load_benchmark_data(protocol, tiny_data, False, record["seed"])
    method = REGISTRY["deep_ensemble"](**record["config"]["method_options"])
    model = method.build_model(0, [0, 1], ArchSpec.mlp(784, protocol.hidden, 10, protocol.init))
    model.load_state_dict(torch.load(out / "weights" / f"{record['run_id']}.pt"))
    import numpy as np
    with np.load(out / "predictions" / f"{record['run_id']}.npz") as saved:
        assert np.array_equal(method.predict_proba(model, data.test.x).mean(0).argmax(1).numpy(), saved["id_pred"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_pack_trains_on_the_gpu_as_on_the_cpu_within_float_rounding():
    methods = [REGISTRY["dare"](members=2, threshold=t, checkpoint="best") for t in (0.3, 1.0)]
    runs = [(m, seed) for seed, m in enumerate(methods)]
    cpu = train_pack(runs, packed_method(methods), PROTOCOL, TRAIN, 32, progress=False, val=VAL)
    gpu = train_pack(runs, packed_method(methods, "cuda"), PROTOCOL, TRAIN, 32, progress=False, device="cuda",
                     val=VAL)
    for a, b in zip(cpu, gpu):
        assert a.epochs_run == b.epochs_run and a.kept_epochs == b.kept_epochs
        assert a.val_loss == pytest.approx(b.val_loss, rel=1e-3)
        assert next(b.model.parameters()).device.type == "cuda"


def test_a_selections_candidates_train_in_packs_and_the_walk_chooses_as_it_walks(tiny_data, tmp_path):
    grid = ["--data-dir", str(tiny_data), "--seeds", "0", "1", "--epochs", "2", "--val-size", "50", "--hidden", "8",
            "--batch-size", "32", "--no-download", "--no-plots", "-q", "--methods", "anchor_net", "-o", "members=2",
            "--split-seed", "run", "--select", "anchor_net.lam=0,1000,1e6,0.001"]
    assert main(["run", "--out", str(tmp_path / "walked"), "--pack-size", "1", *grid]) == 0
    assert main(["run", "--out", str(tmp_path / "packed"), *grid]) == 0

    def selections(folder):
        return {p.name: json.loads(p.read_text()) for p in (tmp_path / folder / "records").glob("sel-*.json")}

    walked, packed = selections("walked"), selections("packed")
    assert walked.keys() == packed.keys() and len(walked) == 2
    for name, sequential in walked.items():
        ahead = packed[name]
        assert ahead["selected"] == sequential["selected"] and ahead["walk"] == sequential["walk"]
        assert [c["run_id"] for c in ahead["candidates"]] == [c["run_id"] for c in sequential["candidates"]]
    trained = {p.stem for p in (tmp_path / "packed" / "records").glob("*.json") if not p.stem.startswith("sel-")}
    walked_ids = {c["run_id"] for s in packed.values() for c in s["candidates"]}
    assert trained == walked_ids  # nothing past a walk's stop is trained
    assert any(len(s["candidates"]) < 4 for s in packed.values()), "some walk should stop early for this test"
    runs = pd.read_csv(tmp_path / "packed" / "runs.csv").set_index("run_id")
    # the walks' first two candidates (trained whatever the scores) of both seeds, whose splits differ: one pack
    first_two = [c["run_id"] for s in packed.values() for c in s["candidates"][:2]]
    assert runs.loc[first_two, "pack_runs"].tolist() == [4] * 4 and runs.loc[first_two, "pack_id"].nunique() == 1


def test_a_capability_is_inherited_until_a_subclass_overrides_a_hook_it_vouches_for():
    class Relabelled(DeepEnsemble):  # options and labels only: the parent's step, so its capabilities
        summary = "a deep ensemble under another name"

    class Coupled(DeepEnsemble):  # a new penalty may couple members: it packs only if it says so
        def penalty(self, model, task_loss, batch):
            return None

    class Redeclared(Coupled):
        packable = True

    class Reshuffled(DeepEnsemble):  # a new lr schedule: still capturable (it runs between replays), not packable
        def lr_factor(self, step, total_steps):
            return 0.5

    # every built-in method but vi, whose weight draws come from torch's generator: its runs train one by one
    assert [name for name, cls in REGISTRY.items() if not cls.packs_runs()] == ["vi"] and len(REGISTRY) >= 15
    snapshots = [make_run_config("snapshot_ensemble", {"members": k}, make_protocol({"val_size": 10}), 0) for k in (3, 5)]
    assert pack_key(snapshots[0]) != pack_key(snapshots[1])  # its members are cycles: a pack shares them
    assert Relabelled.packs_runs() and Relabelled.capturable_steps()
    assert not Coupled.packs_runs() and not Coupled.capturable_steps()
    assert Redeclared.packs_runs() and not Redeclared.capturable_steps()
    assert not Reshuffled.packs_runs() and Reshuffled.capturable_steps()


SLOW_PLUGIN = '''
import dataclasses, os, pathlib, time
from methods.deep_ensemble import DeepEnsemble

@dataclasses.dataclass(frozen=True)
class Slow(DeepEnsemble):
    """A deep ensemble that, while DARE_BENCH_TEST_MARKER is set, says it is training and then
    trains slowly, so that a test can kill it mid-pack."""
    name = "slow"
    summary = "a deep ensemble slowed down on purpose"
    packable = True

    def penalty(self, model, task_loss, batch):
        marker = os.environ.get("DARE_BENCH_TEST_MARKER")
        if marker:
            pathlib.Path(marker).touch()
            time.sleep(0.2)
        return None
'''


def test_kill_9_mid_pack_loses_only_that_pack_and_the_same_command_resumes(tiny_data, tmp_path, clean_registry,
                                                                           capsys):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    plugin, out, marker = tmp_path / "slow.py", tmp_path / "out", tmp_path / "training"
    plugin.write_text(SLOW_PLUGIN)
    command = [sys.executable, "-m", "bench", "run", "--plugin", str(plugin), "--methods", "deep_ensemble", "slow",
               "--seeds", "0", "1", "--data-dir", str(tiny_data), "--out", str(out), "--epochs", "2",
               "--val-size", "50", "--hidden", "8", "--batch-size", "32", "--no-download", "--no-plots", "-q",
               "--pack-size", "6"]  # the two methods mix: a pack of each method's 6 networks
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)  # keep packages put on the path
    env = {**os.environ, "DARE_BENCH_TEST_MARKER": str(marker), "PYTHONPATH": path}
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), process.stderr.read().decode() if process.poll() is not None else "no training seen"
        process.send_signal(signal.SIGKILL)  # mid-pack: the slow runs' pack is training
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    records = {p.name: p.read_bytes() for p in (out / "records").glob("*.json")}
    finished = [json.loads(b) for b in records.values()]
    assert [r["method"] for r in finished] == ["deep_ensemble"] * 2  # the first pack's runs, nothing else
    assert not [p for p in (out / "records").iterdir() if p.suffix != ".json"]  # no half-written file left

    # the same command again, in this process (no marker set here: the slow method trains at full speed)
    capsys.readouterr()
    assert main(command[3:]) == 0
    assert "2 of 4 runs already finished" in "".join(capsys.readouterr())
    after = {p.name: p.read_bytes() for p in (out / "records").glob("*.json")}
    assert len(after) == 4 and all(after[name] == body for name, body in records.items())  # kept as they were
    assert sorted(json.loads(b)["method"] for b in after.values()) == ["deep_ensemble"] * 2 + ["slow"] * 2


from methods.negcorr import NegCorr  # noqa: E402


@dataclasses.dataclass(frozen=True)
class PoisonedNegCorr(NegCorr):
    """NegCorr whose members go non-finite from the step ``poison`` on (0: never)."""
    name = "poisoned_negcorr"
    summary = "goes non-finite on purpose"
    packable = True
    pack_options = ("lam", "poison")
    poison: int = poison_option()

    def penalty(self, model, task_loss, batch):
        scale = poisoned_scale(PoisonedNegCorr, self.poison, task_loss)
        return super().penalty(model, task_loss, batch) + model.weights[0].flatten(1).sum(1) * scale


def test_a_joint_run_that_goes_non_finite_leaves_the_other_runs_of_its_pack_untouched():
    # three joint runs on one split (a selection's candidates of one seed): the middle one breaks
    runs = [PoisonedNegCorr(members=2, lam=0.1, checkpoint="best"),
            PoisonedNegCorr(members=2, lam=0.5, poison=5, checkpoint="best"),
            PoisonedNegCorr(members=2, lam=1.0, checkpoint="best")]
    PoisonedNegCorr._steps = 0
    packed = train_pack([(m, 0) for m in runs], packed_method(runs), PROTOCOL, TRAIN, 32, progress=False, val=VAL)
    assert isinstance(packed[1], Diverged)
    for method, result in [(runs[0], packed[0]), (runs[2], packed[2])]:
        assert_same(alone(method, 0), result)


from methods.batch_ensemble import BatchEnsemble  # noqa: E402


@dataclasses.dataclass(frozen=True)
class PoisonedBatchEnsemble(BatchEnsemble):
    """BatchEnsemble whose shared weights (the run axis of a pack) go non-finite from the step ``poison``
    on (0: never)."""
    name = "poisoned_batch_ensemble"
    summary = "goes non-finite on purpose"
    packable = True
    pack_options = ("poison",)
    poison: int = poison_option()

    def penalty(self, model, task_loss, batch):
        scale = poisoned_scale(PoisonedBatchEnsemble, self.poison, task_loss)
        per_run = model.shared[0].flatten(1).sum(1)  # a NaN gradient for the broken run's W only
        return per_run.repeat_interleave(model.members // model.runs) * scale


def test_a_run_whose_shared_weights_go_non_finite_leaves_the_other_runs_of_its_pack_untouched():
    runs = [PoisonedBatchEnsemble(members=2, checkpoint="best"),
            PoisonedBatchEnsemble(members=2, poison=5, checkpoint="best"),
            PoisonedBatchEnsemble(members=2, checkpoint="best")]
    PoisonedBatchEnsemble._steps = 0
    packed = train_pack([(m, s) for s, m in enumerate(runs)], packed_method(runs), PROTOCOL, TRAIN, 32,
                        progress=False, val=VAL)
    assert isinstance(packed[1], Diverged)
    for seed in (0, 2):
        assert_same(alone(runs[seed], seed), packed[seed])


def test_auto_pack_size_is_capped_per_device_and_bounded_by_memory(monkeypatch):
    import os

    from bench.training.packs import auto_pack_networks, network_bytes
    paper = make_protocol({"hidden": (100, 100, 100), "batch_size": 128, "val_size": 1000})
    assert auto_pack_networks(paper, torch.device("cpu")) == 50  # the CPU cap (docs/performance.md)
    # a machine with little memory: a quarter of it, divided by one network's bound
    page, pages = 4096, 4 * network_bytes(paper) * 7 // 4096 + 1
    monkeypatch.setattr(os, "sysconf", lambda name: page if name == "SC_PAGE_SIZE" else pages)
    assert auto_pack_networks(paper, torch.device("cpu")) == 7


MIXED = [(DeepEnsemble(members=2, checkpoint="best"), 0), (DeepEnsemble(members=1, loss="mse"), 1),
         (REGISTRY["dare"](members=2, threshold=0.3, checkpoint="last_below_threshold"), 0),
         (REGISTRY["dare"](members=1, threshold=1.0, checkpoint="last_below_threshold"), 1),
         (REGISTRY["anchor_net"](members=2, sigma=0.1, lam=10.0), 0), (REGISTRY["single_network"](), 2),
         (REGISTRY["laplace"](members=2), 3),
         (REGISTRY["mod"](members=2, lam=0.1, checkpoint="best"), 0),
         (REGISTRY["mod"](members=2, lam=1.0, checkpoint="best"), 1),
         (REGISTRY["negcorr"](members=3, lam=0.5), 2), (REGISTRY["rde"](members=2), 0), (REGISTRY["rde"](members=2), 3),
         (REGISTRY["mod"](members=3, lam=0.5, checkpoint="best"), 2)]


def test_a_mixed_pack_trains_each_run_as_it_trains_alone():
    # DE (NLL) with checkpoints, DE (MSE), DARE with two thresholds, AnchorNet, a single network, a
    # Laplace ensemble's training and the joint MOD (a part of two runs, and one of one run, whose box
    # and extra forward pass see that run's batch alone), NegCorr (one) and RDE (two): one pack, each
    # part's loss, penalty and checkpoint rule its own, each joint run one unit
    methods = [m for m, _ in MIXED]
    packed = train_pack(MIXED, packed_method(methods), PROTOCOL, TRAIN, 32, progress=False, val=VAL)
    assert [type(m).__name__ for m, _, _ in packed_method(methods).parts][-1] == "MOD"
    for (method, seed), result in zip(MIXED, packed):
        assert_same(alone(method, seed), result)


def test_methods_that_mix_share_packs_by_protocol():
    protocol = make_protocol({"val_size": 10})
    configs = [make_run_config(name, options, protocol, seed) for seed in (0, 1) for name, options in
               (("deep_ensemble", {"members": 2}), ("mc_dropout", {}), ("dare", {"members": 2, "threshold": 0.3}),
                ("deep_ensemble", {"members": 2, "loss": "mse"}), ("mod", {"members": 2}))]
    configs.append(make_run_config("deep_ensemble", {"members": 2}, make_protocol({"val_size": 20}), 0))
    packs = make_packs(configs, max_networks=50)
    # each method's runs consecutive (a MixedPack's parts; the joint MOD's too); MC dropout (its
    # dropout) and another protocol apart
    assert [[(c.method, c.method_options.get("loss"), c.seed) for c in p] for p in packs] == [
        [("deep_ensemble", "ce", 0), ("deep_ensemble", "ce", 1), ("dare", "ce", 0), ("dare", "ce", 1),
         ("deep_ensemble", "mse", 0), ("deep_ensemble", "mse", 1), ("mod", None, 0), ("mod", None, 1)],
        [("mc_dropout", None, 0), ("mc_dropout", None, 1)], [("deep_ensemble", "ce", 0)]]
    methods = [c.built_method for c in packs[0]]
    mixed = packed_method(methods)
    assert [(type(m).__name__, a, b) for m, a, b in mixed.parts] == [
        ("DeepEnsemble", 0, 4), ("DARE", 4, 8), ("DeepEnsemble", 8, 12), ("MOD", 12, 16)]
    assert mixed.runs == (2, 2, 2, 2)


def test_a_packed_swag_run_samples_its_own_posterior():
    methods = [REGISTRY["swag"](members=2, moments=3, rank=2, samples=4), REGISTRY["swag"](members=1, moments=3, rank=2,
                                                                                          samples=4)]
    packed = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods), PROTOCOL, TRAIN, 32,
                        progress=False, val=VAL)
    for seed, (method, result) in enumerate(zip(methods, packed)):
        single = alone(method, seed)
        assert result.model.seeds == [seed] * method.members  # each member's draws from its own run's stream
        assert torch.equal(method.predict_proba(result.model, VAL.x), method.predict_proba(single.model, VAL.x))
