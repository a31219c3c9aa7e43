"""The DARE paper's protocol: preprocessing, per-seed splits, init, losses, the relative threshold
with its reference run, Eq. 35, OOD sets (CIFAR-10 loading and skipping), the paper table."""
import json
import math
import pickle
import urllib.error

import numpy as np
import pandas as pd
import pytest
import torch

import bench.execution.executors as executors
import methods
from bench.cli.main import main
from bench.config import make_protocol, make_run_config
from bench.data.loaders import load_benchmark_data
from bench.errors import ConfigError
from bench.design.grid import expand_grid
from bench.config import load_preset
from bench.models.mlp import StackedMLP
from bench.reporting.paper import build_paper_table
from bench.reporting.published import load_published
from methods.base import Method, scaled_mse_loss
from methods.dare import DARE
from methods.deep_ensemble import eq35_distance

QUIET = ["--no-download", "-q", "--no-plots"]


# -- data ---------------------------------------------------------------------------------------

def test_raw255_feeds_pixel_bytes_as_floats(tiny_data):
    raw = load_benchmark_data(make_protocol({"val_size": 50}), tiny_data, download=False)
    byte = load_benchmark_data(make_protocol({"val_size": 50, "preprocess": "raw255"}), tiny_data, download=False)
    assert byte.train.x.dtype == torch.float32 and byte.train.x.max().item() == 255.0
    assert torch.equal(byte.train.x, byte.train.x.round())  # whole numbers 0..255
    torch.testing.assert_close(byte.train.x / 255.0, raw.train.x)
    torch.testing.assert_close(byte.ood["fashion_mnist"].x / 255.0, raw.ood["fashion_mnist"].x)


def test_split_seed_run_draws_one_split_per_run_seed(tiny_data):
    per_seed = make_protocol({"val_size": 50, "split_seed": "run"})
    seed0, seed1 = (load_benchmark_data(per_seed, tiny_data, False, seed=s) for s in (0, 1))
    assert not torch.equal(seed0.val.x, seed1.val.x)
    fixed = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 0}), tiny_data, False, seed=1)
    torch.testing.assert_close(fixed.val.x, seed0.val.x)  # split_seed=run at seed 0 == fixed split 0
    fixed_again = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 0}), tiny_data, False, seed=4)
    torch.testing.assert_close(fixed_again.val.x, fixed.val.x)  # a fixed split ignores the run seed


def write_cifar_test_batch(root, n=6, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": data, b"labels": list(range(n))}, f)
    return data


def test_cifar10_gray28_is_the_top_left_crop_averaged_over_rgb(tiny_data, tmp_path):
    import shutil
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    raw = write_cifar_test_batch(root).reshape(-1, 3, 32, 32).astype(np.float64)
    data = load_benchmark_data(make_protocol({"val_size": 50, "id_dataset": "fashion_mnist", "preprocess": "raw255",
                                              "ood_sets": "mnist,cifar10_gray28"}), root, download=False)
    gray = data.ood["cifar10_gray28"].x.numpy().reshape(-1, 28, 28)
    np.testing.assert_allclose(gray, raw[:, :, :28, :28].mean(axis=1), rtol=1e-6)
    assert data.ood_skipped == {}


def test_a_corrupt_cifar_batch_is_one_clear_line(tiny_data, tmp_path, capsys):
    import shutil
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    (root / "cifar-10-batches-py").mkdir()
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    code = main(["run", "--data-dir", str(root), "--out", str(tmp_path / "out"), "--methods", "deep_ensemble",
                 "--seeds", "0", "--epochs", "1", "--val-size", "50", "--ood-sets", "cifar10_gray28", *QUIET])
    assert code == 2
    assert "is not a readable CIFAR-10 batch" in capsys.readouterr().err


def test_a_missing_ood_download_is_skipped_with_a_note(tiny_data, tmp_path, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr("torchvision.datasets.utils.download_and_extract_archive", offline)
    from bench.data.loaders import _load_ood_images
    _load_ood_images.cache_clear()  # no earlier test's outcome for this folder may be reused
    out = tmp_path / "out"
    # the tiny data folder has no CIFAR-10: the run tries the (patched) download, then skips the set
    code = main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble",
                 "--seeds", "0", "--epochs", "1", "--val-size", "50", "--ood-sets", "fashion_mnist,cifar10_gray28",
                 "-q", "--no-plots"])
    assert code == 0
    printed = capsys.readouterr()
    assert "note: OOD set cifar10_gray28 skipped:" in printed.out + printed.err
    assert "download failed (URLError)" in printed.out + printed.err
    runs = pd.read_csv(out / "runs.csv")
    assert runs["ood_skipped"].str.startswith("cifar10_gray28: ").all()
    assert "auroc_pred_entropy_vs_fashion_mnist" in runs and not any("cifar" in c for c in runs.columns
                                                                     if c.startswith("auroc"))


