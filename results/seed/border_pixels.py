"""Do corruptions that light MNIST's always-dark pixels hurt DARE more than the deep ensemble?

Reads this folder after `python -m bench evaluate --out results/seed` (shift_paired.csv,
shift_table.csv) and its stored weights (weights/<run_id>.pt, from `run_all.py --save-weights`);
writes border_pixels.csv (per shift at its table level: the share of always-dark pixels it lights,
DARE - deep ensemble accuracy and NLL, paired over seeds) and border_weights.csv (per run: the
first layer's mean |w| on the always-dark pixels and on the others). Usage, from the repository
root: python results/seed/border_pixels.py --data-dir DATA
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

import bench
from bench.data.loaders import load_images, resolve_data_dir

HERE = Path(__file__).parent
DARE, DE = "dare(checkpoint=none, members=3, loss=ce, threshold=0.3)", "deep_ensemble(checkpoint=none, members=3, loss=ce)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="dataset folder (default: $DARE_BENCH_DATA, else ./data)")
    args = parser.parse_args()
    dead = load_images(resolve_data_dir(args.data_dir), "mnist", True, False)[0].amax(dim=0).numpy().reshape(-1) == 0

    table = pd.read_csv(HERE / "shift_table.csv")
    lit = table.groupby("shift", sort=False)[["level", "dead_pixels_lit_mean"]].first()
    paired = pd.read_csv(HERE / "shift_paired.csv")
    paired = paired[(paired["variant"] == DARE) & (paired["reference"] == DE) & (paired["shift"] != "clean")]
    rows = []
    for shift, (level, share) in lit.iterrows():
        row = {"shift": shift, "level": level, "dead_pixels_lit": share}
        for metric in ("acc", "nll_nats"):
            p = paired[(paired["shift"] == shift) & (paired["metric"] == metric)]
            if len(p):
                row.update({f"{metric}_difference": p["mean"].iloc[0], f"{metric}_low": p["low"].iloc[0],
                            f"{metric}_high": p["high"].iloc[0], f"{metric}_real": bool(p["real"].iloc[0])})
        rows.append(row)
    shifts = pd.DataFrame(rows).sort_values("dead_pixels_lit", ascending=False)
    shifts.to_csv(HERE / "border_pixels.csv", index=False)
    print(f"{int(dead.sum())} of {dead.size} MNIST pixels are 0 in every training image")
    print(shifts.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    for metric in ("acc", "nll_nats"):
        rho, p_value = stats.spearmanr(shifts["dead_pixels_lit"], shifts[f"{metric}_difference"])
        print(f"Spearman rank correlation over {len(shifts)} shifts, share of dark pixels lit vs DARE - DE "
              f"{metric}: rho = {rho:.2f} (p = {p_value:.3f})")

    runs = bench.load(HERE)
    weights = []
    for _, run in runs[runs["variant"].isin([DARE, DE])].iterrows():
        first = torch.load(HERE / "weights" / f"{run['run_id']}.pt", map_location="cpu")["weights.0"].abs()
        weights.append({"variant": run["variant"], "method": run["method"], "seed": run["seed"],
                        "abs_w_dark_pixels": float(first[:, dead].mean()), "abs_w_other_pixels": float(first[:, ~dead].mean()),
                        "max_abs_w_dark_pixels": float(first[:, dead].max())})
    weights = pd.DataFrame(weights).sort_values(["method", "seed"])
    weights.to_csv(HERE / "border_weights.csv", index=False)
    print(weights.groupby("method")[["abs_w_dark_pixels", "abs_w_other_pixels", "max_abs_w_dark_pixels"]]
          .agg(["mean", "std"]).to_string(float_format=lambda v: f"{v:.4f}"))
    print(f"torch's initial mean |w| of this layer: {0.5 / np.sqrt(784):.4f} (uniform in ±1/sqrt(784))")


if __name__ == "__main__":
    main()
