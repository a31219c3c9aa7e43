"""The device-resident epoch (bench.training.loop, bench.training.members): an epoch's steps read
nothing back to the host and its end reads once; early stop, checkpoints, non-finite members and
DARE's switch are masks; CUDA graphs replay the same steps (the CUDA tests skip without a GPU)."""
import collections
import math
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.overrides import TorchFunctionMode

from bench.models.registry import ArchSpec
from bench import api
from bench.config import make_protocol, make_run_config
from bench.conformance import toy_split
from bench.errors import ConfigError
from bench.reporting.paper import compare_tables
from bench.reporting.report import protocol_groups
from bench.training import loop as training_loop
from bench.training.graphs import capture_wanted
from bench.training.loop import train, train_pack
from bench.training.members import Members, finite_members, leading_axis, member_abs_mean
from bench.training.packs import packed_method
from methods import REGISTRY
from methods.dare import DARE, anti_regularizer
from methods.deep_ensemble import DeepEnsemble

# every torch call that copies a device value to the host (a GPU sync)
HOST_READS = {"__bool__", "__float__", "__int__", "__index__", "item", "tolist", "nonzero", "cpu", "numpy",
              "masked_select", "unique", "argwhere"}
PROTOCOL = make_protocol({"hidden": (8,), "epochs": 3, "batch_size": 16, "early_stop_acc": 0.8, "val_size": 16})
TRAIN, VAL = toy_split(64, 8, 3, seed=1, separation=3.0), toy_split(16, 8, 3, seed=2, separation=3.0)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class HostReads(TorchFunctionMode):
    """Counts the host reads made inside it."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.count[name] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture
def reads_per_phase(monkeypatch):
    """[(phase, reads)] for every epoch's steps ("steps") and end ("end") of the training that follows."""
    log = []

    def counted(phase, fn):
        def wrapper(*args, **kwargs):
            with HostReads() as reads:
                out = fn(*args, **kwargs)
            log.append((phase, sum(reads.count.values())))
            return out
        return wrapper

    monkeypatch.setattr(training_loop, "_train_epoch", counted("steps", training_loop._train_epoch))
    monkeypatch.setattr(training_loop, "_end_epoch", counted("end", training_loop._end_epoch))
    return log


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_methods_epoch_reads_back_once_at_its_end(name, reads_per_phase):
    method = REGISTRY[name](**({"checkpoint": "best"} if REGISTRY[name].fixed_schedule is False else {}))
    train(method, PROTOCOL, TRAIN, 3, seed=0, progress=False, val=VAL)
    assert reads_per_phase and all(reads == (0 if phase == "steps" else 1) for phase, reads in reads_per_phase)


def test_a_pack_with_stops_checkpoints_and_switches_reads_back_once_an_epoch(reads_per_phase):
    methods = [DARE(members=2, threshold=t, checkpoint="last_below_threshold") for t in (0.05, 0.5, 5.0)]
    protocol = make_protocol({"hidden": (8,), "epochs": 4, "batch_size": 16, "early_stop_acc": 0.6, "lr": 0.01,
                              "val_size": 16})
    results = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods), protocol, TRAIN, 3,
                         progress=False, val=VAL)
    assert {e for r in results for e in r.epochs_run} != {4}  # some member stopped early
    assert all(reads == (0 if phase == "steps" else 1) for phase, reads in reads_per_phase)


@pytest.mark.parametrize("name", ["batch_ensemble", "packed_ensemble", "mimo", "mod"])
def test_a_pack_of_joint_runs_reads_back_once_an_epoch(name, reads_per_phase):
    methods = [REGISTRY[name](members=2, checkpoint="best") for _ in range(3)]
    train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods), PROTOCOL, TRAIN, 3,
               progress=False, val=VAL)
    assert reads_per_phase and all(reads == (0 if phase == "steps" else 1) for phase, reads in reads_per_phase)


def params(values):
    return [torch.tensor(values, dtype=torch.float32).reshape(len(values), 1)]


