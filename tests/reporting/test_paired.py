"""Paired differences (bench.reporting.paired): the t-interval against scipy, marks, and pairing mismatches
reported rather than dropped."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.reporting.paired import pair, t_interval
from bench.reporting.formatting import format_difference


def runs(values: dict[int, float], status: dict[int, str] | None = None) -> pd.DataFrame:
    return pd.DataFrame({"seed": list(values), "id_acc": list(values.values()),
                         "status": [(status or {}).get(s, "ok") for s in values]})


def test_t_interval_matches_scipy():
    d = np.array([0.012, 0.004, 0.020, -0.002, 0.011])
    mean, low, high = t_interval(d)
    expected = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert mean == pytest.approx(d.mean()) and (low, high) == pytest.approx(expected)
    assert math.isnan(t_interval(np.array([0.3]))[1])  # one pair: no interval


def test_a_real_difference_is_marked_and_one_inside_the_noise_is_not():
    reference = runs({0: 0.80, 1: 0.82, 2: 0.78, 3: 0.81, 4: 0.79})
    better = runs({s: v + 0.02 + 0.001 * s for s, v in zip(range(5), [0.80, 0.82, 0.78, 0.81, 0.79])})
    result = pair(better, reference, "id_acc")
    assert result["n"] == 5 and result["real"] and result["low"] > 0 and result["note"] == ""
    noisy = runs({0: 0.81, 1: 0.81, 2: 0.79, 3: 0.80, 4: 0.78})
    assert not pair(noisy, reference, "id_acc")["real"]
    assert format_difference(result, 100, 1).endswith(" *") and format_difference(result, 100, 1).startswith("+2.2 [")


def test_unpaired_seeds_are_reported_not_silently_dropped():
    reference = runs({0: 0.80, 1: 0.82, 2: 0.78})
    row = runs({0: 0.81, 1: 0.84, 2: 0.79, 3: 0.83, 4: 0.80}, status={2: "diverged"})
    result = pair(row, reference, "id_acc")
    assert result["n"] == 2  # seeds 0 and 1; seed 2 of the row diverged
    assert result["note"] == ("seeds 3, 4 without a finished reference run with this value; "
                              "reference seeds 2 without a finished run with this value")
    lone = pair(runs({0: 0.9}), reference, "id_acc")
    assert lone["n"] == 1 and "fewer than 2 pairs" in lone["note"] and format_difference(lone) == "+0.100 (n=1)"
    assert pair(runs({5: 0.9}), reference, "id_acc")["n"] == 0 and format_difference(pair(runs({5: 0.9}), reference,
                                                                                            "id_acc")) == "-"


def test_each_row_may_be_compared_by_its_own_column():
    row = runs({0: 0.9, 1: 0.8}).rename(columns={"id_acc": "auroc_eq35_distance_vs_mnist"})
    reference = runs({0: 0.7, 1: 0.7}).rename(columns={"id_acc": "auroc_pred_entropy_vs_mnist"})
    result = pair(row, reference, "auroc_eq35_distance_vs_mnist", "auroc_pred_entropy_vs_mnist")
    assert result["mean"] == pytest.approx(0.15) and result["n"] == 2


def test_report_bootstrap_pairs_test_samples_seed_by_seed(tiny_data, tmp_path, capsys):
    from bench.cli.main import main
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble", "dare",
                 "--seeds", "0", "1", "--epochs", "2", "--val-size", "50", "-o", "members=2", "--no-download",
                 "--no-plots", "-q"]) == 0
    assert main(["report", "--out", str(out), "--no-plots", "--bootstrap", "30"]) == 0
    assert "paired bootstrap over test samples (30 resamples, seed 0)" in capsys.readouterr().out
    table = pd.read_csv(out / "bootstrap.csv")
    runs = pd.read_csv(out / "runs.csv").set_index(["method", "seed"])
    assert sorted(set(table["seed"])) == [0, 1] and set(table["resamples"]) == {30}
    for _, row in table.iterrows():  # the difference on the whole test set is the runs' difference
        column = {"auroc_vs_fashion_mnist": "auroc_pred_entropy_vs_fashion_mnist"}.get(row["metric"], row["metric"])
        expected = runs.loc[("dare", row["seed"]), column] - runs.loc[("deep_ensemble", row["seed"]), column]
        assert row["difference"] == pytest.approx(expected, abs=1e-4), row["metric"]  # the cache holds float32
        assert row["low"] <= row["high"]
    first = (out / "bootstrap.csv").read_bytes()
    assert main(["report", "--out", str(out), "--no-plots", "--bootstrap", "30"]) == 0
    assert (out / "bootstrap.csv").read_bytes() == first  # seeded: the same resamples
    assert main(["report", "--out", str(out), "--bootstrap", "-3"]) == 2
    assert "--bootstrap '-3': expected an integer >= 0" in capsys.readouterr().err


def test_the_bootstrap_resamples_the_same_test_samples_for_both_runs():
    from bench.reporting.paired import bootstrap_table
    rng = np.random.default_rng(1)
    n = 200
    label = rng.integers(0, 3, n)
    base = {"id_label": label, "id_pred": np.where(rng.random(n) < 0.8, label, (label + 1) % 3),
            "id_conf": rng.random(n).astype(np.float32), "id_p_true": rng.random(n).astype(np.float32),
            "id_one_minus_max_prob": rng.random(n).astype(np.float32),
            "id_pred_entropy": rng.random(n).astype(np.float32), "ood_x_pred_entropy": rng.random(50).astype(np.float32)}
    shifted = {**base, "id_p_true": base["id_p_true"] * 0.5, "ood_x_pred_entropy": base["ood_x_pred_entropy"] + 1}
    arrays = {"a0": base, "r0": base, "b0": shifted}
    runs = pd.DataFrame([{"variant": v, "run_id": f"{r}0", "seed": 0, "status": "ok", "primary_score": "pred_entropy"}
                         for v, r in (("same", "a"), ("ref", "r"), ("shifted", "b"))]
                        + [{"variant": "same", "run_id": "missing", "seed": 1, "status": "ok",
                            "primary_score": "pred_entropy"}])
    metrics = ["id_acc", "id_nll_nats", "id_ece", "augrc_one_minus_max_prob", "auroc_vs_x"]
    differences = pd.DataFrame([{"variant": v, "reference": "ref", "metric": m} for v in ("same", "shifted")
                                for m in metrics])
    table = bootstrap_table(runs, differences, arrays.__getitem__, 40).set_index(["variant", "metric"])
    same = table.loc["same"].drop(index="")
    # identical predictions resampled with the same indices: every resampled difference is exactly 0
    assert (same["difference"] == 0).all() and (same["low"] == 0).all() and (same["high"] == 0).all()
    assert table.loc[("same", ""), "note"] == "no finished run of the reference"  # seed 1: said, not dropped
    shifted_ = table.loc["shifted"]
    # halving every p_true adds ln 2 to each sample's NLL, whichever samples are drawn
    assert shifted_.loc["id_nll_nats", "low"] == pytest.approx(np.log(2)) == shifted_.loc["id_nll_nats", "high"]
    assert shifted_.loc["auroc_vs_x", "real"] and shifted_.loc["id_acc", "difference"] == 0
