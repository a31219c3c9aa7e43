"""Does a method's standing against the deep ensemble change between the MLP and LeNet-5?

For every method of both folders (results/seed: the 784-256-256-10 MLP; results/seed-lenet: the
textbook LeNet-5; the same seed protocol otherwise) and each metric (ID accuracy, NLL, AUROC vs
FashionMNIST by the row's own score), the paired difference to the deep ensemble of the same seed
and architecture, Δ = method − DE, on each architecture; then the change Δ_LeNet − Δ_MLP, paired by
seed (seed s of both folders: the same split, the same init and data-order streams, other networks),
mean and 95 % t-interval over the seeds. `changes` marks an interval that excludes 0.

    python results/seed-lenet/compare_architectures.py      # -> results/seed-lenet/architectures.csv
"""
from pathlib import Path

import numpy as np
import pandas as pd

import bench
from bench.reporting.paired import t_interval

HERE = Path(__file__).resolve().parent
FOLDERS = {"mlp": HERE.parent / "seed", "lenet5": HERE}
REFERENCE = "DE (NLL)"
METRICS = {"ID acc": "id_acc", "NLL (nats)": "id_nll_nats", "AUROC vs FashionMNIST": "auroc"}


def by_seed(runs: pd.DataFrame, label: str, metric: str) -> pd.Series:
    rows = runs[runs["label"] == label]
    if metric == "auroc":  # each row by its own score (the paper table's rule)
        values = [row[f"auroc_{row['primary_score']}_vs_fashion_mnist"] for _, row in rows.iterrows()]
        return pd.Series(values, index=rows["seed"].values)
    return pd.Series(rows[metric].values, index=rows["seed"].values)


def main() -> None:
    runs = {arch: bench.load(folder) for arch, folder in FOLDERS.items()}
    labels = [label for label in runs["lenet5"]["label"].drop_duplicates() if label in set(runs["mlp"]["label"])
              and label != REFERENCE and not label.endswith("+ TS")]
    rows = []
    for label in labels:
        for title, metric in METRICS.items():
            delta = {arch: by_seed(r, label, metric) - by_seed(r, REFERENCE, metric) for arch, r in runs.items()}
            seeds = sorted(set(delta["mlp"].dropna().index) & set(delta["lenet5"].dropna().index))
            change = np.array([delta["lenet5"][s] - delta["mlp"][s] for s in seeds])
            row = {"method": label, "metric": title, "n": len(seeds)}
            for arch in FOLDERS:
                mean, low, high = t_interval(delta[arch].loc[seeds].to_numpy())
                value = by_seed(runs[arch], label, metric).loc[seeds]
                row.update({f"{arch}": value.mean(), f"{arch}_sd": value.std(ddof=1),
                            f"delta_{arch}": mean, f"delta_{arch}_low": low, f"delta_{arch}_high": high})
            mean, low, high = t_interval(change)
            row.update(change=mean, change_low=low, change_high=high, changes=bool(low > 0 or high < 0))
            rows.append(row)
    table = pd.DataFrame(rows)
    table.to_csv(HERE / "architectures.csv", index=False, float_format="%.6g")
    shown = table[table["changes"]][["method", "metric", "delta_mlp", "delta_lenet5", "change", "change_low",
                                     "change_high"]]
    print(f"{len(table)} (method, metric) pairs, {len(shown)} change beyond the seed noise:")
    print(shown.to_string(index=False, float_format=lambda v: f"{v:+.4f}"))


if __name__ == "__main__":
    main()