def test_stop_records_the_epoch_and_the_stopped_members_hold_their_weights():
    weights = params([1.0, 2.0, 3.0])
    members = Members(weights, 3, 10, unit=False, device=torch.device("cpu"), run_of=[0, 0, 1])
    active = members.active
    members.stop(torch.tensor([False, True, False]), epoch=2)
    assert members.active is active  # in place: a captured step reads this very tensor
    assert members.active.tolist() == [True, False, True] and members.stopped_epoch.tolist() == [10, 2, 10]
    members.stop(torch.tensor([False, True, True]), epoch=5)  # member 1 stopped already: its epoch stays
    assert members.stopped_epoch.tolist() == [10, 2, 5]
    weights[0] += 1.0  # an optimiser step moves every member
    members.hold_stopped()
    assert weights[0].flatten().tolist() == [2.0, 3.0, 4.0]  # not holding yet: the loop says when
    members.holding = True
    members.hold_stopped()
    assert weights[0].flatten().tolist() == [2.0, 2.0, 3.0]  # the stopped ones back at their values


def test_a_non_finite_member_goes_back_to_its_checkpoint_and_one_without_one_ends_its_run():
    weights = params([1.0, 2.0, 3.0, 4.0])
    members = Members(weights, 4, 10, unit=False, device=torch.device("cpu"), run_of=[0, 0, 1, 1])
    members.checkpoint(DeepEnsemble(checkpoint="best").checkpoint_saves,
                       torch.tensor([0.5, float("inf"), float("inf"), 0.5]), epoch=1)
    assert members.kept_epoch.tolist() == [1, 0, 0, 1]  # inf is not below the best so far (inf)
    weights[0].copy_(torch.tensor([[float("nan")], [2.5], [float("nan")], [4.5]]))
    members.stop_nonfinite(torch.tensor([0.1, 0.1, 0.1, 0.1]), epoch=3)
    assert members.diverged_epoch.tolist() == [0, 3]  # run 1: member 2 has no checkpoint
    assert members.active.tolist() == [False, True, False, False]
    assert members.nonfinite_epoch.tolist() == [3, 0, 0, 0] and members.stopped_epoch.tolist() == [3, 10, 3, 3]
    assert weights[0][0].item() == 1.0  # member 0 restored to its epoch-1 checkpoint
    members.stop_nonfinite(torch.tensor([0.1, float("nan"), 0.1, 0.1]), epoch=4)  # a non-finite loss counts too
    assert members.diverged_epoch.tolist() == [4, 3] and not members.active.any()


def test_checkpoint_rules_as_masks():
    weights = params([1.0, 2.0])
    members = Members(weights, 2, 10, unit=False, device=torch.device("cpu"))
    for epoch, losses in enumerate(([0.4, 0.2], [0.3, 0.2], [0.35, 0.1]), start=1):
        members.checkpoint(DARE(threshold=0.3, checkpoint="last_below_threshold").checkpoint_saves,
                           torch.tensor(losses), epoch)
    assert members.kept_epoch.tolist() == [2, 3]  # the last epoch whose loss <= 0.3
    best = Members(params([1.0, 2.0]), 2, 10, unit=False, device=torch.device("cpu"))
    for epoch, losses in enumerate(([0.4, 0.2], [0.3, 0.2], [0.35, 0.1]), start=1):
        best.checkpoint(DeepEnsemble(checkpoint="best").checkpoint_saves, torch.tensor(losses), epoch)
    assert best.kept_epoch.tolist() == [2, 3] and best.best_val.tolist() == pytest.approx([0.3, 0.1])


def test_joint_members_decide_together_on_their_mean():
    members = Members(params([1.0, 2.0, 3.0, 4.0]), 4, 10, unit=True, device=torch.device("cpu"), run_of=[0, 0, 1, 1])
    accuracy = torch.tensor([0.9, 0.6, 0.95, 0.9])
    members.stop(members.active & (members.per_unit(accuracy) >= 0.8), epoch=2)
    assert members.active.tolist() == [True, True, False, False]  # run 0's mean is 0.75


