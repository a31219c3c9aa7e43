"""The figures of one protocol's runs, from the stored records and cached scores (PNG,
matplotlib/seaborn): the comparison strip plot, OOD histograms and ROC curves, reliability
diagrams, risk-coverage curves and the most uncertain test images. Each is drawn from a
ProtocolView and named after its file (bench.reporting.figures registers them)."""
from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.collections import PolyCollection
import numpy as np
import seaborn as sns
from sklearn.metrics import roc_curve

from bench.evaluation.catalog import COMPARISON, shown_in
from bench.evaluation.columns import PRIMARY, ood_column, score_key
from bench.reporting.plotting import MAX_PROB_AUGRC, ProtocolView, primary_of, score_label
from bench.evaluation.calibration import ECE_BINS, reliability_bins
from bench.evaluation.selective import rc_curve, risk_at_coverage
from bench.evaluation.scores import MAX_PROB, PRED_ENTROPY

def comparison(path: Path, view: ProtocolView) -> None:
    """Each headline metric per variant: the seeds as dots, their mean ± sd as a diamond."""
    title, runs, variants, colors, sets = view.title, view.runs, view.variants, view.colors, view.sets
    panels = [(metric.column(PRIMARY, s), metric.title(COMPARISON, s)) for metric in shown_in(COMPARISON)
              for s in metric.sets(sets)]  # the catalog's; a per-OOD-set metric by each run's own score
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1.6, 0.36 * len(variants) + 1.3),
                             sharey=True, layout="constrained")
    # seaborn jitters strip plots with numpy's global RNG: fix it so the same records give the same PNG
    rng_state = np.random.get_state()
    np.random.seed(0)
    for ax, (col, panel_title) in zip(axes, panels):
        sns.stripplot(data=runs, y="variant", x=col, hue="variant", order=variants, palette=colors,
                      size=5, alpha=0.55, jitter=0.12, ax=ax, legend=False)
        sns.pointplot(data=runs, y="variant", x=col, hue="variant", order=variants, palette=colors,
                      errorbar="sd", capsize=0.25, markers="D", linestyle="none", ax=ax, legend=False)
        lo, hi = runs[col].min(), runs[col].max()
        pad = max((hi - lo) * 0.6, 0.01)
        ax.set_xlim(max(lo - pad, 0), hi + pad)
        ax.set_title(panel_title, fontsize=10)
        ax.set_xlabel("")
        ax.set_ylabel("")
    axes[0].set_yticks(range(len(variants)), [view.labels[v] for v in variants], fontsize=9)
    np.random.set_state(rng_state)
    n = runs.groupby("variant").size()
    fig.suptitle(f"{title}\ndiamonds: mean ± sd over seeds (n = {', '.join(map(str, sorted(set(n))))}); "
                 "dots: single seeds", fontsize=10)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def ood_histograms(path: Path, view: ProtocolView) -> None:
    """Per variant, its primary score on the ID test split against the first OOD set, seeds pooled."""
    title, runs, variants, colors, arrays, ood_set = (view.title, view.runs, view.variants, view.colors,
                                                      view.arrays, view.sets[0])
    cols = min(len(variants), 4)
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.7 * rows + 0.6), squeeze=False, layout="constrained")
    for ax in axes.flat[len(variants):]:
        ax.axis("off")
    for ax, variant in zip(axes.flat, variants):
        ids, score = runs.loc[runs["variant"] == variant, "run_id"], primary_of(runs, variant)
        s_id = np.concatenate([arrays[r][score_key(score)] for r in ids])
        s_ood = np.concatenate([arrays[r][score_key(score, ood_set)] for r in ids])
        top = np.quantile(np.r_[s_id, s_ood], 0.995)  # distance scores have long tails
        bins = np.linspace(min(s_id.min(), s_ood.min(), 0), max(top, 1e-6), 40)
        ax.hist(s_id, bins=bins, density=True, alpha=0.6, color=colors[variant], label="ID test")
        ax.hist(s_ood, bins=bins, density=True, histtype="step", linewidth=1.8, color="black", label=f"{ood_set} test")
        ax.set_yscale("log")
        ax.set_title(view.labels[variant], fontsize=9, color=colors[variant])
        ax.set_xlabel(score_label(score), fontsize=8)
    for row in axes:
        row[0].set_ylabel("density (log)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{title}\nID test against {ood_set} test by each method's score; seeds pooled; x clipped at the "
                 "99.5th percentile", fontsize=10)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def roc_curves(path: Path, view: ProtocolView) -> None:
    """ROC curves against the first OOD set by each variant's primary score, one line per seed."""
    title, runs, variants, colors, arrays, ood_set = (view.title, view.runs, view.variants, view.colors,
                                                      view.arrays, view.sets[0])
    fig, ax = plt.subplots(figsize=(8.6, 5.2), layout="constrained")
    for variant in variants:
        sub, score = runs[runs["variant"] == variant], primary_of(runs, variant)
        for i, rid in enumerate(sub["run_id"]):
            s_id, s_ood = arrays[rid][score_key(score)], arrays[rid][score_key(score, ood_set)]
            fpr, tpr, _ = roc_curve(np.r_[np.zeros(len(s_id)), np.ones(len(s_ood))], np.r_[s_id, s_ood])
            auroc = sub[ood_column("auroc", score, ood_set)]
            label = (f"{view.labels[variant]}: {score_label(score)} AUROC {auroc.mean():.3f} ± "
                     f"{auroc.std(ddof=1) if len(auroc) > 1 else 0:.3f}")
            ax.plot(fpr, tpr, color=colors[variant], alpha=0.8, linewidth=1.3, label=label if i == 0 else None)
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    ax.set_xlabel("false positive rate (ID flagged)")
    ax.set_ylabel(f"true positive rate ({ood_set} caught)")
    ax.set_title(f"{title}\nROC vs {ood_set} by each method's score, one line per seed", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def top_uncertain(path: Path, view: ProtocolView) -> None:
    """A row per variant: the most uncertain ID test images of its first seed (by predictive entropy),
    each with the prediction and its confidence, the true class (red: wrong) and the entropy. A row is
    one strip of images in one axes (an axes per image made this one of the slowest figures), each
    image scaled to its own grey range as an imshow of it alone would."""
    firsts = [view.runs[view.runs["variant"] == v].sort_values("seed").iloc[0] for v in view.variants]
    k = max(len(view.arrays[first["run_id"]]["top_index"]) for first in firsts)
    name = (lambda c: view.class_names[c].split(" - ")[0]) if view.class_names else str
    fig, axes = plt.subplots(len(firsts), 1, figsize=(2.1 * k, 2.9 * len(firsts) + 0.5), squeeze=False,
                             layout="constrained")
    cmap = plt.get_cmap("gray_r").with_extremes(bad="white")  # NaN: the gaps between images
    for ax, first in zip(axes[:, 0], firsts):
        arr = view.arrays[first["run_id"]]
        images = [np.asarray(image, dtype=np.float64) for image in arr["top_images"]]
        height, width = images[0].shape if images else (28, 28)
        step = width + width // 4
        strip = np.full((height, k * step - width // 4), np.nan)
        for c, image in enumerate(images):
            low, high = image.min(), image.max()
            strip[:, c * step:c * step + width] = (image - low) / (high - low) if high > low else 0.0
            idx = int(arr["top_index"][c])
            pred, true = int(arr["id_pred"][idx]), int(arr["id_label"][idx])
            ax.text(c * step + (width - 1) / 2, -1.5, f"pred {name(pred)} ({arr['id_conf'][idx]:.2f})\n"
                    f"true {name(true)}\nH = {arr[score_key(PRED_ENTROPY)][idx]:.2f} bits", ha="center", va="bottom",
                    fontsize=8, color="black" if pred == true else "crimson")
        ax.imshow(strip, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
        ax.axis("off")
        ax.set_title(f"{view.labels[first['variant']]}, seed {int(first['seed'])}", fontsize=9, fontweight="bold",
                     pad=42)
    fig.suptitle(f"{view.title}\nTop-{k} most uncertain ID test predictions per variant (its first seed); "
                 "red: wrong", fontsize=9)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def reliability(path: Path, view: ProtocolView) -> None:
    """Per variant: accuracy per confidence bin (the ECE's 15 bins) as mean ± sd over seeds, against
    the diagonal, the gap shaded; beneath, the share of test samples per bin."""
    title, runs, variants, colors, arrays = view.title, view.runs, view.variants, view.colors, view.arrays
    edges = np.linspace(0, 1, ECE_BINS + 1)
    centers, width = (edges[:-1] + edges[1:]) / 2, 1 / ECE_BINS
    cols = min(len(variants), 4)
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(3.4 * cols, 4.2 * rows + 0.5), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1] * rows}, layout="constrained")
    for i, variant in enumerate(variants):
        top, bottom = axes[2 * (i // cols)][i % cols], axes[2 * (i // cols) + 1][i % cols]
        per_seed = []
        for rid in runs.loc[runs["variant"] == variant, "run_id"]:
            a = arrays[rid]
            per_seed.append(reliability_bins(a["id_conf"], a["id_pred"] == a["id_label"], ECE_BINS))
        acc = np.array([b["accuracy"] for b in per_seed])
        conf = np.array([b["confidence"] for b in per_seed])
        share = np.array([b["count"] / b["count"].sum() for b in per_seed])
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a bin empty at every seed
            mean_acc, sd_acc = np.nanmean(acc, axis=0), np.nanstd(acc, axis=0, ddof=1) if len(acc) > 1 else 0 * acc[0]
            mean_conf = np.nanmean(conf, axis=0)
        top.bar(centers, mean_acc, width=width * 0.92, color=colors[variant], alpha=0.75, yerr=sd_acc,
                error_kw={"elinewidth": 0.8, "capsize": 1.5}, label="accuracy (mean ± sd)")
        top.bar(centers, mean_conf - mean_acc, bottom=mean_acc, width=width * 0.92, color="none",
                edgecolor="crimson", hatch="//", linewidth=0.6, label="gap to the mean confidence")
        top.plot([0, 1], [0, 1], linestyle=":", color="grey")
        ece = runs.loc[runs["variant"] == variant, "id_ece"]
        top.set_title(f"{view.labels[variant]}\nECE {ece.mean():.3f} ± {ece.std(ddof=1) if len(ece) > 1 else 0:.3f}",
                      fontsize=9)
        top.set_xlim(0, 1), top.set_ylim(0, 1)
        top.set_ylabel("accuracy" if i % cols == 0 else "")
        bottom.bar(centers, share.mean(axis=0), width=width * 0.92, color=colors[variant], alpha=0.75)
        bottom.set_yscale("log"), bottom.set_xlim(0, 1), bottom.set_ylim(1e-4, 1)
        bottom.set_xlabel("confidence (max mean probability)", fontsize=8)
        bottom.set_ylabel("share" if i % cols == 0 else "")
    for j in range(len(variants), rows * cols):
        axes[2 * (j // cols)][j % cols].axis("off"), axes[2 * (j // cols) + 1][j % cols].axis("off")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{title}\nreliability: {ECE_BINS} equal-width bins (the ECE's), seeds' mean ± sd; "
                 "beneath: share of ID test samples per bin", fontsize=10)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def risk_coverage(path: Path, view: ProtocolView) -> None:
    """Selective risk against coverage per variant (confidence: the max mean probability), the mean
    over seeds of each seed's RC curve read at a grid of coverages (bench.evaluation.selective)."""
    title, runs, variants, colors, arrays = view.title, view.runs, view.variants, view.colors, view.arrays
    grid = np.linspace(0.05, 1, 96)
    fig, ax = plt.subplots(figsize=(8.6, 4.8), layout="constrained")
    for variant in variants:
        curves = []
        for rid in runs.loc[runs["variant"] == variant, "run_id"]:
            a = arrays[rid]
            curve = rc_curve(-a[score_key(MAX_PROB)].astype(np.float64), a["id_pred"] != a["id_label"])
            curves.append([risk_at_coverage(curve, c) for c in grid])
        curves = np.array(curves)
        augrc = runs.loc[runs["variant"] == variant, MAX_PROB_AUGRC]
        ax.plot(grid, curves.mean(axis=0), color=colors[variant], linewidth=1.5,
                label=f"{view.labels[variant]}: AUGRC {augrc.mean():.4f}")
        if len(curves) > 1:
            ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), color=colors[variant], alpha=0.12)
    ax.set_yscale("symlog", linthresh=1e-3)  # MNIST-like risks span 0 to a few percent
    ax.set_xlabel("coverage (share of ID test samples accepted)")
    ax.set_ylabel("selective risk (error rate of the accepted)")
    ax.set_title(f"{title}\nrisk-coverage by the max mean probability: mean over seeds, band: min-max", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def smooth_reliability(path: Path, view: ProtocolView) -> None:
    """Per variant, relplot's smooth reliability diagram of the max mean probability (seeds pooled,
    its bootstrap band seeded), beside the binned one; the title gives the smooth ECE per seed as
    mean ± sd."""
    import relplot  # optional: only this figure needs it
    title, runs, variants, colors, arrays = view.title, view.runs, view.variants, view.colors, view.arrays
    cols = min(len(variants), 4)
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.3 * rows + 0.5), squeeze=False, layout="constrained")
    state = np.random.get_state()
    np.random.seed(0)  # relplot's bootstrap band draws from numpy's global generator
    for i, variant in enumerate(variants):
        ax = axes[i // cols][i % cols]
        ids = runs.loc[runs["variant"] == variant, "run_id"]
        f = np.concatenate([arrays[r]["id_conf"] for r in ids]).astype(np.float64)
        y = np.concatenate([arrays[r]["id_pred"] == arrays[r]["id_label"] for r in ids]).astype(np.int64)
        with warnings.catch_warnings():  # relplot's own pandas deprecation warnings
            warnings.simplefilter("ignore")
            diagram = relplot.prepare_rel_diagram(f, y, num_bootstrap=50, report_CE=False)
            relplot.plot_rel_diagram({k: v for k, v in diagram.items() if k not in ("lower", "upper")}, fig=fig,
                                     ax=ax, color=colors[variant], use_default_style=False, plot_labels=False)
        bootstrap_band(ax, diagram)
        smece = runs.loc[runs["variant"] == variant, "smece_one_minus_max_prob"]
        ax.set_title(f"{view.labels[variant]}\nsmECE {smece.mean():.3f} ± "
                     f"{smece.std(ddof=1) if len(smece) > 1 else 0:.3f}", fontsize=8)
        ax.set_xlabel("confidence (max mean probability)", fontsize=8)
        ax.set_ylabel("accuracy" if i % cols == 0 else "", fontsize=8)
    np.random.set_state(state)
    for j in range(len(variants), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{title}\nsmooth reliability diagrams (relplot; kernel-smoothed, no bins), seeds pooled; "
                 "band: bootstrap", fontsize=10)
    fig.savefig(path, dpi=130, bbox_inches="tight")


def bootstrap_band(ax, diagram: dict) -> None:
    """relplot's bootstrap band, grey, each mesh step as opaque as the density there: as relplot draws
    it, but one collection, not a fill_between per step (which made this the slowest figure)."""
    if "lower" not in diagram:  # relplot gives no band without bootstrap samples
        return
    t, lower, upper = diagram["mesh"], diagram["lower"], diagram["upper"]
    quads = np.stack([np.c_[t[:-1], lower[:-1]], np.c_[t[1:], lower[1:]], np.c_[t[1:], upper[1:]],
                      np.c_[t[:-1], upper[:-1]]], axis=1)
    alpha = diagram["density"][:-1] / np.max(diagram["density"]) * 0.6
    ax.add_collection(PolyCollection(quads, facecolors=[(0.5, 0.5, 0.5, a) for a in alpha], linewidths=0))