# -- model, losses, scores ------------------------------------------------------------------------

def test_glorot_init_is_uniform_in_its_bound_with_zero_biases():
    model = StackedMLP.for_seed(0, [0, 1], 784, (100,), 10, init="glorot")
    for weight, bias in zip(model.weights, model.biases):
        bound = math.sqrt(6 / (weight.shape[1] + weight.shape[2]))
        assert weight.abs().max().item() <= bound and weight.abs().max().item() > 0.95 * bound
        assert weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)  # U(-a, a) has sd a/sqrt(3)
        assert torch.count_nonzero(bias) == 0
    torch_init = StackedMLP.for_seed(0, [0], 784, (100,), 10)
    assert torch_init.biases[0].abs().max().item() > 0  # nn.Linear's default draws biases too


def test_scaled_mse_by_hand():
    logits = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])  # one member, two samples, K = 2
    targets = torch.tensor([[0, 1]])                      # targets 2 * onehot: (2, 0) and (0, 2)
    # sample 1: ((1-2)^2 + 0^2) / 2 = 0.5; sample 2: (0^2 + (3-2)^2) / 2 = 0.5; mean 0.5
    assert scaled_mse_loss(logits, targets).tolist() == pytest.approx([0.5])
    logits2 = torch.tensor([[[0.0, 0.0]], [[2.0, 0.0]]])  # two members, one sample of class 0
    assert scaled_mse_loss(logits2, torch.tensor([[0], [0]])).tolist() == pytest.approx([2.0, 0.0])


def test_eq35_distance_by_hand():
    # K = 2, two members, one sample. Member 0 outputs (1.5, 0): closest to K=2 is class 0, y = (2, 0),
    # fit 0.25. Member 1 outputs (0, 3): closest to 2 is class 1 (|3-2| = 1 < |0-2|), y = (0, 2), fit 1.
    # mean output (0.75, 1.5); spread: member 0 0.75^2 + 1.5^2 = 2.8125, member 1 the same.
    h = np.array([[[1.5, 0.0]], [[0.0, 3.0]]])
    assert eq35_distance(h).tolist() == pytest.approx([(0.25 + 1.0) / 2 + 2.8125])
    agreeing = np.array([[[2.0, 0.0]], [[2.0, 0.0]]])  # members agree on K * onehot: score 0
    assert eq35_distance(agreeing).tolist() == [0.0]


def test_adam_eps_is_the_protocols():
    from bench.conformance import toy_split
    from bench.training.loop import train
    from methods.deep_ensemble import DeepEnsemble
    data = toy_split(32, features=4, classes=2, separation=0.0)  # any data: only the optimiser's eps differs
    weights = [train(DeepEnsemble(members=1), make_protocol({"hidden": [4], "epochs": 1, "batch_size": 8,
                                                              "adam_eps": eps}), data, 2, 0, progress=False)
               .model.weights[0] for eps in (1e-8, 1e-8, 10.0)]
    torch.testing.assert_close(weights[0], weights[1])
    assert not torch.allclose(weights[0], weights[2])


