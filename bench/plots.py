"""Comparison plots from the stored records and cached scores (PNG, matplotlib/seaborn)."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402

from bench.store import RunStore  # noqa: E402

SCORE = "pred_entropy"  # the score shown in histograms and ROC curves
SCORE_LABEL = "predictive entropy (bits)"


def _palette(variants: list[str]) -> dict[str, tuple]:
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def plot_all(store: RunStore, runs: pd.DataFrame, class_names: tuple[str, ...] | None = None) -> list[Path]:
    """Every plot for the given (successful) runs; returns the files written."""
    runs = runs[runs["status"] == "ok"]
    if runs.empty:
        return []
    sns.set_theme(style="whitegrid", context="notebook")
    variants = list(dict.fromkeys(runs["variant"]))
    colors = _palette(variants)
    arrays = {rid: store.load_arrays(rid) for rid in runs["run_id"]}
    files = [_comparison(store.out, runs, variants, colors),
             _histograms(store.out, runs, variants, colors, arrays),
             _roc_curves(store.out, runs, variants, colors, arrays)]
    for variant in variants:
        first = runs[runs["variant"] == variant].sort_values("seed").iloc[0]
        files.append(_top_uncertain(store.out, variant, int(first["seed"]), arrays[first["run_id"]], class_names))
    plt.close("all")
    return files


def _comparison(out: Path, runs, variants, colors) -> Path:
    panels = [("id_acc", "ID test accuracy"), ("auroc_pred_entropy", "OOD AUROC (pred. entropy)"),
              ("auroc_mutual_info", "OOD AUROC (mutual info)"), ("id_ece", "ID ECE (15 bins)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.55 * len(variants) + 2.2),
                             sharey=True)
    # seaborn jitters strip plots with numpy's global RNG: fix it so the same records give the same PNG
    rng_state = np.random.get_state()
    np.random.seed(0)
    for ax, (col, title) in zip(axes, panels):
        sns.stripplot(data=runs, y="variant", x=col, hue="variant", order=variants, palette=colors,
                      size=5, alpha=0.55, jitter=0.12, ax=ax, legend=False)
        sns.pointplot(data=runs, y="variant", x=col, hue="variant", order=variants, palette=colors,
                      errorbar="sd", capsize=0.25, markers="D", linestyle="none", ax=ax, legend=False)
        lo, hi = runs[col].min(), runs[col].max()
        pad = max((hi - lo) * 0.6, 0.01)
        ax.set_xlim(max(lo - pad, 0), hi + pad)
        ax.set_title(title)
        ax.set_xlabel("")
        ax.set_ylabel("")
    np.random.set_state(rng_state)
    n = runs.groupby("variant").size()
    fig.suptitle(f"diamonds: mean ± sd over seeds (n = {', '.join(map(str, sorted(set(n))))}); dots: single seeds", y=1.02)
    fig.tight_layout()
    path = out / "comparison.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _histograms(out: Path, runs, variants, colors, arrays) -> Path:
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        ids = runs.loc[runs["variant"] == variant, "run_id"]
        s_id = np.concatenate([arrays[r][f"id_{SCORE}"] for r in ids])
        s_ood = np.concatenate([arrays[r][f"ood_{SCORE}"] for r in ids])
        bins = np.linspace(0, max(s_id.max(), s_ood.max(), 1e-6), 40)
        ax.hist(s_id, bins=bins, density=True, alpha=0.6, color=colors[variant], label="ID test")
        ax.hist(s_ood, bins=bins, density=True, histtype="step", linewidth=1.8, color="black", label="OOD test")
        ax.set_yscale("log")
        ax.set_title(variant, fontsize=10)
        ax.set_xlabel(SCORE_LABEL)
    axes[0][0].set_ylabel("density (log)")
    axes[0][0].legend()
    fig.suptitle(f"{runs['id_dataset'].iloc[0]} (ID) vs {runs['ood_dataset'].iloc[0]} (OOD); all seeds pooled")
    fig.tight_layout()
    path = out / "ood_histograms.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _roc_curves(out: Path, runs, variants, colors, arrays) -> Path:
    fig, ax = plt.subplots(figsize=(5.2, 5))
    for variant in variants:
        sub = runs[runs["variant"] == variant]
        for i, rid in enumerate(sub["run_id"]):
            s_id, s_ood = arrays[rid][f"id_{SCORE}"], arrays[rid][f"ood_{SCORE}"]
            fpr, tpr, _ = roc_curve(np.r_[np.zeros(len(s_id)), np.ones(len(s_ood))], np.r_[s_id, s_ood])
            auroc = sub["auroc_pred_entropy"]
            label = f"{variant}\nAUROC {auroc.mean():.3f} ± {auroc.std(ddof=1) if len(auroc) > 1 else 0:.3f}"
            ax.plot(fpr, tpr, color=colors[variant], alpha=0.8, linewidth=1.3, label=label if i == 0 else None)
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    ax.set_xlabel("false positive rate (ID flagged)")
    ax.set_ylabel("true positive rate (OOD caught)")
    ax.set_title(f"ROC by {SCORE_LABEL}, one line per seed")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out / "roc_curves.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _top_uncertain(out: Path, variant: str, seed: int, arr: dict, class_names) -> Path:
    k = len(arr["top_index"])
    fig, axes = plt.subplots(1, k, figsize=(2.1 * k, 2.6))
    for ax, i in zip(np.atleast_1d(axes), range(k)):
        idx = int(arr["top_index"][i])
        ax.imshow(arr["top_images"][i], cmap="gray_r")
        pred, true = int(arr["id_pred"][idx]), int(arr["id_label"][idx])
        name = (lambda c: class_names[c].split(" - ")[0]) if class_names else str
        ax.set_title(f"pred {name(pred)} ({arr['id_conf'][idx]:.2f})\ntrue {name(true)}\n"
                     f"H = {arr['id_' + SCORE][idx]:.2f} bits", fontsize=8,
                     color="black" if pred == true else "crimson")
        ax.axis("off")
    fig.suptitle(f"Top-{k} most uncertain test predictions: {variant}, seed {seed}", fontsize=9)
    fig.tight_layout()
    path = out / f"top_uncertain_{_slug(variant)}.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path
