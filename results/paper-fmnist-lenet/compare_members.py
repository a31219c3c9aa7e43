"""Does DARE's edge over DE (MSE) survive conv members, and does the frozen-trunk recipe change it?

Three versions of the DARE paper's Fashion-MNIST protocol, the same seeds 0-4 (each its own split,
split_seed = run) and the same rows (DE (NLL), DE (MSE), DARE with delta 0.25):

* ``mlp``: the paper's 784-100-100-100-10 members (results/paper-fmnist);
* ``lenet5``: textbook LeNet-5 members (preset paper-fmnist-lenet, this folder);
* ``trunk``: MLP heads 100-100-100 on one frozen LeNet-5 trunk per seed (preset paper-fmnist-trunk,
  this folder).

For each version and metric (ID accuracy; AUROC vs MNIST by each row's own score: the Eq. 35
distance for DE (MSE) and DARE, predictive entropy for DE (NLL)), the paired difference DARE − DE
(MSE) and DARE − DE (NLL) seed by seed, mean and 95 % t-interval; then the change of DARE − DE (MSE)
from the MLP to each of the other two, paired by seed. ``real`` marks an interval that excludes 0.

    python results/paper-fmnist-lenet/compare_members.py    # -> edges.csv, rows.csv (each version's rows)
"""
from pathlib import Path

import numpy as np
import pandas as pd

import bench
from bench.reporting.paired import t_interval

HERE = Path(__file__).resolve().parent
ROWS = ("DE (NLL)", "DE (MSE)", "DARE")
METRICS = {"ID accuracy": "id_acc", "AUROC vs MNIST": "auroc"}


def versions() -> dict[str, pd.DataFrame]:
    """The runs of each version: the MLP from results/paper-fmnist, LeNet-5 members and the trunk from here."""
    mlp = bench.load(HERE.parent / "paper-fmnist")
    here = bench.load(HERE) if (HERE / "records").is_dir() else pd.DataFrame(columns=mlp.columns)
    trunk = here.get("trunk", pd.Series("none", index=here.index)).fillna("none")
    out = {"mlp": mlp, "lenet5": here[(here.get("arch") == "lenet5") & (trunk == "none")] if len(here) else here,
           "trunk": here[trunk != "none"] if len(here) else here}
    # the paper protocol's rows only: the paper folder also holds check runs of other protocols
    return {k: v[(v["label"].isin(ROWS)) & (v.get("preprocess", "raw255") == "raw255")
                 & (v.get("checkpoint").isin(["best", "last_below_threshold"]))] for k, v in out.items()}


def by_seed(runs: pd.DataFrame, label: str, metric: str) -> pd.Series:
    rows = runs[(runs["label"] == label) & (runs["status"] == "ok")]
    if metric == "auroc":
        values = [row[f"auroc_{row['primary_score']}_vs_mnist"] for _, row in rows.iterrows()]
    else:
        values = list(rows[metric])
    return pd.Series(values, index=rows["seed"].values, dtype=float).groupby(level=0).first()


def interval(values: np.ndarray) -> dict:
    mean, low, high = t_interval(values)
    return {"n": len(values), "mean": mean, "low": low, "high": high, "real": bool(low > 0 or high < 0)}


def edges(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for title, metric in METRICS.items():
        dare_vs_mse = {}
        for version, frame in runs.items():
            dare = by_seed(frame, "DARE", metric)
            for reference in ("DE (MSE)", "DE (NLL)"):
                d = (dare - by_seed(frame, reference, metric)).dropna()
                if reference == "DE (MSE)":
                    dare_vs_mse[version] = d
                rows.append({"version": version, "metric": title, "difference": f"DARE - {reference}",
                             **interval(d.to_numpy())})
        for version in ("lenet5", "trunk"):
            seeds = sorted(set(dare_vs_mse["mlp"].index) & set(dare_vs_mse[version].index))
            change = np.array([dare_vs_mse[version][s] - dare_vs_mse["mlp"][s] for s in seeds])
            rows.append({"version": f"{version} - mlp", "metric": title,
                         "difference": "change of DARE - DE (MSE)", **interval(change)})
    return pd.DataFrame(rows)


def row_values(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each version's rows: seeds, then mean and sd over them of ID accuracy, AUROC vs MNIST (the
    row's own score) and ID NLL (what the README's table quotes)."""
    rows = []
    for version, frame in runs.items():
        for label in ROWS:
            values = {"ID accuracy": by_seed(frame, label, "id_acc"), "AUROC vs MNIST": by_seed(frame, label, "auroc"),
                      "ID NLL": by_seed(frame, label, "id_nll_nats")}
            row = {"version": version, "row": label, "n": len(values["ID accuracy"])}
            for metric, v in values.items():
                row |= {f"{metric} mean": v.mean(), f"{metric} sd": v.std()}
            rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    runs = versions()
    table = edges(runs)
    table.to_csv(HERE / "edges.csv", index=False, float_format="%.6g")
    print(table.to_string(index=False, float_format=lambda v: f"{v:+.4f}"))
    values = row_values(runs)
    values.to_csv(HERE / "rows.csv", index=False, float_format="%.6g")
    print(values.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()