# -- the relative threshold and its reference run ----------------------------------------------------

TINY = ["--epochs", "2", "--val-size", "50", "-o", "members=2"]


def records(out):
    return {r["run_id"]: r for r in (json.loads(p.read_text()) for p in (out / "records").glob("*.json"))}


def count_runs(monkeypatch):
    real, calls = executors.run_pack, []
    monkeypatch.setattr(executors, "run_pack", lambda pack, *a, **k: (calls.extend(c.variant for c in pack),
                                                                     real(pack, *a, **k))[1])
    return calls


def test_tau_is_1_25_times_the_reference_validation_loss_and_the_reference_is_reused(tiny_data, tmp_path,
                                                                                   monkeypatch):
    out = tmp_path / "out"
    calls = count_runs(monkeypatch)
    base = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", *TINY, *QUIET]
    assert main([*base, "--methods", "deep_ensemble", "-o", "loss=mse", "-o", "checkpoint=best"]) == 0
    assert calls == ["deep_ensemble(checkpoint=best, members=2, loss=mse)"]
    calls.clear()
    assert main([*base, "--methods", "dare", "-o", "loss=mse", "-o", "dare.delta=0.25",
                 "-o", "dare.checkpoint=last_below_threshold"]) == 0
    assert calls == ["dare(checkpoint=last_below_threshold, members=2, loss=mse, delta=0.25)"]  # not retrained
    by_method = {r["method"]: r for r in records(out).values()}
    de, dare = by_method["deep_ensemble"], by_method["dare"]
    assert dare["tau_reference_run_id"] == de["run_id"]
    assert de["val_task_loss"] == pytest.approx(np.mean([float(v) for v in de["member_val_loss"].split()]))
    assert dare["tau"] == pytest.approx(1.25 * de["val_task_loss"], rel=1e-12)
    # DARE checkpointed against that tau: each kept epoch is the last one with validation loss <= tau
    for m, kept in enumerate(int(e) for e in dare["kept_epochs"].split()):
        curve = [h["val_loss"] for h in dare["history"] if h["member"] == m]
        assert kept == max((e + 1 for e, v in enumerate(curve) if v <= dare["tau"]), default=0)


def test_a_reference_without_a_finite_validation_loss_cannot_give_tau():
    from methods.base import ReferenceFailed
    method = DARE(members=2, loss="mse", threshold=None, delta=0.25)
    for ref in ({"run_id": "r", "status": "ok", "val_task_loss": None},
                {"run_id": "r", "status": "ok", "val_task_loss": float("nan")}, {"run_id": "r", "status": "ok"}):
        with pytest.raises(ReferenceFailed, match="has no finite validation loss"):
            method.bind({"tau_reference": ref})
    with pytest.raises(ReferenceFailed, match="has no record"):
        method.bind({})
    bound, recorded = method.bind({"tau_reference": {"run_id": "r", "status": "ok", "val_task_loss": 2.0}})
    assert bound.threshold == recorded["tau"] == 2.5 and bound.checkpoint_threshold == 2.5


def test_dry_run_lists_the_reference_runs(tiny_data, tmp_path, capsys):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), "--seeds", "0", *TINY, *QUIET,
                 "--methods", "dare", "-o", "dare.delta=0.25", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "deep_ensemble(checkpoint=best, members=2, loss=ce) seed 0  (reference)" in lines[0]
    assert "dare(" in lines[1] and lines[-1] == "2 runs in the grid, 2 to do"