def test_in_a_mixed_pack_only_the_joint_runs_decide_as_one():
    # run 0: two independent networks; run 1: a joint run of two members
    weights = params([1.0, 2.0, 3.0, 4.0])
    members = Members(weights, 4, 10, unit=[False, True], device=torch.device("cpu"), run_of=[0, 0, 1, 1])
    accuracy = torch.tensor([0.9, 0.6, 0.95, 0.6])
    assert members.per_unit(accuracy).tolist() == pytest.approx([0.9, 0.6, 0.775, 0.775])
    members.stop(members.active & (members.per_unit(accuracy) >= 0.7), epoch=2)
    assert members.active.tolist() == [False, True, False, False]
    weights[0] += 1.0
    members.holding = True
    members.hold_stopped()
    assert weights[0].flatten().tolist() == [1.0, 3.0, 3.0, 4.0]
    # a non-finite joint run has no member checkpoint to go back to: it ends; a network of run 0 restores
    fresh = Members(params([1.0, 2.0, 3.0, 4.0]), 4, 10, unit=[False, True], device=torch.device("cpu"),
                    run_of=[0, 0, 1, 1])
    fresh.checkpoint(DeepEnsemble(checkpoint="best").checkpoint_saves, torch.tensor([0.5, 0.5, 0.5, 0.5]), epoch=1)
    fresh.params[0].copy_(torch.tensor([[float("nan")], [2.0], [float("nan")], [4.0]]))
    fresh.stop_nonfinite(torch.zeros(4), epoch=2)
    assert fresh.diverged_epoch.tolist() == [0, 2] and fresh.active.tolist() == [False, True, False, False]
    assert fresh.params[0][0].item() == 1.0 and fresh.nonfinite_epoch.tolist() == [2, 0, 0, 0]


def test_a_parameter_on_the_run_axis_belongs_to_its_runs_members():
    # two joint runs of two members: a per-member factor (4, 1) and a per-run weight (2, 1), as
    # BatchEnsemble's r and W in a pack
    factor, shared = torch.tensor([[1.0], [-2.0], [3.0], [4.0]]), torch.tensor([[10.0], [-20.0]])
    members = Members([factor, shared], 4, 10, unit=True, device=torch.device("cpu"), run_of=[0, 0, 1, 1])
    assert [leading_axis(p, 4, 2) for p in (factor, shared)] == ["member", "run"]
    assert leading_axis(torch.zeros(3), 4, 1) == "whole"  # one run's weight that all its members share
    with pytest.raises(ValueError, match="by member or by run"):
        leading_axis(torch.zeros(3), 4, 2)
    model = torch.nn.Module()
    model.members, model.factor, model.shared = 4, torch.nn.Parameter(factor), torch.nn.Parameter(shared)
    # |theta| per member: its factor and its run's weight, over 2 scalars
    assert member_abs_mean(model, members.run_index, 2).tolist() == [5.5, 6.0, 11.5, 12.0]
    shared[1, 0] = float("nan")  # run 1's weight: both its members, and only they, are not finite
    assert finite_members([factor, shared], members.run_index, 2).tolist() == [True, True, False, False]
    members.stop_nonfinite(torch.zeros(4), epoch=2)
    assert members.diverged_epoch.tolist() == [0, 2] and members.active.tolist() == [True, True, False, False]
    shared[0, 0], shared[1, 0] = 11.0, 12.0  # an optimiser step moves both runs
    members.holding = True
    members.hold_stopped()
    assert shared.flatten().tolist()[0] == 11.0 and math.isnan(shared.flatten().tolist()[1])  # run 1 frozen


def test_dare_switch_with_a_threshold_per_network():
    model = DeepEnsemble(members=3).build_model(0, [0, 1, 2], ArchSpec.mlp(4, (5,), 3, "torch"))
    task = torch.tensor([0.5, 0.5, 0.5])
    dare = DARE(members=3, threshold=torch.tensor([0.1, 0.5, 1.0]))
    penalty = dare.penalty(model, task, None)
    regularizer = anti_regularizer(model.parameters())
    assert penalty[0] == 0 and torch.equal(penalty[1:], -regularizer[1:])  # inclusive at tau


