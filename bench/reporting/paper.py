"""The harness's numbers beside a paper's published table (``python -m bench paper-table``).

Rows are the summary's configs whose in-distribution set matches; each is matched to published
rows by its method label ("DE (NLL)", "DE (MSE)", "DARE", ...). Columns are ID accuracy and the
AUROC against each OOD set, by the score each row is reported with (the method's
``primary_score``: the paper's Eq. 35 distance for DE (MSE) and DARE, predictive entropy
otherwise), all in percent as mean ± std (n), beside the published mean ± std and the difference
in units of the published std.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pandas as pd

from bench.config import Protocol, named_file
from bench.errors import ConfigError
from bench.evaluation.columns import ood_column
from bench.store import write_csv
from bench.reporting.paired import pair
from bench.reporting.formatting import format_difference

PUBLISHED_DIR = Path(__file__).parent.parent / "published"
PUBLISHED_COLUMNS = {"in_distribution", "ood_set", "method", "metric", "mean", "std", "n_seeds", "source"}
ACCURACY = "ID accuracy"


def available_tables() -> list[str]:
    return sorted(p.stem for p in PUBLISHED_DIR.glob("*.csv"))


def load_published(name_or_path: str) -> pd.DataFrame:
    """A published table by name (bench/published/NAME.csv) or path."""
    path = named_file(name_or_path, PUBLISHED_DIR, ".csv", "published table")
    table = pd.read_csv(path, keep_default_na=False, na_values={"mean": [""], "std": [""]})
    missing = PUBLISHED_COLUMNS - set(table.columns)
    if missing:
        raise ConfigError(f"published table {path}: missing columns {', '.join(sorted(missing))}")
    return table


def _quantities(summary: pd.DataFrame, published: pd.DataFrame) -> list[tuple[str, str | None]]:
    """(column title, OOD set or None for accuracy): the harness's OOD sets, then any other published one."""
    sets = [s for value in summary.get("ood_sets", pd.Series(dtype=str)).dropna() for s in str(value).split()]
    sets += [s for s in published["ood_set"] if s]
    return [(ACCURACY, None)] + [(f"AUROC vs {s}", s) for s in dict.fromkeys(sets)]


REFERENCE_LABELS = ("DE (NLL)", "DE (MSE)")  # the rows the paper compares against: paired differences to each