def test_a_grid_runs_the_reference_first_when_it_is_missing(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = count_runs(monkeypatch)
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", *TINY, *QUIET,
                 "--methods", "dare", "-o", "dare.delta=0.25"]) == 0
    assert [c.split("(")[0] for c in calls] == ["deep_ensemble"] * 2 + ["dare"] * 2
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}
    dare = runs[runs["method"] == "dare"].set_index("seed")
    de = runs[runs["method"] == "deep_ensemble"].set_index("seed")
    np.testing.assert_allclose(dare["tau"], 1.25 * de["val_task_loss"])  # per seed: its own reference


def test_a_failed_reference_gives_a_recorded_error_and_the_grid_goes_on(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    # lr 1e30 makes every run diverge: the reference diverges, DARE cannot compute tau
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", *TINY, *QUIET,
                 "--lr", "1e30", "--methods", "dare", "mc_dropout", "-o", "dare.delta=0.25"]) == 1
    assert "1 of 3 runs failed (status error): dare(" in capsys.readouterr().err
    by_method = {r["method"]: r for r in records(out).values()}
    assert by_method["deep_ensemble"]["status"] == "diverged"
    assert by_method["dare"]["status"] == "error"
    assert "tau reference run" in by_method["dare"]["error"] and "'diverged'" in by_method["dare"]["error"]
    assert "mc_dropout" in by_method  # the rest of the grid went on
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    assert summary.loc["dare", "n_error"] == 1 and summary.loc["dare", "n"] == 0


def test_the_paper_preset_reuses_its_de_mse_rows_as_dares_references():
    name, values = load_preset("paper-fmnist")
    everything = expand_grid(name, values, None, None, {}, [])
    configs = [c for c in everything if c.kind == "run"]
    selections = [c for c in everything if c.kind == "selection"]
    assert len(configs) == 60  # 12 plain rows x 5 seeds
    assert sorted(s.method for s in selections) == ["anchor_net"] * 5 + ["mod"] * 5 + ["negcorr"] * 5
    assert len(selections[0].candidates()) == 9 and selections[0].early_break == {"sigma": 10.0}
    assert {c.make_method().label for c in configs} == {"DE (NLL)", "DE (MSE)", "DARE", "MC dropout", "RDE",
                                                        "Single network", "BatchEnsemble", "Packed-Ensembles",
                                                        "MIMO", "MultiSWAG", "Laplace ensemble", "Snapshot ensemble"}
    ids = {c.run_id for c in configs}
    refs = [ref for c in configs for ref in c.references().values()]
    assert len(refs) == 5 and all(ref.run_id in ids for ref in refs)
    p = configs[0].protocol
    assert (p.preprocess, p.split_seed, p.init, p.adam_eps, p.hidden, p.batch_size, p.epochs, p.ood_sets) == (
        "raw255", "run", "glorot", 1e-7, (100, 100, 100), 128, 50, ("mnist", "cifar10_gray28"))


