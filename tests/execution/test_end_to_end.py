"""The whole CLI on tiny synthetic IDX files: every method, two seeds, tables and plots."""
import contextlib
import io
import json
import shutil

import pandas as pd
import pytest

from bench.cli.main import main
from bench.evaluation.scores import shared

ARGS = ["--methods", "deep_ensemble", "dare", "mc_dropout", "--seeds", "0", "1", "--epochs", "3",
        "--val-size", "50", "--early-stop-acc", "none", "--lr", "0.005", "-o", "members=2",
        "-o", "mc_dropout.passes=3", "--no-download", "-q"]


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """The grid run once with its plots, and what it printed; a test copies the folder before it writes there."""
    out, printed = tmp_path_factory.mktemp("trained") / "results", io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *ARGS]) == 0
    return out, printed.getvalue()


def test_cli_run_writes_records_tables_and_plots(trained, tiny_data, tmp_path, capsys):
    out = tmp_path / "results"
    shutil.copytree(trained[0], out)
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 6 and set(runs["status"]) == {"ok"}
    for col in ("method", "label", "members", "loss", "checkpoint", "threshold", "delta", "dropout", "passes",
                "id_dataset", "ood_sets", "ood_split", "preprocess", "epochs", "early_stop_acc", "batch_size",
                "lr", "hidden", "init", "adam_eps", "split_seed", "primary_score", "seed", "train_seconds",
                "id_acc", "auroc_pred_entropy_vs_fashion_mnist", "fpr95_one_minus_max_prob_vs_fashion_mnist",
                "kept_epochs", "member_val_loss", "val_task_loss", "tau"):
        assert col in runs.columns, col
    assert set(runs["ood_split"]) == {"test"} and set(runs["ood_sets"]) == {"fashion_mnist"}
    assert (runs["id_acc"] > 0.5).all()  # the synthetic classes are learnable; chance is 0.1

    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 3 and set(summary["n"]) == {2}
    dare = summary[summary["method"] == "dare"].iloc[0]
    seeds = runs[runs["method"] == "dare"]["auroc_pred_entropy_vs_fashion_mnist"]
    assert abs(dare["auroc_pred_entropy_vs_fashion_mnist_mean"] - seeds.mean()) < 1e-12
    assert abs(dare["auroc_pred_entropy_vs_fashion_mnist_std"] - seeds.std(ddof=1)) < 1e-12
    assert "tau_mean" in summary and "seed_mean" not in summary  # per-seed values are statistics, not groups

    for name in ("comparison.png", "ood_histograms.png", "roc_curves.png", "summary.md", "reliability.png",
                 "smooth_reliability.png", "risk_coverage.png", "forest.png", "selective.csv", "paired.csv",
                 "top_uncertain.png", "figures.json"):
        assert (out / name).stat().st_size > 0, name
    assert not list(out.glob("top_uncertain_*.png"))  # one figure for the protocol, a row per variant
    # selective prediction from the cached predictions, and the paired differences to the deep ensemble
    selective = pd.read_csv(out / "selective.csv")
    assert set(selective["score"]) == set(shared())
    assert len(selective) == len(shared()) * 6 and (selective["augrc"] <= selective["aurc"] + 1e-12).all()
    assert runs["augrc_one_minus_max_prob"].notna().all() and runs["smece_one_minus_max_prob"].notna().all()
    paired = pd.read_csv(out / "paired.csv")
    assert set(paired["reference"]) == {"deep_ensemble(checkpoint=none, members=2, loss=ce)"}
    assert set(paired["metric"]) == {"id_acc", "id_nll_nats", "id_ece", "auroc_vs_fashion_mnist",
                                     "augrc_one_minus_max_prob"} and set(paired["n"]) == {2}
    assert "Paired differences to the deep ensemble" in (out / "summary.md").read_text()
    assert "AUROC vs fashion_mnist" in trained[1]

    # the same command again finds every run finished and trains nothing; --force redoes them
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    assert len(stamps) == 6
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *ARGS[:-1], "--no-plots"]) == 0
    assert "6 of 6 runs already finished" in capsys.readouterr().out
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *ARGS, "--no-plots", "--force"]) == 0
    assert all(p.stat().st_mtime_ns != stamps[p.name] for p in (out / "records").glob("*.json"))
    assert set(pd.read_csv(out / "summary.csv")["n"]) == {2}


def test_same_seed_gives_identical_metrics(trained, tiny_data, tmp_path):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path / "again"), *ARGS, "--no-plots"]) == 0
    a, b = (pd.read_csv(folder / "runs.csv") for folder in (trained[0], tmp_path / "again"))
    pd.testing.assert_series_equal(a["auroc_pred_entropy_vs_fashion_mnist"], b["auroc_pred_entropy_vs_fashion_mnist"])
    pd.testing.assert_series_equal(a["id_nll_nats"], b["id_nll_nats"])


def test_a_diverged_run_is_recorded_and_the_grid_goes_on(tiny_data, tmp_path):
    out = tmp_path / "results"
    # lr 1e30: the first Adam step moves weights by ~1e30, logits overflow to inf/nan
    code = main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "dare", "deep_ensemble",
                 "--seeds", "0", "--epochs", "3", "--lr", "1e30", "--val-size", "50", "--no-download",
                 "-q", "--no-plots"])
    assert code == 0
    records = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert sorted(r["method"] for r in records) == ["dare", "deep_ensemble"]  # the grid went on
    for r in records:
        assert r["status"] == "diverged" and r["diverged_epoch"] >= 1 and "id_acc" not in r
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["n"]) == {0} and set(summary["n_diverged"]) == {1}


def test_report_rebuilds_tables_from_records(trained, tmp_path):
    out = tmp_path / "results"
    shutil.copytree(trained[0], out)
    drawn = (out / "comparison.png").read_bytes()  # as the run drew it
    (out / "summary.csv").unlink()
    (out / "records" / "0123456789ab.json").write_text('{"run_id": "trunc')  # a half-written record
    assert main(["report", "--out", str(out)]) == 0
    assert len(pd.read_csv(out / "summary.csv")) == 3
    assert len(pd.read_csv(out / "runs.csv")) == 6  # the corrupt one is left out
    assert (out / "comparison.png").read_bytes() == drawn  # same records, same picture


def test_ctrl_c_keeps_every_finished_run_and_the_same_command_resumes(tiny_data, tmp_path, monkeypatch, capsys):
    import bench.execution.executors as executors

    real_run_pack, calls = executors.run_pack, []

    def interrupted_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run_pack(*args, **kwargs)

    monkeypatch.setattr(executors, "run_pack", interrupted_on_third)
    out = tmp_path / "results"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *ARGS, "--pack-size", "1"]) == 130
    assert "interrupted: every finished run is saved in" in capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 2 and set(runs["status"]) == {"ok"}

    calls.clear()
    monkeypatch.setattr(executors, "run_pack", lambda *a, **k: (calls.append(1), real_run_pack(*a, **k))[1])
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *ARGS, "--no-plots", "--pack-size", "1"]) == 0
    assert len(calls) == 4  # only the unfinished runs were trained
    assert len(pd.read_csv(out / "runs.csv")) == 6
