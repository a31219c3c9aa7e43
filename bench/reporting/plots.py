"""Comparison plots from the stored records and cached scores (PNG, matplotlib/seaborn)."""
from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402

from bench.evaluation.columns import PRIMARY, ood_column, score_key, scored_sets, with_primary  # noqa: E402
from bench.store import RunStore  # noqa: E402

# every file plot_all writes matches one of these (a new report replaces them all)
PLOT_FILES = ("comparison*.png", "ood_histograms*.png", "roc_curves*.png", "top_uncertain*.png", "reliability*.png",
              "smooth_reliability*.png", "risk_coverage*.png", "forest*.png")
SCORE_LABELS = {"pred_entropy": "predictive entropy (bits)", "mutual_info": "mutual information (bits)",
                "one_minus_max_prob": "1 - max probability", "eq35_distance": "Eq. 35 distance",
                "member_entropy": "one member's entropy (bits)",
                "geo_mean_entropy": "entropy of the geometric mean (bits)"}


def _score_label(score: str) -> str:
    return SCORE_LABELS.get(score, score)


def _primary(runs: pd.DataFrame, variant: str) -> str:
    return str(runs.loc[runs["variant"] == variant, "primary_score"].iloc[0])


def _palette(variants: list[str]) -> dict[str, tuple]:
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def plot_all(store: RunStore, runs: pd.DataFrame, class_names: tuple[str, ...] | None = None,
             protocol: str = "", tag: str = "") -> list[Path]:
    """Every plot for the given (successful) runs of one protocol, named ``protocol`` in each title;
    ``tag`` is appended to the file names (a folder with several protocols). Returns the files written."""
    runs = runs[runs["status"] == "ok"]
    if runs.empty:
        return []
    sns.set_theme(style="whitegrid", context="notebook")
    variants = list(dict.fromkeys(runs["variant"]))
    colors = _palette(variants)
    arrays = {rid: store.load_arrays(rid) for rid in runs["run_id"]}
    sets = scored_sets(runs, added=False)  # the protocol's; the OOD suite has its own figure
    runs = with_primary(runs, sets)  # each run's AUROC by the score its method is reported with
    title = protocol or _protocol_title(runs)
    files = [_comparison(store.out / f"comparison{tag}.png", title, runs, variants, colors, sets)]
    if sets:
        files += [_histograms(store.out / f"ood_histograms{tag}.png", title, runs, variants, colors, arrays, sets[0]),
                  _roc_curves(store.out / f"roc_curves{tag}.png", title, runs, variants, colors, arrays, sets[0])]
    files.append(_reliability(store.out / f"reliability{tag}.png", title, runs, variants, colors, arrays))
    if "augrc_one_minus_max_prob" in runs:
        files.append(_risk_coverage(store.out / f"risk_coverage{tag}.png", title, runs, variants, colors, arrays))
        files.append(_smooth_reliability(store.out / f"smooth_reliability{tag}.png", title, runs, variants, colors,
                                         arrays))
    for variant in variants:
        first = runs[runs["variant"] == variant].sort_values("seed").iloc[0]
        files.append(_top_uncertain(store.out / f"top_uncertain{tag}_{_slug(variant)}.png", title, variant,
                                    int(first["seed"]), arrays[first["run_id"]], class_names))
    plt.close("all")
    return files