def test_which_steps_are_captured():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not capture_wanted(DeepEnsemble(), cpu, "graph")  # never on the CPU
    assert capture_wanted(DeepEnsemble(), cuda, "auto") and not capture_wanted(DeepEnsemble(), cuda, "eager")
    assert {name for name, cls in REGISTRY.items() if cls().capturable_step()} == {
        "deep_ensemble", "dare", "single_network", "anchor_net", "negcorr", "rde", "laplace", "mc_dropout",
        "batch_ensemble", "packed_ensemble", "swag", "snapshot_ensemble", "mimo", "mod"}


def test_a_pack_whose_options_are_tensors_is_judged_by_its_class():
    mc_dropout = packed_method([REGISTRY["mc_dropout"](dropout=0.2), REGISTRY["mc_dropout"](dropout=0.5)])
    assert torch.is_tensor(mc_dropout.dropout) and mc_dropout.capturable_step()
    dare = packed_method([DARE(members=2, threshold=0.3), DARE(members=2, threshold=None, delta=0.1)])
    assert [type(m).__name__ for m, _, _ in dare.parts] == ["DARE", "DARE"]  # an absolute and a relative tau: two parts


def test_precision_is_part_of_a_runs_identity_and_row_only_when_not_fp32():
    record = json.loads((Path(__file__).parents[1] / "records/schema-2/records/d2f0b0ac2c7d.json").read_text())
    config = record["config"]
    rebuilt = make_run_config(config["method"], config["method_options"], make_protocol(config["protocol"]),
                              config["seed"], config["preset"])
    assert rebuilt.run_id == record["run_id"]  # ids made before the precision option hold
    assert "precision" not in rebuilt.row()  # fp32 is implicit, as in older records
    bf16 = make_run_config(config["method"], config["method_options"],
                           make_protocol({**config["protocol"], "precision": "bf16"}), config["seed"], config["preset"])
    assert bf16.run_id != rebuilt.run_id and bf16.row()["precision"] == "bf16"


def test_tables_never_put_two_precisions_in_one_cell():
    runs = pd.DataFrame({"id_dataset": ["mnist"] * 3, "ood_sets": ["fashion_mnist"] * 3, "preset": ["seed"] * 3,
                         "precision": [None, "fp32", "bf16"], "run_id": ["a", "b", "c"]})
    groups = protocol_groups(runs)
    assert sorted(sorted(g.runs["run_id"]) for g in groups) == [["a", "b"], ["c"]]  # no value: an older fp32 record
    assert any("precision=bf16" in g.label for g in groups)


@pytest.mark.parametrize(("grid", "execution", "message"), [
    ({"protocol": {"precision": "tf32"}}, {}, "precision=tf32 is a CUDA GPU's matmul mode"),
    ({}, {"step": "graph"}, "--step graph replays CUDA graphs"),
])
def test_what_a_cpu_cannot_do_is_one_line_of_error(grid, execution, message, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ConfigError, match=message) as error:
        api.plan("seed", {"methods": ["deep_ensemble"], "seeds": [0], **grid}, {"device": "cpu", **execution},
                 out=tmp_path)
    assert "\n" not in str(error.value)


def test_bf16_trains_the_forward_pass_in_bfloat16_and_keeps_fp32_weights():
    bf16 = make_protocol({"hidden": (8,), "epochs": 2, "batch_size": 16, "early_stop_acc": None, "val_size": 16,
                          "precision": "bf16"})
    fp32 = make_protocol({"hidden": (8,), "epochs": 2, "batch_size": 16, "early_stop_acc": None, "val_size": 16})
    a = train(DeepEnsemble(members=2), bf16, TRAIN, 3, seed=0, progress=False, val=VAL)
    b = train(DeepEnsemble(members=2), fp32, TRAIN, 3, seed=0, progress=False, val=VAL)
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in a.model.parameters())
    assert not all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    assert abs(a.history[-1]["train_loss"] - b.history[-1]["train_loss"]) < 0.05  # the same training, rounded


