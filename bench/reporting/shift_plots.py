"""The shift suite's figures: metric curves over the shift levels, the per-corruption heat maps and
the gallery of every shift."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from bench.data import ood_sets, shifts
from bench.data.files import load_images
from bench.reporting.plotting import ProtocolView
from bench.store import RunStore
from bench.tables import id_datasets
from bench.data.shifts import SHIFTS
from bench.evaluation.catalog import SHIFT_CURVES, clean_columns, shown_in


def shift_panels() -> list[tuple[str, str]]:
    """The shift curves' panels (the catalog's SHIFT_CURVES): (shift.csv metric, title)."""
    return [(metric.name, metric.title(SHIFT_CURVES)) for metric in shown_in(SHIFT_CURVES)]


CURVE_FAMILIES = ("rotation", "translation", "mnist_c")  # the rows of shift_curves.png


def shift_curves(path: Path, view: ProtocolView) -> None:
    """Each metric against shift intensity, one line per variant, mean ± sd over seeds (band): rows
    rotation, translation and the mean over the MNIST-C corruptions that have severities. Level 0
    is the clean test split (the runs' own ID metrics)."""
    title, shift, clean, panels = view.title, view.shift, view.runs, shift_panels()
    rows = [("rotation", "rotation (degrees)"), ("translation", "cyclic translation (pixels)"),
            ("mnist_c", "MNIST-C severity\n(mean over the graded corruptions)")]
    rows = [(family, label) for family, label in rows if (shift["family"] == family).any()]
    variants = [v for v in view.variants if v in set(shift["variant"])]  # the folder's order and colours
    colors, names = view.colors, view.labels
    graded = [n for n, s in SHIFTS.items() if s.family != "mnist_c" or s.unit]
    per_run = (shift[shift["shift"].isin(graded)].groupby(["family", "variant", "run_id", "seed", "level"], sort=False)
               [[m for m, _ in panels]].mean().reset_index())  # MNIST-C: the mean over corruptions
    clean_rows = clean[clean["run_id"].isin(shift["run_id"])].rename(columns=clean_columns())
    fig, axes = plt.subplots(len(rows), len(panels), figsize=(3.1 * len(panels), 2.7 * len(rows) + 1.0),
                             squeeze=False, layout="constrained")
    for r, (family, label) in enumerate(rows):
        data = pd.concat([clean_rows.assign(family=family, level=0.0), per_run[per_run["family"] == family]])
        for c, (metric, panel) in enumerate(panels):
            ax = axes[r][c]
            if metric not in data:
                ax.axis("off")
                continue
            stats = data.groupby(["variant", "level"], sort=False)[metric].agg(["mean", "std"]).reset_index()
            for variant in variants:
                s = stats[stats["variant"] == variant].sort_values("level")
                ax.plot(s["level"], s["mean"], "-o", markersize=2.5, linewidth=1.2, color=colors[variant],
                        label=names[variant])
                ax.fill_between(s["level"], s["mean"] - s["std"].fillna(0), s["mean"] + s["std"].fillna(0),
                                color=colors[variant], alpha=0.15, linewidth=0)
            ax.set_title(panel, fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(f"{title}\nunder shift: mean ± sd over seeds (band); 0 = the clean test split", fontsize=10)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def shift_heatmaps(path: Path, view: ProtocolView) -> None:
    """The per-corruption table as heatmaps: rows variants, columns shifts at the table level (MNIST-C's
    severity), one panel per metric (mean over seeds)."""
    title, table = view.title, view.shift_levels
    metrics = [("acc", "accuracy", "viridis"), ("ece", "ECE", "magma_r"), ("pred_entropy_bits", "predictive entropy (bits)", "cividis")]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(2.5 + 0.62 * table["shift"].nunique(),
                                                       (0.32 * table["variant"].nunique() + 1.2) * len(metrics)),
                             layout="constrained")
    for ax, (metric, name, cmap) in zip(np.atleast_1d(axes), metrics):
        grid = table.pivot_table(index="variant", columns="shift", values=metric, aggfunc="mean", sort=False)
        grid = grid.reindex([v for v in view.variants if v in grid.index])  # the folder's order
        sns.heatmap(grid, annot=True, fmt=".2f", annot_kws={"fontsize": 6}, cmap=cmap, cbar=False, ax=ax)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.set_yticks(np.arange(len(grid)) + 0.5, [view.labels.get(v, v) for v in grid.index], fontsize=7.5, rotation=0)
        ax.tick_params(axis="x", labelsize=7, rotation=60)
    fig.suptitle(f"{title}\nper shift at the table level (MNIST-C's severity; rotation 90°, translation 14 px), "
                 "mean over seeds", fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def gallery_rows(datasets: list[str], names: list[str], generated: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(ID dataset, shift) per gallery row, then (dataset, "OOD") where ``generated`` OOD sets are shown:
    a shift of one ID dataset only (scikit-learn's digits: MNIST) has no row for the others."""
    return ([(d, n) for d in datasets for n in names if shifts.SHIFTS[n].applies_to(d)]
            + [(d, "OOD") for d in datasets if generated])


def shift_gallery(path: Path, store: RunStore, names: list[str], data_dir: Path, seed: int = 0,
                  ood: list[str] | None = None) -> Path | None:
    """One ID test image of each ID dataset in the folder under every shift and level (a row per
    shift), and the first image of each generated OOD set among ``ood`` (None: all of them). None when
    there is nothing to show."""
    records, _ = store.scan()
    datasets = id_datasets(records)
    generated = tuple(n for n in ood_sets.generated() if ood is None or n in ood)
    rows = gallery_rows(datasets, names, generated)
    if not rows:
        return None
    width = max([len(shifts.SHIFTS[n].levels) for _, n in rows if n != "OOD"] + [len(generated), 1])
    fig, axes = plt.subplots(len(rows), width + 1, figsize=(0.75 * (width + 1), 0.82 * len(rows)), squeeze=False)
    for r, (dataset, name) in enumerate(rows):
        test = load_images(Path(data_dir), dataset, False, False)[0].numpy()
        images = test[:1].astype(np.float64)
        axes[r][0].text(1.0, 0.5, f"{name}\n({dataset})" if len(datasets) > 1 else name, ha="right", va="center",
                        fontsize=6.5, transform=axes[r][0].transAxes)
        if name == "OOD":
            cells = [(f"{n}", ood_sets.generate(n, test)[0]) for n in generated]  # as scored
        else:
            spec = shifts.SHIFTS[name]
            cells = [(f"{lv:g}" if spec.unit else "", shifts.shifted(images, name, lv, seed)[0]) for lv in spec.levels]
        for c in range(width):
            ax = axes[r][c + 1]
            if c >= len(cells):
                ax.axis("off")
                continue
            ax.imshow(cells[c][1], cmap="gray", vmin=0, vmax=255)
            ax.set_title(cells[c][0], fontsize=5.5, pad=1.5)
            ax.set_xticks([]), ax.set_yticks([])  # the frame stays: a white image is not the page
            for spine in ax.spines.values():
                spine.set_color("0.6"), spine.set_linewidth(0.5)
        axes[r][0].axis("off")
    fig.suptitle("the shift suite on the first ID test image (a row per shift, its levels left to right; random "
                 "corruptions drawn for this image alone, so the kind, not the exact pixels scored)"
                 + (" and the first image of each generated OOD set (as scored)" if generated else ""), fontsize=7)
    fig.tight_layout(pad=0.3, rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path