# -- bad input: one line, exit 2, before training ---------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--methods", "dare", "-o", "dare.delta=-0.1"], "delta='-0.1' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=nan"], "delta='nan' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=inf"], "delta='inf' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=0.25", "-o", "dare.threshold=0.3"], "give delta or threshold, not both"),
    (["--methods", "dare", "-o", "dare.threshold=none"], "method dare: give threshold or delta"),
    (["--methods", "deep_ensemble", "-o", "loss=hinge"], "loss='hinge' is out of range; allowed: ce or mse"),
    (["--methods", "dare", "-o", "checkpoint=latest"], "checkpoint='latest' is out of range"),
    (["--methods", "deep_ensemble", "-o", "checkpoint=last_below_threshold"],
     "checkpoint=last_below_threshold needs a method with a threshold (deep_ensemble has none)"),
    (["--methods", "deep_ensemble", "-o", "checkpoint=best", "--val-size", "0"], "needs a validation split"),
    (["--ood-sets", "mnist"], "OOD set 'mnist' is not known for in-distribution mnist (known: fashion_mnist"),
    (["--id-dataset", "fashion_mnist", "--ood-sets", "svhn"],
     "unknown OOD set 'svhn' (known for in-distribution fashion_mnist: mnist, cifar10_gray28, letters, block_shuffled"),
    (["--split-seed", "each"], "split_seed='each' is not valid"),
    (["--init", "he"], "init='he' is out of range; allowed: torch or glorot"),
    (["--adam-eps", "0"], "adam_eps='0' is out of range"),
    (["--preprocess", "raw256"], "preprocess='raw256' is out of range; allowed: raw or raw255 or standardize"),
])
def test_bad_paper_protocol_input_is_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "run_pack", lambda *a, **k: pytest.fail("trained despite bad input"))
    assert main(["run", "--out", str(tmp_path), "--data-dir", str(tmp_path), *QUIET, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("dare-bench: error: ")


def test_delta_with_threshold_none_is_fine():
    name, values = load_preset("seed")
    configs = expand_grid(name, values, ["dare"], [0], {}, ["dare.delta=0.25", "dare.threshold=none"])
    assert (configs[0].method_options["delta"], configs[0].method_options["threshold"]) == (0.25, None)


def test_dare_with_delta_needs_a_validation_split(tiny_data, tmp_path, capsys):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), *QUIET, "--methods", "dare",
                 "-o", "dare.delta=0.25", "--val-size", "0"]) == 2
    assert capsys.readouterr().err == ("dare-bench: error: method dare: delta=0.25 sets tau from the reference's "
                                       "validation loss; set val_size > 0\n")


def test_a_reference_that_is_not_valid_is_named_as_the_reference(clean_registry):
    class NeedsBadReference(Method):
        name = "needs_bad_reference"
        summary = "names a reference run with an invalid option"

        def references(self):
            return {"base": ("deep_ensemble", {"members": 0})}

    methods.register(NeedsBadReference, "test")
    config = make_run_config("needs_bad_reference", {}, make_protocol({}), 0)
    with pytest.raises(ConfigError, match=r"needs_bad_reference\(checkpoint=none\) needs a reference run \(base\), "
                                          r"and it is not valid: method deep_ensemble: members=0 is out of range"):
        config.references()


def test_delta_on_the_command_line_replaces_a_presets_threshold():
    name, values = load_preset("seed")  # its dare has threshold = 0.3
    configs = expand_grid(name, values, ["dare"], [0], {}, ["dare.delta=0.5"])
    assert configs[0].method_options["delta"] == 0.5 and configs[0].method_options["threshold"] is None
    assert isinstance(configs[0].make_method(), DARE)


# -- the paper table ------------------------------------------------------------------------------

