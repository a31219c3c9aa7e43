"""Ablations: how each metric moves with the method options that vary in a grid.

The axes are found, not declared: any option with more than one value among a method's runs (in
one protocol) is an axis, so a new method's options are ablated with no new code here. For each
axis, each metric is drawn against it with a band of ± sd over seeds: a line per combination of the
other varying options for the methods that vary it; a method that does not vary it (the deep
ensemble on DARE's threshold axis) is drawn as a dashed level, coloured like the lines it matches
on the options they share (e.g. the member count). The training history adds DARE's mechanism:
mean |theta| and the train loss over epochs.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from bench.evaluation.catalog import ABLATION, shown_in  # noqa: E402
from bench.evaluation.columns import PRIMARY, scored_sets, with_primary  # noqa: E402
from bench.reporting.report import PROTOCOL_COLUMNS, protocol_groups  # noqa: E402
from bench.reporting.figures import record_figures  # noqa: E402
from bench.store import write_csv  # noqa: E402
from bench.tables import without_candidates  # noqa: E402

NOT_OPTIONS = {"run_id", "method", "label", "variant", "preset", "ood_split", "primary_score", "seed",
               *PROTOCOL_COLUMNS}


def option_columns(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """The config columns that are method options."""
    return [k for k in keys if k in runs.columns and k not in NOT_OPTIONS]


def varying(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    """The columns with more than one value among some method's rows: the one rule for an axis."""
    # dropna=False: none is a value of its own (e.g. threshold=none,0.3 with delta set)
    return [c for c in columns if frame.groupby("method")[c].nunique(dropna=False).max() > 1]


