"""Review fixes: summary groups by config fields, protocols are never mixed, --help shows the
preset's values, the README stays inside the repository, records carry the harness version."""
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import bench
from bench.cli.main import main

TINY = ["--methods", "deep_ensemble", "--seeds", "0", "--epochs", "1", "--early-stop-acc", "none",
        "-o", "members=2", "--no-download", "-q"]


def test_runs_that_differ_only_in_val_size_are_two_rows_and_val_size_is_no_metric(tiny_data, tmp_path):
    out = tmp_path / "out"
    for val_size in ("40", "60"):
        assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--val-size", val_size,
                     "--no-plots", *TINY]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["val_size"]) == [40, 60] and set(summary["n"]) == {1}
    assert not any(c.startswith("val_size_") for c in summary.columns)


def test_two_protocols_in_one_folder_get_their_own_sections_and_plots(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    # the first run draws its one protocol's plots under the plain names; the report replaces them
    for dataset, plots in (("mnist", []), ("fashion_mnist", ["--no-plots"])):
        assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--val-size", "50",
                     "--id-dataset", dataset, *plots, *TINY]) == 0
    assert (out / "comparison.png").is_file()
    capsys.readouterr()
    assert main(["report", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    summary_md = (out / "summary.md").read_text()
    sections = re.findall(r"^## (.*)$", summary_md, flags=re.M)
    assert sorted(sections) == ["preset seed: fashion_mnist in distribution, OOD mnist",
                                "preset seed: mnist in distribution, OOD fashion_mnist"]
    assert all(s in printed for s in sections)
    # each section's table has the one run of its protocol
    for part in summary_md.split("## ")[1:]:
        assert len([line for line in part.splitlines() if line.startswith("| deep_ensemble(")]) == 1
    assert (out / "comparison_seed_mnist.png").is_file() and (out / "comparison_seed_fashion_mnist.png").is_file()
    assert not (out / "comparison.png").exists()


def test_help_shows_the_presets_values_not_none(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--preset", "paper-fmnist", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text
    assert "default: 100-100-100" in text and "default: raw255" in text and "default: 50)" in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: 256-256" in text and "default: fashion_mnist" in text and "(default: None)" not in text


def test_the_readme_refers_to_no_file_outside_the_repository():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert not re.findall(r"\.\./", readme)


def test_records_carry_the_version_and_reuse_of_another_versions_records_is_reported(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--val-size", "50", "--no-plots", *TINY]
    assert main(args) == 0
    (path,) = (out / "records").glob("*.json")
    record = json.loads(path.read_text())
    assert record["harness_version"] == bench.__version__ and "harness_commit" in record
    record["harness_version"] = "0.0.1"
    path.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(args) == 0
    out_text = capsys.readouterr().out
    assert "note: reusing 1 finished runs written by another dare-bench version or commit (1 by 0.0.1; this is " \
        f"{bench.__version__}" in out_text and "--force redoes them" in out_text
    assert json.loads(path.read_text())["harness_version"] == "0.0.1"  # reused, not redone
    assert main([*args, "--force"]) == 0
    assert json.loads(path.read_text())["harness_version"] == bench.__version__


def test_records_of_another_commit_are_reported_when_both_know_their_commit(monkeypatch):
    from bench import provenance
    monkeypatch.setattr(provenance, "commit", lambda: "a" * 40)
    records = [{"harness_version": bench.__version__, "harness_commit": "b" * 40},
               {"harness_version": bench.__version__, "harness_commit": "a" * 40},
               {"harness_version": bench.__version__, "harness_commit": None},
               {}]
    assert provenance.other_versions(records) == {f"{bench.__version__} at bbbbbbbb": 1, "unknown": 1}


def test_a_presets_own_protocol_keeps_the_plain_plot_names():
    from bench.reporting.report import protocol_groups
    common = {"preset": "seed", "id_dataset": "mnist", "ood_sets": "fashion_mnist", "val_size": 1000,
              "split_seed": 0, "hidden": "256-256", "epochs": 5, "batch_size": 256, "lr": 0.001,
              "early_stop_acc": 0.97, "init": "torch", "adam_eps": 1e-8, "run_id": "a"}
    runs = pd.DataFrame([{**common, "preprocess": "raw"}, {**common, "preprocess": "standardize", "run_id": "b"}])
    tags = {g.runs["preprocess"].iloc[0]: g.tag for g in protocol_groups(runs)}
    assert tags == {"raw": "", "standardize": "_seed_mnist_preprocess_standardize"}


def test_a_dry_run_writes_nothing_and_an_empty_column_is_no_metric(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--val-size", "50", "--dry-run", *TINY]) == 0
    assert not out.exists()
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--val-size", "50", "--no-plots",
                 "--select", "deep_ensemble.members=1,2", *TINY[:8], "--no-download", "-q"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert not any(c.startswith(("harness_commit_", "harness_version_")) for c in summary.columns)
    candidates = summary[summary["candidate_of"].fillna("") != ""]
    (selection,) = [p.stem for p in (out / "records").glob("sel-*.json")]
    assert len(candidates) >= 1 and set(candidates["candidate_of"]) == {selection}


def test_a_command_reads_each_predictions_file_once(tiny_data, tmp_path, monkeypatch):
    import zipfile
    from bench import store
    reads: list[str] = []
    real_zipfile = zipfile.ZipFile

    def counted(*args, **kwargs):
        if kwargs.get("mode", args[1] if len(args) > 1 else "r") == "r" and str(args[0]).endswith(".npz"):
            reads.append(str(args[0]))
        return real_zipfile(*args, **kwargs)
    monkeypatch.setattr(zipfile, "ZipFile", counted)
    out = tmp_path / "out"
    # two methods and two seeds: the paired tables, the bootstrap and the figures all read the scores
    grid = ["--methods", "deep_ensemble", "single_network", "--seeds", "0", "1", "--val-size", "50", *TINY[4:]]
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *grid]) == 0
    files = sorted(str(p) for p in (out / "predictions").glob("*.npz"))
    assert len(files) == 4 and sorted(reads) == files  # written, then read once for the tables and figures
    for command in (["report", "--out", str(out)], ["paper-table", "--out", str(out), "--published", "ub_lenet5"]):
        store._ARRAYS.clear()  # a new command in a new process
        reads.clear()
        assert main(command) == 0
        assert sorted(reads) == files, command