def test_paper_table_puts_each_row_beside_its_published_row_in_units_of_the_published_sd():
    summary = pd.DataFrame([
        {"label": "DARE", "variant": "dare(...)", "id_dataset": "fashion_mnist", "ood_sets": "mnist",
         "primary_score": "eq35_distance", "n": 5, "id_acc_mean": 0.874, "id_acc_std": 0.003,
         "auroc_eq35_distance_vs_mnist_mean": 0.948, "auroc_eq35_distance_vs_mnist_std": 0.01,
         "auroc_pred_entropy_vs_mnist_mean": 0.5, "auroc_pred_entropy_vs_mnist_std": 0.0},
        {"label": "MC dropout", "variant": "mc_dropout(...)", "id_dataset": "fashion_mnist", "ood_sets": "mnist",
         "primary_score": "pred_entropy", "n": 4, "id_acc_mean": 0.88, "id_acc_std": 0.01,
         "auroc_pred_entropy_vs_mnist_mean": 0.7, "auroc_pred_entropy_vs_mnist_std": 0.02},
    ])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist").set_index(["label", "quantity"])
    acc = table.loc[("DARE", "ID accuracy")]
    assert (acc["harness_mean"], acc["paper_mean"], acc["paper_std"]) == pytest.approx((87.4, 87.2, 0.2))
    assert acc["diff_in_paper_std"] == pytest.approx(1.0)
    auroc = table.loc[("DARE", "AUROC vs mnist")]
    assert auroc["score"] == "eq35_distance"  # the row's own score, not predictive entropy
    assert (auroc["harness_mean"], auroc["paper_mean"]) == pytest.approx((94.8, 97.4))
    assert auroc["diff_in_paper_std"] == pytest.approx((94.8 - 97.4) / 1.3)
    cifar = table.loc[("DARE", "AUROC vs cifar10_gray28")]  # published, not run here
    assert math.isnan(cifar["harness_mean"]) and cifar["paper_mean"] == 97.7
    mc = table.loc[("MC dropout", "AUROC vs mnist")]  # not in the paper: harness only
    assert mc["harness_mean"] == pytest.approx(70.0) and mc["harness_n"] == 4 and math.isnan(mc["paper_mean"])
    labels = list(table.index.get_level_values(0).unique())
    assert labels[:2] == ["DARE", "MC dropout"]  # the runs, the paper's order first
    # then every published row this folder has no runs of, each cell not comparable, saying why
    assert labels[2:] == ["DE (NLL)", "AnchorNet", "MOD", "NegCorr", "RDE", "DE (MSE)"]
    missing = table.loc[("RDE", "ID accuracy")]
    assert missing["config"] < 0 and missing["harness_n"] == 0 and missing["paper_mean"] == 89.1
    assert (missing["verdict"], missing["verdict_note"]) == ("not comparable", "not run in this folder")
    assert (cifar["verdict"], cifar["verdict_note"]) == ("not comparable", "no finished harness runs")
    assert mc["verdict_note"] == "not published"


def test_the_summary_counts_seeds_per_metric():
    from bench.tables import summarize
    runs = pd.DataFrame({"method": ["a", "a", "a"], "seed": [0, 1, 2], "status": ["ok"] * 3,
                         "id_acc": [0.5, 0.6, 0.7], "auroc_pred_entropy_vs_x": [0.8, None, 0.9]})
    row = summarize(runs, ["method"]).iloc[0]
    assert (row["n"], row["id_acc_n"], row["auroc_pred_entropy_vs_x_n"]) == (3, 3, 2)
    summary = pd.DataFrame([{"label": "DE (NLL)", "variant": "v", "id_dataset": "fashion_mnist", "ood_sets": "mnist",
                             "primary_score": "pred_entropy", "n": 3, "id_acc_mean": 0.9, "id_acc_std": 0.01,
                             "id_acc_n": 3, "auroc_pred_entropy_vs_mnist_mean": 0.8,
                             "auroc_pred_entropy_vs_mnist_std": 0.01, "auroc_pred_entropy_vs_mnist_n": 2}])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist")
    table = table[table["label"] == "DE (NLL)"].set_index("quantity")
    assert table.loc["ID accuracy", "harness_n"] == 3 and table.loc["AUROC vs mnist", "harness_n"] == 2


def test_paper_table_keeps_configs_of_different_protocols_apart():
    base = {"label": "DARE", "variant": "dare(...)", "id_dataset": "fashion_mnist", "ood_sets": "mnist",
            "primary_score": "eq35_distance", "n": 1, "id_acc_mean": 0.8, "id_acc_std": float("nan")}
    summary = pd.DataFrame([{**base, "epochs": 50}, {**base, "epochs": 20, "id_acc_mean": 0.7}])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist")
    acc = table[(table["quantity"] == "ID accuracy") & (table["config"] >= 0)].set_index("variant")["harness_mean"]
    assert acc.to_dict() == pytest.approx({"dare(...) epochs=50": 80.0, "dare(...) epochs=20": 70.0})
    from bench.reporting.paper import format_markdown
    assert format_markdown(table).count("| DARE |") == 2


