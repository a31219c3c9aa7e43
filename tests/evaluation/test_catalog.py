"""The metric catalog (bench.evaluation.catalog): lookups, views in their order, wording and
directions, a duplicate refused, and a metric registered here reaching summary.csv, paired.csv and
the forest plot with no other edit."""
import numpy as np
import pandas as pd
import pytest

from bench.errors import ConfigError
from bench.evaluation import catalog
from bench.evaluation.catalog import (ABLATION, COMPARISON, FOREST, HIGHER, LOWER, PAIRED, SHIFT_CURVES,
                                      SHIFT_SUMMARY, SUMMARY, Metric, get, shown_in)
from bench.evaluation.metrics import prediction_metrics, shift_metrics


def names(view: str) -> list[str]:
    return [m.name for m in shown_in(view)]


def test_each_view_lists_its_metrics_in_its_own_order():
    assert names(SUMMARY) == ["id_acc", "id_nll_nats", "id_ece", "auroc", "fpr95", "augrc_one_minus_max_prob",
                              "train_seconds"]
    assert names(PAIRED) == names(FOREST) == ["id_acc", "id_nll_nats", "id_ece", "auroc", "augrc_one_minus_max_prob"]
    assert names(ABLATION) == ["id_acc", "id_nll_nats", "id_ece", "augrc_one_minus_max_prob", "auroc",
                               "param_abs_mean"]
    assert names(COMPARISON) == ["id_acc", "auroc", "auroc_mutual_info", "id_ece"]
    assert names(SHIFT_SUMMARY) == ["acc", "nll_nats", "ece", "augrc", "pred_entropy_bits"]


def test_one_metric_worded_per_view():
    acc = get("id_acc")
    assert (acc.title(SUMMARY), acc.title(PAIRED), acc.title(ABLATION), acc.title(COMPARISON)) == (
        "ID acc", "Δ ID acc", "ID accuracy", "ID test accuracy")
    assert get("id_nll_nats").title(SUMMARY) == "NLL (nats)" and get("id_nll_nats").title(FOREST) == "Δ NLL"
    assert get("auroc").title(SUMMARY, "mnist") == "AUROC vs mnist"
    assert get("acc").title(SHIFT_CURVES) == "accuracy" and get("acc").title(SHIFT_SUMMARY) == "acc"
    assert (acc.scale, acc.digits, get("acc").digits) == (100, 2, 1)


def test_directions():
    assert {m: get(m).better for m in ("id_acc", "auroc", "id_nll_nats", "id_ece", "fpr95", "augrc")} == {
        "id_acc": HIGHER, "auroc": HIGHER, "id_nll_nats": LOWER, "id_ece": LOWER, "fpr95": LOWER, "augrc": LOWER}
    assert get("pred_entropy_bits").better is None  # neither direction is better under shift


def test_per_ood_set_columns_and_the_clean_link():
    auroc, by_mutual_info = get("auroc"), get("auroc_mutual_info")
    assert auroc.column("pred_entropy", "mnist") == "auroc_pred_entropy_vs_mnist"
    assert by_mutual_info.column("pred_entropy", "mnist") == "auroc_mutual_info_vs_mnist"  # its own score
    assert auroc.sets(["a", "b"]) == ["a", "b"] and by_mutual_info.sets(["a", "b"]) == ["a"]
    assert get("id_acc").sets(["a"]) == [""] and get("id_acc").column("pred_entropy", "a") == "id_acc"
    assert catalog.clean_columns()["id_nll_nats"] == "nll_nats"


def test_a_duplicate_an_unknown_view_and_an_unknown_name_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="a metric named 'id_acc' is registered already"):
        catalog.register(Metric("id_acc", "again"))
    with pytest.raises(ConfigError, match="no view named 'summery'"):
        catalog.register(Metric("new_metric", "new", shows={"summery": 1}))
    with pytest.raises(ConfigError, match="no metric named 'nope'"):
        get("nope")
    assert "new_metric" not in catalog.CATALOG