@CUDA
def test_graph_replay_trains_bitwise_as_eager_steps():
    methods = [DARE(members=2, threshold=t, checkpoint="best") for t in (0.1, 0.5)]
    protocol = make_protocol({"hidden": (32, 32), "epochs": 4, "batch_size": 16, "early_stop_acc": 0.8,
                              "val_size": 16})
    kw = dict(progress=False, val=VAL, device="cuda")
    graph = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods, "cuda"), protocol, TRAIN, 3,
                       step="graph", **kw)
    eager = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods, "cuda"), protocol, TRAIN, 3,
                       step="eager", **kw)
    again = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods, "cuda"), protocol, TRAIN, 3,
                       step="graph", **kw)
    assert [r.step for r in graph] == ["graph", "graph"] and [r.step for r in eager] == ["eager", "eager"]
    for a, b in zip(graph, again):  # a GPU re-run: bitwise the same
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    for a, b in zip(graph, eager):
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
        assert a.history == b.history and a.epochs_run == b.epochs_run


@CUDA
@pytest.mark.parametrize("name", ["deep_ensemble", "anchor_net", "negcorr", "rde", "mc_dropout", "batch_ensemble",
                                  "packed_ensemble", "laplace", "swag", "snapshot_ensemble", "mimo", "mod"])
def test_each_capturable_method_trains_bitwise_as_eager_steps_when_replayed(name):
    assert_replays_bitwise(name, PROTOCOL, TRAIN, VAL)


def assert_replays_bitwise(name, protocol, train_split, val):
    """The method trained with its steps replayed from a CUDA graph, and eagerly: bitwise the same."""
    method = REGISTRY[name](**({} if REGISTRY[name].fixed_schedule else {"checkpoint": "best"}))
    kw = dict(progress=False, val=val, device="cuda")
    graph = train(method, protocol, train_split, 3, seed=0, step="graph", **kw)
    eager = train(method, protocol, train_split, 3, seed=0, step="eager", **kw)
    assert graph.step == "graph" and eager.step == "eager"
    assert all(torch.equal(p, q) for p, q in zip(graph.model.parameters(), eager.model.parameters()))
    assert graph.history == eager.history


@CUDA
@pytest.mark.parametrize("name", ["batch_ensemble", "packed_ensemble", "mimo"])
def test_a_pack_of_runs_that_share_weights_replays_bitwise_as_eager_steps(name):
    methods = [REGISTRY[name](members=3, checkpoint="best") for _ in range(3)]
    kw = dict(progress=False, val=VAL, device="cuda")
    graph, eager = (train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods, "cuda"), PROTOCOL,
                               TRAIN, 3, step=step, **kw) for step in ("graph", "eager"))
    for a, b in zip(graph, eager):
        assert a.step == "graph" and b.step == "eager"
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
        assert a.history == b.history


@CUDA
@pytest.mark.parametrize("step", ["graph", "eager"])
def test_an_epoch_on_the_gpu_never_waits_for_the_host(step, monkeypatch):
    """After the first epoch (warm-up and capture), the steps of an epoch run under
    torch.cuda.set_sync_debug_mode("error"): any host sync raises."""
    epoch_fn = training_loop._train_epoch

    def strict(loop, epoch, summary):
        if epoch == 1:
            return epoch_fn(loop, epoch, summary)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return epoch_fn(loop, epoch, summary)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(training_loop, "_train_epoch", strict)
    methods = [DARE(members=2, threshold=0.3, checkpoint="best"), DARE(members=2, threshold=1.0, checkpoint="best")]
    protocol = make_protocol({"hidden": (32,), "epochs": 3, "batch_size": 16, "early_stop_acc": None, "val_size": 16})
    results = train_pack([(m, s) for s, m in enumerate(methods)], packed_method(methods, "cuda"), protocol, TRAIN, 3,
                         progress=False, val=VAL, device="cuda", step=step)
    assert all(r.epochs_run == [3, 3] for r in results)