def test_paper_table_names_check_runs_after_the_main_protocol_and_shows_the_selected_value():
    from bench.reporting.paper import format_markdown
    base = {"id_dataset": "fashion_mnist", "ood_sets": "mnist", "primary_score": "pred_entropy", "n": 5,
            "id_acc_mean": 0.89, "id_acc_std": 0.01, "preprocess": "raw255"}
    summary = pd.DataFrame([
        {**base, "label": "DE (NLL)", "variant": "deep_ensemble(loss=ce)", "preprocess": "raw"},  # a check run
        {**base, "label": "MOD", "variant": "mod(select lam in [0, 1e-5])", "selected": "lam=0.0; lam=0.0; lam=0.0"},
        {**base, "label": "NegCorr", "variant": "negcorr(select lam in [1e-5, 1e-4])", "selected": "lam=1e-05; lam=0.0001"},
        {**base, "label": "DE (NLL)", "variant": "deep_ensemble(loss=ce)"},
    ])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist")
    variants = list(dict.fromkeys(table.loc[table["config"] >= 0, "variant"]))
    assert variants == ["deep_ensemble(loss=ce)", "mod(select lam in [0, 1e-5])", "negcorr(select lam in [1e-5, 1e-4])",
                        "deep_ensemble(loss=ce) preprocess=raw"]  # the paper's order, then the check run, named
    chosen = table.drop_duplicates("variant").set_index("label")["selected"]
    assert chosen["MOD"] == "lam=0.0 (every seed)" and chosen["NegCorr"] == "lam=1e-05; lam=0.0001"
    md = format_markdown(table)
    assert "selected on validation (by seed)" in md and "| lam=0.0 (every seed) |" in md


def test_paper_table_command_writes_csv_markdown_and_figure(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", *TINY, *QUIET,
                 "--id-dataset", "fashion_mnist", "--methods", "deep_ensemble", "-o", "loss=ce,mse"]) == 0
    assert main(["paper-table", "--out", str(out)]) == 2  # runs of no preset: which table is not known
    assert "no preset of the runs in" in capsys.readouterr().err
    assert main(["paper-table", "--out", str(out), "--published", "dare_table3"]) == 0
    for name in ("paper_table.csv", "paper_table.md", "paper_table.png"):
        assert (out / name).stat().st_size > 0
    table = pd.read_csv(out / "paper_table.csv")
    run = table[table["config"] >= 0]
    assert set(run["label"]) == {"DE (NLL)", "DE (MSE)"} and set(run.dropna(subset=["harness_mean"])["harness_n"]) == {2}
    assert set(run.loc[run["harness_mean"].isna(), "harness_n"]) == {0}  # the published OOD set not run: no seeds
    assert set(table.loc[table["config"] < 0, "verdict"]) == {"not comparable"}
    md = (out / "paper_table.md").read_text()
    assert "| DE (MSE) |" in md and "88.6 ± 0.1" in md  # the published DE (MSE) accuracy beside ours
    de_mse = pd.read_csv(out / "runs.csv").query("label == 'DE (MSE)'")["id_acc"]
    assert f"{100 * de_mse.mean():.1f} ± {100 * de_mse.std():.1f} (2) | 88.6 ± 0.1 |" in md  # ours, then theirs
    assert main(["paper-table", "--out", str(out), "--published", "nope"]) == 2
    assert "unknown published table 'nope'" in capsys.readouterr().err
    assert main(["paper-table", "--out", str(out), "--published", "dare_table3", "--in-distribution", "mnist"]) == 2
    assert "no finished runs with in-distribution set 'mnist'" in capsys.readouterr().err


def test_figure_rows_that_share_a_label_are_told_apart_by_what_differs():
    from bench.reporting.paper import _short_names
    names = _short_names(["DE (NLL)", "DE (NLL)", "DARE"],
                         ["deep_ensemble(checkpoint=best, members=5) preprocess=raw",
                          "deep_ensemble(checkpoint=none, members=5) preprocess=raw", "dare(delta=0.25)"])
    assert names == ["DE (NLL)\ncheckpoint=best", "DE (NLL)\ncheckpoint=none", "DARE"]


