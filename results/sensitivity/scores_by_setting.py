"""Every stored score's AUROC, for each setting and method of a star design.

The star table pairs DARE and the deep ensemble under each method's own score. This reads every
score the runs recorded (predictive entropy, mutual information, 1 - max prob, one member's
entropy, the geometric-mean entropy and, for MSE runs, the Eq. 35 distance), so one can ask which
setting and score brings a method's AUROC to a published one. Reads star_design.csv and runs.csv of
each folder given; writes scores_by_setting.csv beside this script (mean, sd and n over seeds of
the AUROC against each setting's first OOD set). Usage, from the repository root:
python results/sensitivity/scores_by_setting.py results/sensitivity/paper results/sensitivity/seed
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

SCORES = ["pred_entropy", "mutual_info", "one_minus_max_prob", "member_entropy", "geo_mean_entropy",
          "eq35_distance"]


def folder_table(folder: Path) -> pd.DataFrame:
    design = pd.read_csv(folder / "star_design.csv")
    design = design[design["score"].isna()]          # score settings reuse the base's runs
    runs = pd.read_csv(folder / "runs.csv").set_index("run_id")
    rows = []
    for (order, setting, method), group in design.groupby(["order", "setting", "method"], sort=True):
        picked = runs.loc[group["run_id"]]
        ood = picked["ood_sets"].iloc[0].split()[0]
        for score in SCORES:
            column = f"auroc_{score}_vs_{ood}"
            if column not in picked or picked[column].isna().all():
                continue
            values = picked[column].dropna()
            rows.append({"study": folder.name, "order": order, "setting": setting, "method": method,
                         "ood_set": ood, "score": score, "n": len(values), "auroc_mean": values.mean(),
                         "auroc_sd": values.std(ddof=1)})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="star-design output folders")
    args = parser.parse_args()
    table = pd.concat([folder_table(f) for f in args.folders], ignore_index=True)
    out = Path(__file__).parent / "scores_by_setting.csv"
    table.to_csv(out, index=False, float_format="%.4f")
    print(f"wrote {out} ({len(table)} rows)")


if __name__ == "__main__":
    main()
