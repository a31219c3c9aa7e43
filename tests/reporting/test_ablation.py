"""Ablations: axes found from the grid, the long table's statistics, the command end to end."""
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from bench.reporting.ablation import ablation_table, axes_of, config_axes
from bench.cli.main import main
from bench.models.mlp import StackedMLP
from bench.training.members import member_abs_mean


def _runs():
    rows = []
    for seed, (acc_a, acc_b) in enumerate([(0.90, 0.80), (0.94, 0.84)]):
        for members, threshold, acc in ((1, 0.1, acc_a), (1, 0.3, acc_b)):
            rows.append({"run_id": f"d{members}{threshold}{seed}", "method": "dare", "label": "DARE", "status": "ok",
                         "members": members, "threshold": threshold, "preset": "p", "id_dataset": "mnist",
                         "ood_sets": "fashion_mnist", "epochs": 5, "primary_score": "pred_entropy", "seed": seed,
                         "id_acc": acc, "auroc_pred_entropy_vs_fashion_mnist": 0.5 + seed / 10})
        rows.append({"run_id": f"e{seed}", "method": "deep_ensemble", "label": "DE", "status": "ok", "members": 1,
                     "threshold": np.nan, "preset": "p", "id_dataset": "mnist", "ood_sets": "fashion_mnist",
                     "epochs": 5, "primary_score": "pred_entropy", "seed": seed, "id_acc": 0.9,
                     "auroc_pred_entropy_vs_fashion_mnist": 0.6})
    return pd.DataFrame(rows)


KEYS = ["method", "label", "members", "threshold", "preset", "id_dataset", "ood_sets", "epochs", "primary_score"]


def test_axes_are_the_options_that_vary_within_a_method():
    runs = _runs()
    assert axes_of(runs, KEYS) == ["threshold"]  # members is 1 everywhere; epochs is protocol
    runs.loc[0, "members"] = 3
    assert axes_of(runs, KEYS) == ["members", "threshold"]


def test_a_planned_grid_has_the_axes_its_runs_will_have():
    def config(method, **options):
        return SimpleNamespace(method=method, fixed_options=options)
    grid = [config("dare", members=m, threshold=t) for m in (1, 3) for t in (None, 0.3)]
    grid += [config("deep_ensemble", members=1)]
    assert config_axes(grid) == ["members", "threshold"]  # None counts as a value
    assert config_axes([config("dare", members=1, threshold=0.3), config("deep_ensemble", members=3)]) == []
    # a selection's walked option is not in its fixed options, so it is no axis
    assert config_axes([SimpleNamespace(method="mod", fixed_options={"members": 5})]) == []
    assert config_axes([]) == []


def test_none_is_a_value_of_its_own_on_an_axis():
    runs = _runs()
    runs.loc[(runs["method"] == "dare") & (runs["threshold"] == 0.3), "threshold"] = None
    assert axes_of(runs, KEYS) == ["threshold"]
    acc = ablation_table(runs, KEYS).query("metric == 'id_acc' and method == 'dare'")
    assert len(acc) == 2 and sorted(acc["mean"].round(6)) == [0.82, 0.92]  # not pooled into one row


def test_the_long_table_has_mean_sd_and_n_over_seeds():
    table = ablation_table(_runs(), KEYS)
    acc = table[(table["metric"] == "id_acc") & (table["method"] == "dare")].set_index("threshold")
    assert acc.loc[0.1, "mean"] == pytest.approx(0.92) and acc.loc[0.3, "mean"] == pytest.approx(0.82)
    assert acc.loc[0.1, "std"] == pytest.approx(np.std([0.90, 0.94], ddof=1)) and acc.loc[0.1, "n"] == 2
    auroc = table[(table["metric"] == "auroc_primary_vs_fashion_mnist") & (table["method"] == "dare")]
    assert auroc["mean"].tolist() == pytest.approx([0.55, 0.55])
    de = table[(table["method"] == "deep_ensemble") & (table["metric"] == "id_acc")]
    assert len(de) == 1 and de["threshold"].isna().all()


def test_member_abs_mean_by_hand():
    model = StackedMLP(2, 2, (1,), 1)
    with torch.no_grad():
        # member 0: weights 1, -2 | 3 ; biases 0 | -1 -> |theta| = 1+2+3+0+1 = 7 over 5 scalars
        model.weights[0].copy_(torch.tensor([[[1.0], [-2.0]], [[0.0], [0.0]]]))
        model.weights[1].copy_(torch.tensor([[[3.0]], [[10.0]]]))
        model.biases[0].copy_(torch.tensor([[0.0], [0.0]]))
        model.biases[1].copy_(torch.tensor([[-1.0], [0.0]]))
    assert member_abs_mean(model).tolist() == pytest.approx([7 / 5, 10 / 5])


def test_the_ablate_command_end_to_end(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["ablate", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble", "dare",
            "--seeds", "0", "1", "--epochs", "2",
            "--val-size", "50", "--early-stop-acc", "none", "--lr", "0.01", "-o", "dare.threshold=0.05,5",
            "-o", "members=1,2", "--no-download", "-q"]
    assert main(args) == 0
    table = pd.read_csv(out / "ablation.csv")
    assert {"members", "threshold"} <= set(table.columns)
    assert len(table[(table["metric"] == "id_acc") & (table["method"] == "dare")]) == 4  # 2 thresholds x 2 sizes
    for name in ("ablation_members.png", "ablation_threshold.png", "ablation_epochs.png"):
        assert (out / name).stat().st_size > 0
    record = json.loads(next((out / "records").glob("*.json")).read_text())
    assert all("param_abs_mean" in h for h in record["history"])
    # the anti-regularizer at work: with a threshold every batch passes, weights grow beyond DE's
    runs = pd.read_csv(out / "runs.csv")
    dare_big = runs[(runs["method"] == "dare") & (runs["threshold"] == 5)]["param_abs_mean"].mean()
    de = runs[runs["method"] == "deep_ensemble"]["param_abs_mean"].mean()
    assert dare_big > de
    # --no-plots: the table is rewritten, no plot is drawn
    (out / "ablation_members.png").unlink()
    assert main([*args, "--no-plots"]) == 0
    assert not (out / "ablation_members.png").exists() and (out / "ablation.csv").is_file()


@pytest.mark.parametrize("args, message", [
    (["-o", "dare.nonsense=1,2"], "method dare: unknown option 'nonsense'"),
    (["-o", "sigma=1,2"], "no selected method has an option 'sigma'"),
    (["-o", "dare.threshold=0.3", "-o", "members=3"], "nothing to ablate"),
])
def test_bad_ablation_axes_are_one_line_and_exit_2(args, message, tmp_path, capsys):
    assert main(["ablate", "--out", str(tmp_path), "--data-dir", str(tmp_path), "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