def build_paper_table(summary: pd.DataFrame, published: pd.DataFrame, in_distribution: str,
                      runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tidy comparison: one row per (config, quantity). Percent units throughout. With ``runs`` (the
    runs behind the summary), each row also gets its paired difference to the DE (NLL) and DE (MSE)
    rows of its protocol over the seeds both finished (bench.reporting.paired): ``vs_de_nll_mean``, ``_low``,
    ``_high``, ``_n``, ``_real`` and the same for ``vs_de_mse``."""
    published = published[published["in_distribution"] == in_distribution]
    if summary.empty or "id_dataset" not in summary:
        return pd.DataFrame()
    summary = summary[summary["id_dataset"] == in_distribution]
    order = list(dict.fromkeys(published["method"]))
    rank = {label: i for i, label in enumerate(order)}
    # a protocol value that not every config shares (a check run, e.g. preprocess=raw) is named in
    # the variant, and such rows come after the rows of the folder's main protocol (the most common)
    protocol = [f.name for f in dataclasses.fields(Protocol) if f.name in summary]
    main = {c: _unique_mode(summary[c].astype(str)) for c in protocol if summary[c].astype(str).nunique() > 1}
    off_main = summary.apply(lambda r: [f"{c}={r[c]}" for c in main if str(r[c]) != main[c]], axis=1)
    summary = summary.assign(_rank=summary["label"].map(lambda x: rank.get(x, len(rank))),
                             _off=off_main.map(len), _suffix=off_main.map(lambda v: "".join(f" {t}" for t in v)))
    summary = summary.sort_values(["_off", "_rank"], kind="stable").reset_index(drop=True)
    rows = []
    for config, row in summary.iterrows():
        name = row["variant"] + row["_suffix"]
        selected = row.get("selected")
        selected = _selected(selected) if isinstance(selected, str) and selected else ""
        for title, ood_set in _quantities(summary, published):
            if ood_set is None:
                column, metric, score = "id_acc", "accuracy_pct", ""
            else:
                score = row["primary_score"]
                column, metric = ood_column("auroc", score, ood_set), "auroc_pct"
            paper = published[(published["method"] == row["label"]) & (published["metric"] == metric)
                              & (published["ood_set"] == (ood_set or ""))]
            mean = row.get(f"{column}_mean", math.nan)
            std = row.get(f"{column}_std", math.nan)
            p_mean = float(paper["mean"].iloc[0]) if len(paper) else math.nan
            p_std = float(paper["std"].iloc[0]) if len(paper) else math.nan
            h_mean, h_std = 100 * float(mean), 100 * float(std)
            n = row.get(f"{column}_n", row["n"])
            paired = _paired(row, runs, summary, protocol, column) if runs is not None else {}
            rows.append({
                "config": config, "label": row["label"], "variant": name, "selected": selected,
                "preset": row.get("preset", ""),
                "quantity": title, "ood_set": ood_set or "", "score": score,
                "harness_mean": h_mean, "harness_std": h_std, "harness_n": 0 if n != n else int(n),
                "paper_mean": p_mean, "paper_std": p_std,
                "paper_n": int(paper["n_seeds"].iloc[0]) if len(paper) else None,
                "diff": h_mean - p_mean,
                "diff_in_paper_std": (h_mean - p_mean) / p_std if p_std and p_std == p_std else math.nan,
                "source": paper["source"].iloc[0] if len(paper) else "",
                **paired,
            })
    return pd.DataFrame(rows)


def _text(value) -> str:
    """A protocol value as text, a missing one (NaN, None) as 'none'."""
    return "none" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _paired(row: pd.Series, runs: pd.DataFrame, summary: pd.DataFrame, protocol: list[str], column: str) -> dict:
    """The row's paired differences (percent) to each REFERENCE_LABELS row of its protocol."""

    def runs_of(r: pd.Series) -> pd.DataFrame:
        same = (runs["variant"] == r["variant"]) & (runs["id_dataset"] == r["id_dataset"])
        for c in protocol:
            same &= runs[c].map(_text) == _text(r[c])
        return runs[same]

    out = {}
    for label in REFERENCE_LABELS:
        key = "vs_" + label.lower().replace("de (", "de_").rstrip(")")
        same_protocol = summary["label"] == label
        for c in protocol:
            same_protocol &= summary[c].map(_text) == _text(row[c])
        references = summary[same_protocol]
        if references.empty or references.iloc[0]["variant"] == row["variant"]:
            continue
        reference = references.iloc[0]
        their = column if column == "id_acc" else column.replace(row["primary_score"], reference["primary_score"], 1)
        result = pair(runs_of(row), runs_of(reference), column, their)
        out.update({f"{key}_mean": 100 * result["mean"], f"{key}_low": 100 * result["low"],
                    f"{key}_high": 100 * result["high"], f"{key}_n": result["n"], f"{key}_real": result["real"],
                    f"{key}_note": result["note"]})
    return out


def _unique_mode(values: pd.Series) -> str | None:
    """The most common value; None on a tie (then every row names its value)."""
    counts = values.value_counts()
    return counts.index[0] if len(counts) == 1 or counts.iloc[0] > counts.iloc[1] else None


def _selected(by_seed: str) -> str:
    """'lam=0.0; lam=0.0' -> 'lam=0.0 (every seed)'; differing choices stay listed by seed."""
    values = by_seed.split("; ")
    return f"{values[0]} (every seed)" if len(set(values)) == 1 else by_seed


def _cell(mean: float, std: float, n) -> str:
    if mean != mean:
        return "-"
    spread = "" if std != std else f" ± {std:.1f}"
    return f"{mean:.1f}{spread}" + (f" ({n})" if n else "")


def _paired_cell(r: pd.Series, key: str) -> str:
    """'+1.2 [+0.4, +2.0] *' (percent points; * when the 95 % interval excludes 0), '-' without a pair."""
    mean = r.get(f"{key}_mean", math.nan)
    if mean != mean:
        return "-"
    cell = format_difference({"n": r[f"{key}_n"], "mean": mean, "low": r[f"{key}_low"], "high": r[f"{key}_high"],
                              "real": bool(r[f"{key}_real"])}, 1, 1)
    fewer = r[f"{key}_n"] < r["harness_n"] and not cell.endswith(")")  # fewer pairs than the row's seeds: say so
    return cell + (f" (n={int(r[f'{key}_n'])})" if fewer else "")


def format_markdown(table: pd.DataFrame) -> str:
    """Wide Markdown: a row per config; per quantity the harness, the paper and the difference."""
    if table.empty:
        return "no finished runs for this in-distribution set"
    quantities = list(dict.fromkeys(table["quantity"]))
    chosen = "selected" in table and table["selected"].fillna("").astype(bool).any()
    header = ["method", "variant", "score"]
    paired = [k for k in ("vs_de_nll", "vs_de_mse") if f"{k}_mean" in table]
    for q in quantities:
        header += [f"{q}: harness", f"{q}: paper", f"{q}: Δ / paper sd"]
        header += [f"{q}: paired Δ vs DE (NLL); vs DE (MSE)"] if paired else []
    header += ["selected on validation (by seed)"] if chosen else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (label, variant), group in table.groupby(["label", "variant"], sort=False):
        by_q = group.set_index("quantity")
        scores = sorted({s for s in group["score"] if s})
        cells = [label, f"`{variant}`", ", ".join(scores)]
        for q in quantities:
            r = by_q.loc[q]
            cells += [_cell(r["harness_mean"], r["harness_std"], r["harness_n"]),
                      _cell(r["paper_mean"], r["paper_std"], None),
                      "-" if r["diff_in_paper_std"] != r["diff_in_paper_std"] else f"{r['diff_in_paper_std']:+.1f}"]
            cells += ["; ".join(_paired_cell(r, k) for k in ("vs_de_nll", "vs_de_mse"))] if paired else []
        cells += [group["selected"].iloc[0] or "-"] if chosen else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _short_names(labels: list[str], variants: list[str]) -> list[str]:
    """The label, plus, where several rows share it, the option values that tell them apart."""
    tokens = [set(re.split(r"[(),; ]+", v)) - {""} for v in variants]
    names = []
    for i, label in enumerate(labels):
        twins = [tokens[j] for j, other in enumerate(labels) if other == label and j != i]
        if not twins:
            names.append(label)
            continue
        own = sorted(tokens[i] - set.intersection(*twins) if len(twins) > 1 else tokens[i] - twins[0])
        names.append(f"{label}\n{' '.join(t for t in own if '=' in t)}")
    return names


def plot_paper_table(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Harness vs paper per method, one panel per quantity, mean ± sd error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    quantities = list(dict.fromkeys(table["quantity"]))
    configs = table.drop_duplicates("config")
    names = _short_names(list(configs["label"]), list(configs["variant"]))
    fig, axes = plt.subplots(1, len(quantities), figsize=(4.3 * len(quantities), 0.6 * len(names) + 1.8),
                             sharey=True, squeeze=False)
    harness_color, paper_color = sns.color_palette("colorblind", 2)
    for ax, q in zip(axes[0], quantities):
        sub = table[table["quantity"] == q].set_index("config").loc[configs["config"]]
        y = range(len(sub))
        ax.errorbar(sub["harness_mean"], [v - 0.12 for v in y], xerr=sub["harness_std"], fmt="o",
                    color=harness_color, capsize=3, label="harness (mean ± sd over seeds)")
        ax.errorbar(sub["paper_mean"], [v + 0.12 for v in y], xerr=sub["paper_std"], fmt="s",
                    color=paper_color, capsize=3, label="paper (mean ± sd, n = 5)")
        ax.set_title(f"{q} (%)")
        ax.set_yticks(list(y), names)
        if not sub["harness_mean"].notna().any():
            ax.text(0.5, 0.5, "not run by the harness\n(see paper_table.md)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=9, color="grey")
    axes[0][0].invert_yaxis()
    handles, legend = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, legend, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def compare_tables(table: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Two folders' paper tables (paper_table.csv) cell by cell: each harness cell (label, variant,
    quantity) with a mean in both, the difference of the means and whether it lies within one sd
    of the reference's cell (the rule a re-run on other hardware or another version is held to)."""
    keys, values = ["label", "variant", "quantity"], ["harness_mean", "harness_std", "harness_n"]
    both = table[keys + values].merge(reference[keys + values], on=keys, suffixes=("", "_reference"))
    both = both.dropna(subset=["harness_mean", "harness_mean_reference"]).reset_index(drop=True)
    both["diff"] = both["harness_mean"] - both["harness_mean_reference"]
    both["within_reference_sd"] = both["diff"].abs() <= both["harness_std_reference"]
    return both


def write_comparison(out: Path, reference: Path) -> tuple[pd.DataFrame, Path]:
    """compare_tables of the paper tables of the folders ``out`` and ``reference``, written to
    OUT/compare_to_<reference's name>.csv. Returns the table and its path."""
    tables = []
    for folder in (out, reference):
        if not (folder / "paper_table.csv").is_file():
            raise ConfigError(f"{folder / 'paper_table.csv'} does not exist: run `python -m bench report --out "
                              f"{folder}` on a folder whose preset has a paper table (compare_to)")
        tables.append(pd.read_csv(folder / "paper_table.csv"))
    table = compare_tables(*tables)
    path = out / f"compare_to_{reference.resolve().name}.csv"
    write_csv(table, path)
    return table, path


def write_paper_table(summary: pd.DataFrame, out: Path, published_name: str,
                      in_distribution: str | None = None, skipped: list[str] | None = None,
                      runs: pd.DataFrame | None = None) -> tuple[pd.DataFrame, list[Path]]:
    """paper_table.csv, paper_table.md and paper_table.png in ``out``. Returns (table, files written)."""
    published = load_published(published_name)
    if in_distribution is None:
        present = list(dict.fromkeys(summary.get("id_dataset", pd.Series(dtype=str))))
        if len(present) != 1:
            raise ConfigError(f"the results in {out} hold in-distribution sets {present or 'none'}: "
                              "pass --in-distribution")
        in_distribution = present[0]
    if in_distribution not in set(summary.get("id_dataset", [])):
        raise ConfigError(f"no finished runs with in-distribution set '{in_distribution}' in {out} "
                          f"(present: {', '.join(map(str, dict.fromkeys(summary.get('id_dataset', [])))) or 'none'})")
    table = build_paper_table(summary, published, in_distribution, runs)
    write_csv(table, out / "paper_table.csv")
    notes = [f"In-distribution: {in_distribution}. Harness: mean ± sd (n seeds) over the runs in this folder; "
             f"paper: {', '.join(sorted(set(published['source'])))} (mean ± sd, n = 5). "
             "Δ / paper sd = (harness mean − paper mean) / paper sd. AUROC uses each row's score column."]
    for key, name in (("vs_de_nll", "DE (NLL)"), ("vs_de_mse", "DE (MSE)")):
        for (label, variant, quantity), note in (table.set_index(["label", "variant", "quantity"]).get(f"{key}_note",
                                                                                                   pd.Series(dtype=str))
                                                 .dropna().items()):
            if note:
                notes.append(f"{label} `{variant}`, {quantity}, paired with {name}: {note}")
    if runs is not None:
        notes.append("Paired Δ: the row minus DE (NLL), then minus DE (MSE), of the same protocol, seed by seed over "
                     "the seeds both finished, in points: mean [95 % t-interval]; * where the interval excludes 0 "
                     "(docs/evaluation.md). AUROC: each row by its own score.")
    notes += [f"Skipped OOD set: {s}" for s in skipped or []]
    (out / "paper_table.md").write_text(format_markdown(table) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    files = [out / "paper_table.csv", out / "paper_table.md"]
    figures = [] if table.empty else [plot_paper_table(table, out / "paper_table.png",
                                                       f"{in_distribution} in distribution: harness vs {published_name}")]
    from bench.reporting.figures import record_figures  # the figure modules import matplotlib
    record_figures(out, "paper_table", figures)
    return table, files + figures