def test_the_evaluation_computes_what_the_catalog_says():
    rng = np.random.default_rng(0)
    probs, labels = rng.dirichlet(np.ones(3), size=(4, 30)), rng.integers(0, 3, 30)
    metrics = prediction_metrics(probs, labels)
    assert list(metrics) == ["id_acc", "id_nll_nats", "id_brier", "id_ece", "id_ece_10_bins", "id_ece_10_bins_ub"]
    confidence, correct = probs.mean(axis=0).max(axis=1), probs.mean(axis=0).argmax(axis=1) == labels
    by_hand = sum(abs(confidence[b].mean() - correct[b].mean()) * b.sum() / 30
                  for b in [(confidence > lo / 10) & (confidence <= (lo + 1) / 10) for lo in range(10)] if b.any())
    assert metrics["id_ece_10_bins"] == pytest.approx(by_hand)
    assert list(prediction_metrics(probs, labels, validation=True)) == ["val_acc", "val_nll_nats"]
    assert list(shift_metrics(probs, labels)) == ["acc", "nll_nats", "brier", "ece", "pred_entropy_bits",
                                                  "mutual_info_bits", "augrc"]
    assert shift_metrics(probs, labels)["acc"] == prediction_metrics(probs, labels)["id_acc"]


def mean_max_prob(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(probs.mean(axis=0).max(axis=1).mean())


@pytest.fixture
def registered():
    """A metric of this test only, taken out of the catalog again afterwards."""
    metric = catalog.register(Metric("id_mean_max_prob", "mean max prob", "ID mean max probability",
                                     better=HIGHER, compute=mean_max_prob,
                                     shows={SUMMARY: 8, PAIRED: 6, FOREST: 6}))
    yield metric
    catalog.unregister(metric.name)


def test_a_registered_metric_reaches_summary_paired_and_the_forest_plot(registered, tiny_data, tmp_path):
    from bench.cli.main import main
    from bench.reporting.forest_plots import forest_panels
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble", "dare",
                 "--seeds", "0", "1", "--epochs", "1", "--val-size", "50", "-o", "members=2", "--no-download",
                 "--no-plots", "-q"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    assert summary["id_mean_max_prob_mean"].between(0, 1).all()
    paired = pd.read_csv(out / "paired.csv")
    rows = paired[paired["metric"] == "id_mean_max_prob"]
    assert len(rows) == 1 and rows["n"].iloc[0] == 2
    markdown = (out / "summary.md").read_text()
    assert "| mean max prob |" in markdown and "| Δ mean max prob |" in markdown
    panels = forest_panels(paired)
    assert panels[-1] == ("id_mean_max_prob", "Δ mean max prob\nhigher is better", 1)
    assert [name for name, _, _ in panels[:3]] == ["id_acc", "id_nll_nats", "id_ece"]
    assert main(["report", "--out", str(out)]) == 0  # the report draws forest.png through the figure registry
    assert (out / "forest.png").stat().st_size > 0 and "forest.png" in (out / "figures.json").read_text()


def test_uncertainty_baselines_ece_leaves_a_confidence_of_one_out_by_hand():
    from bench.evaluation.calibration import left_closed_ece
    # three confident-and-right at exactly 1.0 (no bin), one 0.95 right, one 0.55 wrong: bins 9 and 5
    confidence = np.array([1.0, 1.0, 1.0, 0.95, 0.55])
    correct = np.array([True, True, True, True, False])
    assert left_closed_ece(confidence, correct, 10) == pytest.approx((abs(0.95 - 1) + abs(0.55 - 0)) / 2)
    # the harness's own (lo, hi] bins keep them: the same predictions come out better calibrated
    from bench.evaluation.calibration import binned_ece
    assert binned_ece(confidence, correct, 10) == pytest.approx((abs(np.mean([1, 1, 1, 0.95]) - 1) * 4 + 0.55) / 5)
