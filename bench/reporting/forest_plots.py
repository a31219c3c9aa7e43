"""Forest plots: paired differences to the deep ensemble with their 95 % intervals, per protocol
(forest.png) and per star-design setting (star_forest.png)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.ticker
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import bench.reporting.plotting  # noqa: F401 - the file-only backend, before any figure
from bench.evaluation.catalog import FOREST, ID_ACC
from bench.reporting.paired import read_paired_metric


def forest_panels(differences: pd.DataFrame) -> list[tuple[str, str, float]]:
    """The forest plot's panels: the paired metrics in ``differences`` that the catalog shows in
    FOREST, in its order (a per-OOD-set metric's sets in the table's order), as (the paired metric's
    name, the panel's title, its scale)."""
    parsed = {name: read_paired_metric(name) for name in dict.fromkeys(differences["metric"])}
    shown = sorted((name for name, found in parsed.items() if found and FOREST in found[0].shows),
                   key=lambda name: parsed[name][0].shows[FOREST])
    panels = []
    for name in shown:
        metric, ood_set = parsed[name]
        panels.append((name, metric.title(FOREST, ood_set) + (" (points)" if metric.scale == 100 else "")
                       + (f"\n{metric.better} is better" if metric.better else ""), metric.scale))
    return panels


def forest_plot(path: Path, title: str, differences: pd.DataFrame, labels: dict[str, str] | None = None) -> Path | None:
    """The paired differences of a protocol (bench.reporting.paired, one panel per metric of
    ``forest_panels``): one line per row, its mean and 95 % t-interval over seeds against the zero
    of its reference; ``labels``: the variants' names in the folder's figures (default: the variants)."""
    panels = forest_panels(differences) if not differences.empty else []
    if not panels:
        return None
    rows = list(dict.fromkeys(differences["variant"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels) + 2.4, 0.36 * len(rows) + 1.3), sharey=True,
                             squeeze=False, layout="constrained")
    for ax, (metric, panel, scale) in zip(axes[0], panels):
        sub = differences[differences["metric"] == metric].set_index("variant").reindex(rows)
        y = np.arange(len(rows))
        real = sub["real"].astype("boolean").fillna(False).to_numpy(bool)
        low, high = sub["low"].to_numpy(float) * scale, sub["high"].to_numpy(float) * scale
        ax.hlines(y, low, high, color=np.where(real, "crimson", "grey"), linewidth=1.6)
        ax.plot(sub["mean"].to_numpy(float) * scale, y, "D", color="black", markersize=4)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        ax.set_title(panel, fontsize=9)
    name = (lambda v: labels.get(v, v)) if labels else (lambda v: textwrap.fill(v, 52))
    references = differences.groupby("variant", sort=False)["reference"].first()
    axes[0][0].set_yticks(range(len(rows)), [f"{name(v)}\n− {name(r)}" for v, r in zip(rows, references)],
                          fontsize=8 if labels else 6.5)
    axes[0][0].invert_yaxis()
    fig.suptitle(f"{title}\npaired difference to the deep ensemble, mean and 95 % t-interval over seeds "
                 "(red: excludes 0)", fontsize=10)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def star_forest(path: Path, title: str, summary: pd.DataFrame) -> Path | None:
    """A star design (bench.design.star.setting_summary) as a forest plot, one line per setting grouped
    by choice, the base on top and shaded: per compared method, against each setting's first OOD
    set (a setting that changes the ID dataset changes it), both methods' AUROC (mean over seeds), the
    paired AUROC difference and the accuracy difference with their 95 % t-intervals (red: the
    interval excludes 0); the base's difference as a dotted line."""
    summary = summary[summary["first_set"].astype(bool)] if "first_set" in summary else summary
    if summary.empty:
        return None
    parts = list(summary.groupby("method", sort=False))
    rows = list(dict.fromkeys(summary["setting"]))
    fig, axes = plt.subplots(1, 3 * len(parts), figsize=(4.0 * 3 * len(parts), 0.32 * (len(rows) + 1) + 1.9),
                             sharey=True, squeeze=False)
    y = np.arange(len(rows))
    for p, (method, part) in enumerate(parts):
        part = part.set_index("setting").reindex(rows)
        reference = part["reference"].dropna().iloc[0]
        is_base = part["is_base"].astype("boolean").fillna(False)
        base = part[is_base.to_numpy(bool)]
        ood_set = base["ood_set"].iloc[0] if len(base) else part["ood_set"].dropna().iloc[0]
        if part["ood_set"].dropna().nunique() > 1:  # a setting changed the ID dataset, so its OOD set
            ood_set = f"the first OOD set\n({ood_set} for the base)"
        level, diff, acc = axes[0][3 * p: 3 * p + 3]
        for column, marker, colour, name in ((f"auroc_{reference}", "o", "tab:blue", reference),
                                             (f"auroc_{method}", "s", "tab:orange", method)):
            level.plot(part[column].to_numpy(float), y, marker, color=colour, markersize=4.5, label=name,
                       linestyle="none")
        level.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)  # in the empty row on top
        level.set_title(f"AUROC vs {ood_set}\n(the compared score, mean over seeds)", fontsize=9)
        _difference_panel(diff, part, base, ("difference", "low", "high"), 1,
                          f"Δ AUROC vs {ood_set}\n{method} − {reference}")
        _difference_panel(acc, part, base, ("acc_difference", "acc_low", "acc_high"), ID_ACC.scale,
                          f"Δ accuracy (points)\n{method} − {reference}")
        for i, text in enumerate(part["checkpoint_kept"].fillna("")):  # the mechanism: members whose rule kept an epoch
            if text:
                diff.annotate(text, (1.0, i), xycoords=("axes fraction", "data"), xytext=(3, 0),
                              textcoords="offset points", fontsize=6, va="center", color="dimgrey")
        for ax in (level, diff, acc):
            _mark_settings(ax, is_base.tolist(), part["choice"].tolist())
    axes[0][0].set_yticks(y, [textwrap.shorten(label, 60) for label in _setting_labels(summary, rows)], fontsize=7)
    axes[0][0].set_ylim(len(rows) - 0.5, -1.5)  # inverted: the base on top, an empty row above it for the legend
    fig.suptitle(f"{title}\none choice changed at a time from the base (shaded); 95 % paired t-interval over "
                 "seeds (red: excludes 0); dotted: the base's difference; grey numbers: members whose "
                 "checkpoint rule kept an epoch", fontsize=9, y=1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def _difference_panel(ax, part: pd.DataFrame, base: pd.DataFrame, columns: tuple[str, str, str], scale: float,
                      panel: str) -> None:
    """One star-forest panel of paired differences: each setting's mean and interval, the base's as a dotted line."""
    mean, low, high = columns
    lo, hi = part[low].to_numpy(float) * scale, part[high].to_numpy(float) * scale
    y = np.arange(len(part))
    ax.hlines(y, lo, hi, color=np.where((lo > 0) | (hi < 0), "crimson", "grey"), linewidth=1.6)
    ax.plot(part[mean].to_numpy(float) * scale, y, "D", color="black", markersize=3.5)
    ax.axvline(0, color="black", linewidth=0.8)
    if len(base):
        ax.axvline(float(base[mean].iloc[0]) * scale, color="black", linestyle=":", linewidth=0.9)
    ax.set_title(panel, fontsize=9)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))


def _mark_settings(ax, is_base: list[bool], choices: list[str]) -> None:
    """The base's row shaded, and a thin line between choices."""
    for i, base in enumerate(is_base):
        if base:
            ax.axhspan(i - 0.5, i + 0.5, color="gold", alpha=0.25, linewidth=0)
    for i in range(1, len(choices)):
        if choices[i] != choices[i - 1]:
            ax.axhline(i - 0.5, color="lightgrey", linewidth=0.7)


def _setting_labels(summary: pd.DataFrame, rows: list[str]) -> list[str]:
    """Each setting's line: 'choice: setting', with its OOD set where it is not the base's."""
    first = summary.drop_duplicates("setting").set_index("setting").reindex(rows)
    base_set = first.loc[first["is_base"].astype(bool), "ood_set"]
    base_set = base_set.iloc[0] if len(base_set) else None
    return [(f"{c}: {s}" if c != s.split("=")[0] else s) + (f" (vs {o})" if o != base_set else "")
            for s, c, o in zip(rows, first["choice"], first["ood_set"])]
