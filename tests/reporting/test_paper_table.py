"""The runs beside a published table (bench.reporting.paper): the published unit, the verdict, protocols
kept apart, check runs named, the command's files, paired differences to DE (NLL) and DE (MSE)."""
import math

import numpy as np
import pandas as pd
import pytest

from bench.cli.main import main
from bench.reporting.paper import NOT_SCORED, build_paper_table
from bench.reporting.published import PUBLISHED_DIR, load_published

QUIET = ["--no-download", "-q", "--no-plots"]
TINY = ["--epochs", "2", "--val-size", "50", "-o", "members=2"]


# -- the paper table ------------------------------------------------------------------------------

def test_paper_table_puts_each_row_beside_its_published_row_in_units_of_the_published_sd():
    summary = pd.DataFrame([
        {"label": "DARE", "variant": "dare(...)", "id_dataset": "fashion_mnist", "ood_sets": "mnist", "hidden": "100-100-100",
         "primary_score": "eq35_distance", "n": 5, "id_acc_mean": 0.874, "id_acc_std": 0.003,
         "auroc_eq35_distance_vs_mnist_mean": 0.948, "auroc_eq35_distance_vs_mnist_std": 0.01,
         "auroc_pred_entropy_vs_mnist_mean": 0.5, "auroc_pred_entropy_vs_mnist_std": 0.0},
        {"label": "MC dropout", "variant": "mc_dropout(...)", "id_dataset": "fashion_mnist", "ood_sets": "mnist",
         "hidden": "100-100-100",
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
    assert (cifar["verdict"], cifar["verdict_note"]) == ("not comparable", NOT_SCORED)  # runs without the set
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
    # report --compare-to: a published table by name (the same files), or a folder (here itself: all equal)
    (out / "paper_table.md").unlink()
    assert main(["report", "--out", str(out), "--no-plots", "--compare-to", "dare_table3"]) == 0
    assert "88.6 ± 0.1" in (out / "paper_table.md").read_text()
    (out / "paper_table.md").unlink()
    own = tmp_path / "mine.csv"  # a user's own transcription, by path
    own.write_text((PUBLISHED_DIR / "dare_table3.csv").read_text().replace("88.6", "77.7"))
    assert main(["report", "--out", str(out), "--no-plots", "--compare-to", str(own)]) == 0
    assert "77.7 ± 0.1" in (out / "paper_table.md").read_text()
    assert "77.7 ± 0.1" in (out / "index.html").read_text()  # the page shows the table compared to
    assert main(["paper-table", "--out", str(out), "--published", "dare_table3"]) == 0
    assert "77.7" not in (out / "index.html").read_text() and "88.6 ± 0.1" in (out / "index.html").read_text()
    assert main(["report", "--out", str(out), "--no-plots", "--compare-to", str(out)]) == 0
    same = pd.read_csv(out / "compare_to_out.csv")
    assert len(same) and (same["diff"] == 0).all() and same["within_reference_sd"].all()
    capsys.readouterr()
    before = (out / "paper_table.csv").read_bytes()
    mnist_only = tmp_path / "mnist_only.csv"  # a table of another in-distribution set: refused, nothing rewritten
    mnist_only.write_text("in_distribution,ood_set,method,metric,mean,std,n_seeds,source\nmnist,,DE (NLL),accuracy_pct,99.0,,,x\n")
    assert main(["paper-table", "--out", str(out), "--published", str(mnist_only)]) == 2
    assert "has no cells with in-distribution set 'fashion_mnist' (it has mnist)" in capsys.readouterr().err
    assert (out / "paper_table.csv").read_bytes() == before
    summary_md = (out / "summary.md").read_bytes()  # report --compare-to it: refused before the report is rewritten
    (out / "summary.md").write_bytes(summary_md + b"marker")
    assert main(["report", "--out", str(out), "--no-plots", "--compare-to", str(mnist_only)]) == 2
    assert (out / "summary.md").read_bytes().endswith(b"marker")
    from bench.reporting.report import table_gap  # the preset's own table that does not fit: a note, no refusal
    runs = pd.read_csv(out / "runs.csv")
    assert table_gap(str(mnist_only), runs) == (f"published table {mnist_only} has no cells with in-distribution set "
                                                "'fashion_mnist' (it has mnist)")
    assert table_gap("dare_table3", runs) == ""
    assert "--in-distribution SET" in table_gap("dare_table3", pd.concat([runs, runs.assign(id_dataset="mnist")]))
    capsys.readouterr()
    assert main(["report", "--out", str(out), "--no-plots", "--compare-to", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compare-to nope: no published table of that name (dare_table3, ub_lenet5" in err


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


def test_a_spread_that_rounds_to_zero_shows_its_first_figure():
    from bench.reporting.paper import _cell
    assert _cell(99.08, 0.049, 3) == "99.1 ± 0.05 (3)"  # not "± 0.0" beside an interval of ± 0.3
    assert _cell(0.0101, 0.0004, 2, digits=3) == "0.010 ± 0.0004 (2)"
    assert _cell(89.1, 0.17, 5) == "89.1 ± 0.2 (5)" and _cell(99.0, 0.0, 3) == "99.0 ± 0.0 (3)"
    assert _cell(float("nan"), 0.1, 3) == "-" and _cell(1.0, float("nan"), 0) == "1.0"