def test_two_paper_tables_cell_by_cell():
    keys = {"label": ["A", "A", "B"], "variant": ["a", "a", "b"], "quantity": ["ID accuracy", "AUROC vs mnist", "ID accuracy"]}
    new = pd.DataFrame({**keys, "harness_mean": [90.0, 80.0, 70.0], "harness_std": [1.0, 1.0, 1.0], "harness_n": [10] * 3})
    reference = pd.DataFrame({**keys, "harness_mean": [89.5, 82.0, None], "harness_std": [0.5, 1.5, None],
                              "harness_n": [5] * 3})
    table = compare_tables(new, reference)
    assert table["diff"].tolist() == [0.5, -2.0]  # B has no reference mean: not compared
    assert table["within_reference_sd"].tolist() == [True, False]  # |0.5| <= 0.5; |-2| > 1.5


def splitmix_reference(z: int) -> int:
    """splitmix64's finaliser in Python's exact integers, modulo 2^64."""
    m = (1 << 64) - 1
    z &= m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_counter_uniforms_are_splitmix64_bit_for_bit():
    from bench.seeding import counter_uniform
    seeds, counter = [1, (1 << 62) + 5], 3
    got = counter_uniform(torch.tensor(seeds), torch.tensor(counter), (2, 3))
    for row, seed in enumerate(seeds):
        key = splitmix_reference(seed ^ splitmix_reference(counter))
        for position in range(1, 7):
            bits = splitmix_reference(key + position * 0x9E3779B97F4A7C15) >> 40
            assert got[row].flatten()[position - 1].item() == bits / 2 ** 24


def test_mc_dropout_masks_drop_at_each_networks_rate_and_change_every_step():
    from methods.mc_dropout import DropoutMasks
    masks = DropoutMasks(torch.tensor([11, 12]), torch.tensor([0.2, 0.5]))
    h = torch.ones(2, 500, 200)
    first = masks(1, h)
    assert set(first[0].unique().tolist()) == {0.0, 1.25} and set(first[1].unique().tolist()) == {0.0, 2.0}
    dropped = (first == 0).float().mean(dim=(1, 2))
    assert dropped.tolist() == pytest.approx([0.2, 0.5], abs=0.01)
    assert not torch.equal(masks(2, h), first)  # another layer, other masks
    assert torch.equal(masks(1, h), first)       # the same step and layer: the same masks
    masks.advance()
    assert not torch.equal(masks(1, h), first)


def test_a_folder_with_fp32_and_bf16_runs_reports_them_apart(tiny_data, tmp_path):
    from bench.cli.main import main
    grid = ["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), "--seeds", "0", "--epochs", "1",
            "--val-size", "50", "--hidden", "8", "--no-download", "--no-plots", "-q", "--methods", "deep_ensemble",
            "-o", "members=2"]
    assert main(grid) == 0 and main([*grid, "--precision", "bf16"]) == 0
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 2 and sorted(runs["precision"].fillna("")) == ["", "bf16"]  # fp32: implicit
    summary = (tmp_path / "summary.md").read_text()
    assert "precision=bf16" in summary and "precision=fp32" in summary  # two protocol sections


# LeNet-5 members: the same device-resident epoch (nothing read back in the steps) and, on a GPU, the same
# captured step as the MLP's
LENET = make_protocol({"arch": "lenet5", "epochs": 2, "batch_size": 16, "early_stop_acc": 0.8, "val_size": 16})
LENET_TRAIN, LENET_VAL = toy_split(48, 784, 3, seed=1), toy_split(16, 784, 3, seed=2)


@pytest.mark.parametrize("name", ["deep_ensemble", "mc_dropout", "mod", "batch_ensemble", "packed_ensemble", "mimo"])
def test_a_lenet_epoch_reads_back_once_at_its_end(name, reads_per_phase):
    method = REGISTRY[name](checkpoint="best")
    train(method, LENET, LENET_TRAIN, 3, seed=0, progress=False, val=LENET_VAL)
    assert reads_per_phase and all(reads == (0 if phase == "steps" else 1) for phase, reads in reads_per_phase)


@CUDA
@pytest.mark.parametrize("name", ["deep_ensemble", "dare", "mc_dropout", "rde", "batch_ensemble", "packed_ensemble",
                                  "mimo", "swag"])
def test_a_lenet_step_replays_bitwise_as_eager_steps(name):
    assert_replays_bitwise(name, LENET, LENET_TRAIN, LENET_VAL)