def axes_of(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """The axes among finished runs."""
    return varying(runs, option_columns(runs, keys))


def config_axes(configs: list) -> list[str]:
    """The axes of a planned grid, before anything trains (a selection's walked option is not one)."""
    rows = [{"method": c.method, **{name: repr(value) for name, value in c.fixed_options.items()}}
            for c in configs]
    frame = pd.DataFrame(rows)
    return varying(frame, [c for c in frame.columns if c != "method"]) if rows else []


def _metrics(ood_set: str | None) -> list[tuple[str, str]]:
    """The ablation's metrics (catalog.ABLATION) as (column, title): a per-OOD-set one against the
    first OOD set, by each run's own score (none without a set)."""
    return [(metric.column(PRIMARY, s), metric.title(ABLATION, s)) for metric in shown_in(ABLATION)
            for s in metric.sets([ood_set] if ood_set else [])]


def _with_primary_auroc(runs: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    sets = scored_sets(runs.iloc[:1])[:1] if len(runs) else []
    return with_primary(runs, sets), (sets[0] if sets else None)


def _protocols(runs: pd.DataFrame, keys: list[str]):
    """Per protocol of the finished runs (selection candidates left out): (group, its runs with
    auroc_primary, the primary OOD set, the axes)."""
    for group in protocol_groups(without_candidates(runs[runs["status"] == "ok"])):
        frame, ood_set = _with_primary_auroc(group.runs)
        yield group, frame, ood_set, axes_of(frame, keys)


def ablation_table(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Long table: one row per (protocol, method, value of every varying option, metric) with the
    mean, sd and n over seeds."""
    return _table(_protocols(runs, keys))


def _table(protocols) -> pd.DataFrame:
    rows = []
    for group, frame, ood_set, axes in protocols:
        metrics = [m for m, _ in _metrics(ood_set) if m in frame]
        by = ["method", "label", *axes]
        stats = frame.groupby(by, dropna=False, sort=False)[metrics].agg(["mean", "std", "count"])
        for index, row in stats.iterrows():
            base = dict(zip(by, index if isinstance(index, tuple) else (index,)))
            for metric in metrics:
                rows.append({"protocol": group.label, **base,
                             "metric": metric,
                             "mean": row[(metric, "mean")], "std": row[(metric, "std")],
                             "n": int(row[(metric, "count")])})
    return pd.DataFrame(rows)


def _is_numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values.dropna())


def _category(value) -> str:
    return "none" if pd.isna(value) else f"{value:g}" if isinstance(value, float) else str(value)


def _line_names(frame: pd.DataFrame, names: list[str]) -> list[str]:
    """Each run's line: its label (its method's name where the label moves with an option, as DE's
    with loss) and the values of ``names``."""
    moving = {m for m, g in frame.groupby("method") if g["label"].nunique() > 1}
    return [(r["method"] if r["method"] in moving else r["label"]) + (f", {_key(r, names)}" if _key(r, names) else "")
            for _, r in frame.iterrows()]


def _key(row: pd.Series, names: list[str]) -> str:
    return ", ".join(f"{n}={row[n]:g}" if isinstance(row[n], float) else f"{n}={row[n]}"
                     for n in names if pd.notna(row[n]))


def plot_axis(path: Path, title: str, frame: pd.DataFrame, axis: str, axes: list[str], ood_set: str | None) -> Path:
    """Each metric against ``axis``: mean ± sd over seeds."""
    varying = [m for m, g in frame.groupby("method", sort=False) if g[axis].nunique(dropna=True) > 1]
    others = [a for a in axes if a != axis]
    # options every method has a value of (e.g. members): they pick the colour, so that a method
    # drawn as a level matches the lines with the same value
    shared = [a for a in others if frame.groupby("method")[a].apply(lambda s: s.notna().all()).all()]
    on_axis = frame.loc[frame["method"].isin(varying), axis]
    numeric = _is_numeric(on_axis) and not on_axis.isna().any()  # with none among them: categories
    if numeric:
        values = np.sort(on_axis.unique().astype(float))
        position = {v: v for v in values}
    else:
        values = list(dict.fromkeys(map(_category, on_axis)))
        position = {v: i for i, v in enumerate(values)}
    frame = frame.assign(_line=_line_names(frame, others),
                         _colour=[_key(r, shared) if shared else None for _, r in frame.iterrows()])
    if not shared:
        frame["_colour"] = frame["_line"]
    colours = list(dict.fromkeys(frame.sort_values(shared or ["_line"])["_colour"]))
    palette = dict(zip(colours, sns.color_palette("viridis" if shared else "colorblind", len(colours))))
    methods_dashes = {m: "-" for m in varying}
    metrics = [(m, t) for m, t in _metrics(ood_set) if m in frame and frame[m].notna().any()]
    fig, axs = plt.subplots(1, len(metrics), figsize=(3.9 * len(metrics), 3.6), squeeze=False)
    span = (min(position.values()), max(position.values())) if position else (0, 1)
    for ax, (metric, metric_title) in zip(axs[0], metrics):
        for (line, colour), g in frame.groupby(["_line", "_colour"], sort=False, dropna=False):
            colour_value = palette.get(colour, "grey")
            if g["method"].iloc[0] in methods_dashes:
                g = g.assign(_x=[position.get(v if numeric else _category(v)) for v in g[axis]]).dropna(subset=["_x"])
                stats = g.groupby("_x")[metric].agg(["mean", "std"]).sort_index()
                sd = stats["std"].fillna(0.0)
                ax.plot(stats.index, stats["mean"], "-o", color=colour_value, markersize=4, linewidth=1.6, label=line)
                ax.fill_between(stats.index, stats["mean"] - sd, stats["mean"] + sd, color=colour_value, alpha=0.15)
            else:  # this method does not vary the axis: its level, over the whole range
                mean, sd = g[metric].mean(), g[metric].std()
                sd = 0.0 if pd.isna(sd) else sd
                ax.hlines(mean, *span, colors=[colour_value], linestyles="--", linewidth=1.3, label=f"{line} (level)")
                ax.fill_between(span, mean - sd, mean + sd, color=colour_value, alpha=0.07)
        if numeric and len(values) > 1 and values.min() > 0 and values.max() / values.min() >= 20:
            ax.set_xscale("log")
        ax.ticklabel_format(axis="y", useOffset=False)
        if numeric:  # ticks at the grid's values: the reader sees which values ran
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.minorticks_off()
        else:
            ax.set_xticks(range(len(values)), values)
        ax.set_xlabel(axis)
        ax.set_title(metric_title, fontsize=10)
    handles, labels = axs[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    n = frame.groupby(["method", *[a for a in axes if a in frame]], dropna=False).size()
    fig.suptitle(f"{title}\nmetrics against {axis}: mean ± sd over seeds (n = {', '.join(map(str, sorted(set(n))))})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_epochs(path: Path, title: str, frame: pd.DataFrame, histories: dict[str, list[dict]], axes: list[str]) -> Path | None:
    """Mean |theta| and the train loss over epochs (mean over members, then over seeds): a line per
    combination of the varying options, a panel per member count when it varies."""
    rows = [{**h, "run_id": rid} for rid, hist in histories.items() for h in hist if "param_abs_mean" in h]
    if not rows:
        return None
    per_epoch = pd.DataFrame(rows).groupby(["run_id", "epoch"])[["param_abs_mean", "train_loss"]].mean().reset_index()
    facet = "members" if "members" in axes else None
    others = [a for a in axes if a != facet]
    frame = frame.assign(_line=_line_names(frame, others))
    data = per_epoch.merge(frame[["run_id", "_line", "method", *([facet] if facet else [])]], on="run_id")
    panels = sorted(data[facet].dropna().unique()) if facet else [None]
    ordered = frame.sort_values(others or ["_line"])
    # lines of a method that has none of the varying options (the deep ensemble beside DARE's
    # thresholds) are the reference: dashed grey; the others run through a sequential palette
    reference = {line for line, g in ordered.groupby("_line") if not others or g[others].isna().all(axis=None)}
    lines = [line for line in dict.fromkeys(ordered["_line"]) if line not in reference] + sorted(reference)
    varied = [line for line in lines if line not in reference]
    palette = dict(zip(varied, sns.color_palette("viridis", len(varied))))
    fig, axs = plt.subplots(2, len(panels), figsize=(3.8 * len(panels), 6.2), squeeze=False, sharex=True)
    for j, value in enumerate(panels):
        sub = data if facet is None else data[data[facet] == value]
        for line in lines:
            g = sub[sub["_line"] == line]
            if g.empty:
                continue
            stats = g.groupby("epoch")[["param_abs_mean", "train_loss"]].agg(["mean", "std"])
            colour, style = (palette[line], "-") if line in palette else ("dimgrey", "--")
            for i, col in enumerate(("param_abs_mean", "train_loss")):
                mean, sd = stats[(col, "mean")], stats[(col, "std")].fillna(0.0)
                axs[i][j].plot(mean.index, mean, style, color=colour, linewidth=1.5, label=line)
                axs[i][j].fill_between(mean.index, mean - sd, mean + sd, color=colour, alpha=0.15)
        axs[0][j].set_title(f"{facet} = {value:g}" if facet else "", fontsize=10)
        axs[1][j].set_xlabel("epoch")
        axs[1][j].set_yscale("log")
    axs[0][0].set_ylabel("mean |θ| over members")
    axs[1][0].set_ylabel("train task loss (log)")
    handles, labels = axs[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.suptitle(f"{title}\nover training epochs: mean ± sd over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def write_ablation(out: Path, runs: pd.DataFrame, keys: list[str], histories: dict[str, list[dict]],
                   plots: bool = True) -> list[Path]:
    """OUT/ablation.csv, and per protocol one plot per varying option plus the epochs plot
    (replacing the previous ablation's plots)."""
    out = Path(out)
    protocols = list(_protocols(runs, keys))
    write_csv(_table(protocols), out / "ablation.csv")
    files = [out / "ablation.csv"]
    if not plots:
        return files
    sns.set_theme(style="whitegrid", context="notebook")
    figures = []
    for group, frame, ood_set, axes in protocols:
        for axis in axes:
            figures.append(plot_axis(out / f"ablation{group.tag}_{axis}.png", group.label, frame, axis, axes, ood_set))
        epochs = plot_epochs(out / f"ablation{group.tag}_epochs.png", group.label, frame,
                             {rid: histories.get(rid, []) for rid in frame["run_id"]}, axes)
        figures += [epochs] if epochs else []
    plt.close("all")
    record_figures(out, "ablation", figures)  # removes the plot of an axis the last grid had
    return files + figures