def test_each_skipped_ood_set_gets_one_note_in_the_paper_table():
    from bench.reporting.report import skipped_sets
    runs = pd.DataFrame({"ood_skipped": ["cifar10_gray28: x not found", "cifar10_gray28: x not found and download failed",
                                         np.nan, "", "svhn: y not found; cifar10_gray28: x not found"]})
    assert skipped_sets(runs) == ["cifar10_gray28: x not found and download failed", "svhn: y not found"]
    assert skipped_sets(pd.DataFrame({"id_acc": [0.9]})) == []


def test_paper_table_pairs_each_row_with_de_nll_and_de_mse_seed_by_seed(tmp_path):
    from bench.tables import summarize
    rows = []
    for label, variant, score, accs, aurocs in [
            ("DE (NLL)", "de_ce", "pred_entropy", [0.89, 0.90, 0.88], [0.88, 0.87, 0.89]),
            ("DE (MSE)", "de_mse", "eq35_distance", [0.88, 0.89, 0.87], [0.96, 0.95, 0.97]),
            ("DARE", "dare", "eq35_distance", [0.87, 0.88, 0.86], [0.961, 0.952, 0.975])]:
        for seed, (acc, auroc) in enumerate(zip(accs, aurocs)):
            rows.append({"label": label, "variant": variant, "method": variant, "id_dataset": "fashion_mnist",
                         "ood_sets": "mnist", "primary_score": score, "seed": seed, "status": "ok",
                         "epochs": 50, "early_stop_acc": None, "id_acc": acc, f"auroc_{score}_vs_mnist": auroc})
    runs = pd.DataFrame(rows)
    summary = summarize(runs, ["label", "variant", "method", "id_dataset", "ood_sets", "primary_score", "epochs",
                               "early_stop_acc"])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist", runs).set_index(["label", "quantity"])
    acc = table.loc[("DARE", "ID accuracy")]
    # DARE is one point below DE (NLL) and DE (MSE) at every seed: the interval collapses onto -1
    assert (acc["vs_de_nll_mean"], acc["vs_de_nll_n"], acc["vs_de_mse_mean"]) == pytest.approx((-2.0, 3, -1.0))
    assert acc["vs_de_mse_real"] and acc["vs_de_mse_low"] == pytest.approx(-1.0)
    auroc = table.loc[("DARE", "AUROC vs mnist")]  # each by its own score: DARE's Eq. 35 vs DE (NLL)'s entropy
    assert auroc["vs_de_nll_mean"] == pytest.approx(100 * (0.962667 - 0.88), abs=1e-3)
    assert auroc["vs_de_mse_mean"] == pytest.approx(100 * 0.008 / 3, abs=1e-6) and not auroc["vs_de_mse_real"]
    assert math.isnan(table.loc[("DE (NLL)", "ID accuracy")].get("vs_de_nll_mean", math.nan))  # not with itself
    # a reference seed that did not finish: fewer pairs, said in the cell and in a note under the table
    from bench.reporting.paper import format_markdown, write_paper_table
    runs.loc[(runs["label"] == "DE (MSE)") & (runs["seed"] == 2), "status"] = "diverged"
    short, _ = write_paper_table(summary, tmp_path, "dare_table3", "fashion_mnist", runs=runs)
    row = short.set_index(["label", "quantity"]).loc[("DARE", "ID accuracy")]
    assert row["vs_de_mse_n"] == 2 and row["vs_de_mse_note"] == ("seeds 2 without a finished reference run with "
                                                                 "this value")
    assert "(n=2)" in format_markdown(short)
    assert "paired with DE (MSE): seeds 2 without a finished reference run" in (tmp_path / "paper_table.md").read_text()