def _comparison(path: Path, title: str, runs, variants, colors, sets) -> Path:
    panels = ([("id_acc", "ID test accuracy")]
              + [(ood_column("auroc", PRIMARY, s), f"AUROC vs {s}\n(each method's score)") for s in sets]
              + [(ood_column("auroc", "mutual_info", s), f"AUROC vs {s}\n(mutual information)") for s in sets[:1]]
              + [("id_ece", "ID ECE (15 bins)")])
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 0.7 * len(variants) + 2.2),
                             sharey=True)
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
    # long variants (a selection names its whole grid) wrap instead of squeezing the panels
    axes[0].set_yticks(range(len(variants)), [textwrap.fill(v, 48) for v in variants], fontsize=8)
    np.random.set_state(rng_state)
    n = runs.groupby("variant").size()
    fig.suptitle(f"{title}\ndiamonds: mean ± sd over seeds (n = {', '.join(map(str, sorted(set(n))))}); "
                 "dots: single seeds", y=1.04)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _protocol_title(runs) -> str:
    presets = ", ".join(dict.fromkeys(map(str, runs["preset"])))
    return f"preset {presets}: {runs['id_dataset'].iloc[0]} in distribution"


def _histograms(path: Path, title: str, runs, variants, colors, arrays, ood_set: str) -> Path:
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        ids, score = runs.loc[runs["variant"] == variant, "run_id"], _primary(runs, variant)
        s_id = np.concatenate([arrays[r][score_key(score)] for r in ids])
        s_ood = np.concatenate([arrays[r][score_key(score, ood_set)] for r in ids])
        top = np.quantile(np.r_[s_id, s_ood], 0.995)  # distance scores have long tails
        bins = np.linspace(min(s_id.min(), s_ood.min(), 0), max(top, 1e-6), 40)
        ax.hist(s_id, bins=bins, density=True, alpha=0.6, color=colors[variant], label="ID test")
        ax.hist(s_ood, bins=bins, density=True, histtype="step", linewidth=1.8, color="black", label=f"{ood_set} test")
        ax.set_yscale("log")
        ax.set_title(variant, fontsize=9)
        ax.set_xlabel(_score_label(score))
    axes[0][0].set_ylabel("density (log)")
    axes[0][0].legend()
    fig.suptitle(f"{title}; {ood_set} shown; all seeds pooled (x axis clipped at the 99.5th percentile)")
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _roc_curves(path: Path, title: str, runs, variants, colors, arrays, ood_set: str) -> Path:
    fig, ax = plt.subplots(figsize=(5.2, 5))
    for variant in variants:
        sub, score = runs[runs["variant"] == variant], _primary(runs, variant)
        for i, rid in enumerate(sub["run_id"]):
            s_id, s_ood = arrays[rid][score_key(score)], arrays[rid][score_key(score, ood_set)]
            fpr, tpr, _ = roc_curve(np.r_[np.zeros(len(s_id)), np.ones(len(s_ood))], np.r_[s_id, s_ood])
            auroc = sub[ood_column("auroc", score, ood_set)]
            label = (f"{variant}\n{_score_label(score)}: AUROC {auroc.mean():.3f} ± "
                     f"{auroc.std(ddof=1) if len(auroc) > 1 else 0:.3f}")
            ax.plot(fpr, tpr, color=colors[variant], alpha=0.8, linewidth=1.3, label=label if i == 0 else None)
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
    ax.set_xlabel("false positive rate (ID flagged)")
    ax.set_ylabel(f"true positive rate ({ood_set} caught)")
    ax.set_title(f"{title}\nROC vs {ood_set} by each method's score, one line per seed", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _top_uncertain(path: Path, title: str, variant: str, seed: int, arr: dict, class_names) -> Path:
    k = len(arr["top_index"])
    fig, axes = plt.subplots(1, k, figsize=(2.1 * k, 2.6))
    for ax, i in zip(np.atleast_1d(axes), range(k)):
        idx = int(arr["top_index"][i])
        ax.imshow(arr["top_images"][i], cmap="gray_r")
        pred, true = int(arr["id_pred"][idx]), int(arr["id_label"][idx])
        name = (lambda c: class_names[c].split(" - ")[0]) if class_names else str
        ax.set_title(f"pred {name(pred)} ({arr['id_conf'][idx]:.2f})\ntrue {name(true)}\n"
                     f"H = {arr[score_key('pred_entropy')][idx]:.2f} bits", fontsize=8,
                     color="black" if pred == true else "crimson")
        ax.axis("off")
    fig.suptitle(f"{title}\nTop-{k} most uncertain test predictions: {variant}, seed {seed}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _reliability(path: Path, title: str, runs, variants, colors, arrays) -> Path:
    """Per variant: accuracy per confidence bin (the ECE's 15 bins) as mean ± sd over seeds, against
    the diagonal, the gap shaded; beneath, the share of test samples per bin."""
    from bench.evaluation.calibration import ECE_BINS
    from bench.evaluation.calibration import reliability_bins
    edges = np.linspace(0, 1, ECE_BINS + 1)
    centers, width = (edges[:-1] + edges[1:]) / 2, 1 / ECE_BINS
    cols = min(len(variants), 4)
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(2 * rows, cols, figsize=(3.4 * cols, 4.4 * rows), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1] * rows})
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
        top.set_title(f"{textwrap.fill(variant, 40)}\nECE {ece.mean():.3f} ± {ece.std(ddof=1) if len(ece) > 1 else 0:.3f}",
                      fontsize=8)
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
                 "beneath: share of ID test samples per bin", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _risk_coverage(path: Path, title: str, runs, variants, colors, arrays) -> Path:
    """Selective risk against coverage per variant (confidence: the max mean probability), the mean
    over seeds of each seed's RC curve read at a grid of coverages (bench.evaluation.selective)."""
    from bench.evaluation.selective import rc_curve, risk_at_coverage
    grid = np.linspace(0.05, 1, 96)
    fig, ax = plt.subplots(figsize=(6, 4.6))
    for variant in variants:
        curves = []
        for rid in runs.loc[runs["variant"] == variant, "run_id"]:
            a = arrays[rid]
            curve = rc_curve(-a[score_key("one_minus_max_prob")].astype(np.float64), a["id_pred"] != a["id_label"])
            curves.append([risk_at_coverage(curve, c) for c in grid])
        curves = np.array(curves)
        augrc = runs.loc[runs["variant"] == variant, "augrc_one_minus_max_prob"]
        ax.plot(grid, curves.mean(axis=0), color=colors[variant], linewidth=1.5,
                label=f"{textwrap.shorten(variant, 60)}: AUGRC {augrc.mean():.4f}")
        if len(curves) > 1:
            ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), color=colors[variant], alpha=0.12)
    ax.set_yscale("symlog", linthresh=1e-3)  # MNIST-like risks span 0 to a few percent
    ax.set_xlabel("coverage (share of ID test samples accepted)")
    ax.set_ylabel("selective risk (error rate of the accepted)")
    ax.set_title(f"{title}\nrisk-coverage by the max mean probability: mean over seeds, band: min-max", fontsize=9)
    ax.legend(fontsize=6.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def forest_plot(path: Path, title: str, differences: pd.DataFrame) -> Path | None:
    """The paired differences of a protocol (bench.reporting.paired, one panel per metric): one line per row,
    its mean and 95 % t-interval over seeds against the zero of its reference."""
    from bench.reporting.paired import PAIRED, auroc_set
    if differences.empty:
        return None
    metrics = list(dict.fromkeys(differences["metric"]))
    titles = {c: (t, scale) for c, t, scale, _ in PAIRED}
    lower_is_better = ("id_nll_nats", "id_ece", "augrc_one_minus_max_prob")
    rows = list(dict.fromkeys(differences["variant"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.3 * len(metrics), 0.45 * len(rows) + 1.8), sharey=True,
                             squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        ood_set = auroc_set(metric)
        name = "auroc" if ood_set is not None else metric
        panel, scale = titles.get(name, (metric, 1))
        sub = differences[differences["metric"] == metric].set_index("variant").reindex(rows)
        y = np.arange(len(rows))
        real = sub["real"].astype("boolean").fillna(False).to_numpy(bool)
        low, high = sub["low"].to_numpy(float) * scale, sub["high"].to_numpy(float) * scale
        ax.hlines(y, low, high, color=np.where(real, "crimson", "grey"), linewidth=1.6)
        ax.plot(sub["mean"].to_numpy(float) * scale, y, "D", color="black", markersize=4)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        better = "lower" if name in lower_is_better else "higher"
        ax.set_title(panel.replace("{set}", ood_set or "")
                     + (" (points)" if scale == 100 else "") + f"\n{better} is better", fontsize=9)
    axes[0][0].set_yticks(range(len(rows)), [textwrap.fill(f"{v}\n− {r}", 52) for v, r in
                                             zip(rows, differences.groupby("variant", sort=False)["reference"].first())],
                          fontsize=6.5)
    axes[0][0].invert_yaxis()
    fig.suptitle(f"{title}\npaired difference to the deep ensemble, mean and 95 % t-interval over seeds "
                 "(red: excludes 0)", fontsize=9, y=1.02)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


def _smooth_reliability(path: Path, title: str, runs, variants, colors, arrays) -> Path:
    """Per variant, relplot's smooth reliability diagram of the max mean probability (seeds pooled,
    its bootstrap band seeded), beside the binned one; the title gives the smooth ECE per seed as
    mean ± sd."""
    import relplot
    cols = min(len(variants), 4)
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.4 * rows), squeeze=False)
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
            relplot.plot_rel_diagram(diagram, fig=fig, ax=ax, color=colors[variant], use_default_style=False,
                                     plot_labels=False)
        smece = runs.loc[runs["variant"] == variant, "smece_one_minus_max_prob"]
        ax.set_title(f"{textwrap.fill(variant, 40)}\nsmECE {smece.mean():.3f} ± "
                     f"{smece.std(ddof=1) if len(smece) > 1 else 0:.3f}", fontsize=8)
        ax.set_xlabel("confidence (max mean probability)", fontsize=8)
        ax.set_ylabel("accuracy" if i % cols == 0 else "", fontsize=8)
    np.random.set_state(state)
    for j in range(len(variants), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle(f"{title}\nsmooth reliability diagrams (relplot; kernel-smoothed, no bins), seeds pooled; "
                 "band: bootstrap", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


# -- the shift suite (bench evaluate) -------------------------------------------------------------

SHIFT_PANELS = [("acc", "accuracy"), ("nll_nats", "NLL (nats)"), ("ece", "ECE (15 bins)"), ("augrc", "AUGRC"),
                ("pred_entropy_bits", "predictive entropy (bits)"), ("mutual_info_bits", "mutual information (bits)")]
SHIFT_PLOT_FILES = ("shift_curves*.png", "shift_table*.png")


def shift_curves(path: Path, title: str, shift: pd.DataFrame, clean: pd.DataFrame) -> Path:
    """Each metric against shift intensity, one line per variant, mean ± sd over seeds (band): rows
    rotation, translation and the mean over the MNIST-C corruptions that have severities. Level 0
    is the clean test split (the runs' own ID metrics)."""
    from bench.data.shifts import SHIFTS
    rows = [("rotation", "rotation (degrees)"), ("translation", "cyclic translation (pixels)"),
            ("mnist_c", "MNIST-C severity\n(mean over the graded corruptions)")]
    rows = [(family, label) for family, label in rows if (shift["family"] == family).any()]
    variants = list(dict.fromkeys(shift["variant"]))
    colors = _palette(variants)
    graded = [n for n, s in SHIFTS.items() if s.family != "mnist_c" or s.unit]
    per_run = (shift[shift["shift"].isin(graded)].groupby(["family", "variant", "run_id", "seed", "level"], sort=False)
               [[m for m, _ in SHIFT_PANELS]].mean().reset_index())  # MNIST-C: the mean over corruptions
    from bench.reporting.shift_tables import CLEAN
    clean_rows = clean[clean["run_id"].isin(shift["run_id"])].rename(columns={v: k for k, v in CLEAN.items()})
    fig, axes = plt.subplots(len(rows), len(SHIFT_PANELS), figsize=(3.1 * len(SHIFT_PANELS), 2.7 * len(rows)),
                             squeeze=False)
    for r, (family, label) in enumerate(rows):
        data = pd.concat([clean_rows.assign(family=family, level=0.0), per_run[per_run["family"] == family]])
        for c, (metric, panel) in enumerate(SHIFT_PANELS):
            ax = axes[r][c]
            if metric not in data:
                ax.axis("off")
                continue
            stats = data.groupby(["variant", "level"], sort=False)[metric].agg(["mean", "std"]).reset_index()
            for variant in variants:
                s = stats[stats["variant"] == variant].sort_values("level")
                ax.plot(s["level"], s["mean"], "-o", markersize=2.5, linewidth=1.2, color=colors[variant],
                        label=variant)
                ax.fill_between(s["level"], s["mean"] - s["std"].fillna(0), s["mean"] + s["std"].fillna(0),
                                color=colors[variant], alpha=0.15, linewidth=0)
            ax.set_title(panel, fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, [textwrap.fill(v, 60) for v in labels], loc="lower center", ncol=min(3, len(variants)),
               fontsize=7, bbox_to_anchor=(0.5, -0.02 - 0.025 * -(-len(variants) // 3)))
    fig.suptitle(f"{title}\nunder shift: mean ± sd over seeds (band); 0 = the clean test split", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def shift_heatmaps(path: Path, title: str, table: pd.DataFrame) -> Path:
    """The per-corruption table as heatmaps: rows variants, columns shifts at the table level (MNIST-C's
    severity), one panel per metric (mean over seeds)."""
    metrics = [("acc", "accuracy", "viridis"), ("ece", "ECE", "magma_r"), ("pred_entropy_bits", "predictive entropy (bits)", "cividis")]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(3.5 + 0.62 * table["shift"].nunique(),
                                                       (0.32 * table["variant"].nunique() + 1.2) * len(metrics)),
                             layout="constrained")
    for ax, (metric, name, cmap) in zip(np.atleast_1d(axes), metrics):
        grid = table.pivot_table(index="variant", columns="shift", values=metric, aggfunc="mean", sort=False)
        sns.heatmap(grid, annot=True, fmt=".2f", annot_kws={"fontsize": 6}, cmap=cmap, cbar=False, ax=ax)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.set_yticks(np.arange(len(grid)) + 0.5, [textwrap.fill(v, 45) for v in grid.index], fontsize=6.5, rotation=0)
        ax.tick_params(axis="x", labelsize=7, rotation=60)
    fig.suptitle(f"{title}\nper shift at the table level (MNIST-C's severity; rotation 90°, translation 14 px), "
                 "mean over seeds", fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def shift_gallery(path: Path, store: RunStore, names: list[str], data_dir: Path, seed: int = 0) -> Path:
    """One ID test image of each ID dataset in the folder under every shift and level (a row per
    shift), and the generated OOD sets' first image."""
    from bench.data import ood_sets, shifts
    from bench.data.loaders import load_images
    from bench.store import id_datasets
    records, _ = store.scan()
    datasets = id_datasets(records)
    names = names or list(shifts.SHIFTS)
    width = max(len(shifts.SHIFTS[n].levels) for n in names)
    rows = [(d, n) for d in datasets for n in names] + [(d, "OOD") for d in datasets]
    width = max(width, len(ood_sets.GENERATED))
    fig, axes = plt.subplots(len(rows), width + 1, figsize=(0.75 * (width + 1), 0.82 * len(rows)), squeeze=False)
    for r, (dataset, name) in enumerate(rows):
        test = load_images(Path(data_dir), dataset, False, False)[0].numpy()
        images = test[:1].astype(np.float64)
        axes[r][0].text(1.0, 0.5, f"{name}\n({dataset})" if len(datasets) > 1 else name, ha="right", va="center",
                        fontsize=6.5, transform=axes[r][0].transAxes)
        if name == "OOD":
            cells = [(f"{n}", ood_sets.generate(n, test)[0]) for n in ood_sets.GENERATED]  # as scored
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
                 "corruptions drawn for this image alone, so the kind, not the exact pixels scored) and the first "
                 "image of each generated OOD set (as scored)", fontsize=7)
    fig.tight_layout(pad=0.3, rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def star_forest(path: Path, title: str, summary: pd.DataFrame) -> Path | None:
    """A star design (bench.design.star.setting_summary) as a forest plot, one line per setting grouped
    by choice, the base on top and shaded: per compared method, against each setting's first OOD
    set (a setting that changes the ID dataset changes it), both methods' AUROC (mean over seeds), the paired AUROC difference and the accuracy difference with their 95 %
    t-intervals (red: the interval excludes 0); the base's difference as a dotted line."""
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
        base = part[part["is_base"].astype("boolean").fillna(False).to_numpy(bool)]
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
        for ax, (mean, low, high, scale, panel) in (
                (diff, ("difference", "low", "high", 1, f"Δ AUROC vs {ood_set}\n{method} − {reference}")),
                (acc, ("acc_difference", "acc_low", "acc_high", 100, f"Δ accuracy (points)\n{method} − {reference}"))):
            lo, hi = part[low].to_numpy(float) * scale, part[high].to_numpy(float) * scale
            real = (lo > 0) | (hi < 0)
            ax.hlines(y, lo, hi, color=np.where(real, "crimson", "grey"), linewidth=1.6)
            ax.plot(part[mean].to_numpy(float) * scale, y, "D", color="black", markersize=3.5)
            ax.axvline(0, color="black", linewidth=0.8)
            if len(base):
                ax.axvline(float(base[mean].iloc[0]) * scale, color="black", linestyle=":", linewidth=0.9)
            ax.set_title(panel, fontsize=9)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4))
        kept = part["checkpoint_kept"].fillna("")
        if kept.str.len().gt(0).any():  # the mechanism: how many members' checkpoints the rule kept
            for i, text in enumerate(kept):
                if text:
                    diff.annotate(text, (1.0, i), xycoords=("axes fraction", "data"), xytext=(3, 0),
                                  textcoords="offset points", fontsize=6, va="center", color="dimgrey")
        for ax in (level, diff, acc):
            for i, is_base in enumerate(part["is_base"].astype("boolean").fillna(False)):
                if is_base:
                    ax.axhspan(i - 0.5, i + 0.5, color="gold", alpha=0.25, linewidth=0)
            # a thin line between choices
            choices = part["choice"].tolist()
            for i in range(1, len(choices)):
                if choices[i] != choices[i - 1]:
                    ax.axhline(i - 0.5, color="lightgrey", linewidth=0.7)
    first = summary.drop_duplicates("setting").set_index("setting").reindex(rows)
    base_set = first.loc[first["is_base"].astype(bool), "ood_set"]
    base_set = base_set.iloc[0] if len(base_set) else None
    labels = [(f"{c}: {s}" if c != s.split("=")[0] else s) + (f" (vs {o})" if o != base_set else "")
              for s, c, o in zip(rows, first["choice"], first["ood_set"])]
    axes[0][0].set_yticks(y, [textwrap.shorten(label, 60) for label in labels], fontsize=7)
    axes[0][0].set_ylim(len(rows) - 0.5, -1.5)  # inverted: the base on top, an empty row above it for the legend
    fig.suptitle(f"{title}\none choice changed at a time from the base (shaded); 95 % paired t-interval over "
                 "seeds (red: excludes 0); dotted: the base's difference; grey numbers: members whose "
                 "checkpoint rule kept an epoch", fontsize=9, y=1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path
