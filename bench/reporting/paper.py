"""The harness's numbers beside a published table (``python -m bench paper-table``; the tables are
a registry, bench.reporting.published).

Rows are the summary's configs whose in-distribution set matches, each matched to published rows
by its label (the card's ``labels`` map a paper's method names to the harness's: "DE (NLL)",
"Single network", ...), then each published method the folder has no runs of. Columns are the
published quantities (ID accuracy, NLL, ECE, the AUROC against each OOD set by each row's own
score: the method's ``primary_score``), in the published unit: the harness's mean ± sd (n), the
published value and the cell's verdict (bench.reporting.verdicts: inside or outside the seed noise,
or not comparable and why). With the runs and a card that names ``paired_with`` rows (the DARE
table: DE (NLL) and DE (MSE)), each row's paired differences to them, seed by seed.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from bench.config import Protocol
from bench.errors import ConfigError
from bench.evaluation.columns import ood_column
from bench.models.registry import ARCH_OPTIONS, ARCHITECTURES
from bench.store import write_csv
from bench.reporting.paired import pair
from bench.reporting.formatting import format_difference, spread
from bench.reporting.published import PUBLISHED_METRICS, PublishedTable, load_published, option_text
from bench.reporting.verdicts import format_verdict, verdict

AUROC = "auroc_pct"


def _quantities(summary: pd.DataFrame, cells: pd.DataFrame) -> list[tuple[str, str, str | None]]:
    """(title, metric, OOD set or None): the published non-AUROC metrics in their order, then the AUROC
    against the harness's OOD sets and any other published one."""
    metrics = [m for m in dict.fromkeys(cells["metric"]) if m != AUROC]
    out = [(PUBLISHED_METRICS[m].title, m, None) for m in metrics]
    if AUROC in set(cells["metric"]):
        sets = [s for value in summary.get("ood_sets", pd.Series(dtype=str)).dropna() for s in str(value).split()]
        sets += [s for s in cells.loc[cells["metric"] == AUROC, "ood_set"] if s]
        out += [(PUBLISHED_METRICS[AUROC].title.format(set=s), AUROC, s) for s in dict.fromkeys(sets)]
    return out


def reference_key(label: str) -> str:
    """The column prefix of the paired differences to the row ``label``: 'DE (NLL)' -> 'vs_de_nll'."""
    return "vs_" + "_".join(re.findall(r"[a-z0-9]+", label.lower()))


SKIPPED_SET = "OOD set not scored here (skipped: see below)"
NOT_SCORED = "not in these runs' records (`bench evaluate` scores stored weights again)"


def build_paper_table(summary: pd.DataFrame, published: PublishedTable, in_distribution: str,
                      runs: pd.DataFrame | None = None, unscored: set[str] = frozenset()) -> pd.DataFrame:
    """Tidy comparison: one row per (config, quantity), in the published unit, with the cell's verdict
    (a published cell against an OOD set of ``unscored``, which the runs could not score: SKIPPED_SET).
    With ``runs`` (the runs behind the summary), each row also gets its paired difference to each of the
    card's ``paired_with`` rows of its protocol over the seeds both finished (bench.reporting.paired):
    ``vs_de_nll_mean``, ``_low``, ``_high``, ``_n``, ``_real``, ``_note`` and so on."""
    cells = published.cells[published.cells["in_distribution"] == in_distribution]
    if summary.empty or "id_dataset" not in summary:
        return pd.DataFrame()
    summary = summary[summary["id_dataset"] == in_distribution]
    order = [published.label(m) for m in dict.fromkeys(cells["method"])]
    rank = {label: i for i, label in enumerate(order)}
    # a protocol value that not every config shares (a check run, e.g. preprocess=raw) is named in
    # the variant, and such rows come after the rows of the folder's main protocol (the most common)
    protocol = [f.name for f in dataclasses.fields(Protocol) if f.name in summary]
    main = {c: _unique_mode(summary[c].astype(str)) for c in protocol if summary[c].astype(str).nunique() > 1}
    off_main = summary.apply(lambda r: [f"{c}={r[c]}" for c in main if str(r[c]) != main[c]], axis=1)
    summary = summary.assign(_rank=summary["label"].map(lambda x: rank.get(x, len(rank))),
                             _off=off_main.map(len), _suffix=off_main.map(lambda v: "".join(f" {t}" for t in v)))
    summary = summary.sort_values(["_off", "_rank"], kind="stable").reset_index(drop=True)
    options = {published.label(m): wanted for m, wanted in published.options.items()}
    summary["_networks"] = [networks_differ(r, published.protocol) or options_differ(r, options.get(r["label"], {}))
                            for _, r in summary.iterrows()]
    quantities = _quantities(summary, cells)
    labelled = cells.assign(label=cells["method"].map(published.label))
    rows = []
    for config, row in summary.iterrows():
        selected = row.get("selected")
        selected = _selected(selected) if isinstance(selected, str) and selected else ""
        for title, metric, ood_set in quantities:
            score = row["primary_score"] if ood_set else ""
            column = ood_column("auroc", score, ood_set) if ood_set else PUBLISHED_METRICS[metric].column
            paired = (_paired(row, runs, summary, protocol, column, published.paired_with, PUBLISHED_METRICS[metric].scale)
                      if runs is not None else {})
            harness, paper = _harness_cell(row, column, metric), _paper_cell(labelled, row["label"], metric, ood_set)
            if not harness["harness_n"] and paper["paper_mean"] == paper["paper_mean"]:  # why this row has no value
                paper["why_not"] = SKIPPED_SET if ood_set in unscored else NOT_SCORED
            rows.append({"config": config, "label": row["label"], "variant": row["variant"] + row["_suffix"],
                         "incomparable": row["_networks"], "selected": selected, "preset": row.get("preset", ""),
                         "quantity": title, "metric": metric, "ood_set": ood_set or "", "score": score, **harness,
                         **paper, **paired})
    present = set(summary["label"])
    missing = [m for m in dict.fromkeys(cells["method"]) if published.label(m) not in present]
    for i, method in enumerate(missing):  # the published rows this folder has no runs of (config -1, -2, ...)
        why = published.not_run.get(method, "not run in this folder")
        for title, metric, ood_set in quantities:
            rows.append({"config": -1 - i, "label": published.label(method), "variant": "", "selected": "",
                         "preset": "", "quantity": title, "metric": metric, "ood_set": ood_set or "", "score": "",
                         "harness_mean": math.nan, "harness_std": math.nan, "harness_n": 0, "incomparable": "",
                         **_paper_cell(labelled, published.label(method), metric, ood_set, why)})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["diff"] = table["harness_mean"] - table["paper_mean"]
    table["diff_in_paper_std"] = table["diff"] / table["paper_std"].where(table["paper_std"] > 0)
    verdicts = pd.DataFrame([verdict(r.harness_mean, r.harness_std, r.harness_n, r.paper_mean, r.paper_std, r.paper_n,
                                     r.paper_resolution, r.why_not, r.incomparable) for r in table.itertuples()],
                            index=table.index)
    return pd.concat([table.drop(columns=["why_not", "incomparable"]), verdicts], axis=1)


NETWORKS_DIFFER = "networks differ from the published ones"


def networks_differ(row: pd.Series, published: dict[str, str]) -> str:
    """Why a summary row's networks are not the published ones ('arch=lenet5, published mlp'), or ''. A
    value missing from the row is the protocol's default; an architecture's option (hidden) counts only
    where the row's architecture has it."""
    defaults = {f.name: f.default for f in dataclasses.fields(Protocol)}

    def value(name: str) -> str:
        have = row.get(name)
        have = defaults[name] if have is None or have != have or have == "" else have
        return "-".join(map(str, have)) if isinstance(have, tuple) else str(have)

    own = ARCHITECTURES[value("arch")].options if value("arch") in ARCHITECTURES else ()
    off = [f"{name}={value(name)}, published {wanted}" for name, wanted in published.items()
           if (name in own or name not in ARCH_OPTIONS) and value(name) != wanted]
    return f"{NETWORKS_DIFFER} (" + "; ".join(off) + ")" if off else ""


OPTIONS_DIFFER = "method options differ from the published row's"


def options_differ(row: pd.Series, wanted: dict[str, str]) -> str:
    """Why a summary row's method options are not those the card pins for its published row
    ('members=5, published 10'), or ''. An option the row does not hold (no such column) is not judged."""
    off = [f"{name}={option_text(row.get(name))}, published {value}" for name, value in wanted.items()
           if row.get(name) is not None and row.get(name) == row.get(name) and option_text(row.get(name)) != value]
    return f"{OPTIONS_DIFFER} (" + "; ".join(off) + ")" if off else ""


def _harness_cell(row: pd.Series, column: str, metric: str) -> dict:
    scale, mean = PUBLISHED_METRICS[metric].scale, float(row.get(f"{column}_mean", math.nan))
    n = row.get(f"{column}_n", row["n"]) if mean == mean else 0  # no value, no seeds (a skipped OOD set)
    return {"harness_mean": scale * mean, "harness_std": scale * float(row.get(f"{column}_std", math.nan)),
            "harness_n": 0 if n != n else int(n)}


def _paper_cell(cells: pd.DataFrame, label: str, metric: str, ood_set: str | None, why_not: str = "") -> dict:
    """The published value of (label, metric, OOD set), its sd, seed count, rounding and source (nan without one)."""
    paper = cells[(cells["label"] == label) & (cells["metric"] == metric) & (cells["ood_set"] == (ood_set or ""))]
    first = paper.iloc[0] if len(paper) else {}
    mean, std = first.get("mean", math.nan), first.get("std", math.nan)
    return {"paper_mean": mean, "paper_std": std, "paper_n": first.get("n_seeds", math.nan),
            "paper_resolution": first.get("resolution", math.nan), "source": first.get("source", ""), "why_not": why_not}


def _text(value) -> str:
    """A protocol value as text, a missing one (NaN, None) as 'none'."""
    return "none" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _paired(row: pd.Series, runs: pd.DataFrame, summary: pd.DataFrame, protocol: list[str], column: str,
            references: tuple[str, ...], scale: float) -> dict:
    """The row's paired differences (in the published unit) to each of the ``references`` rows of its protocol."""

    def runs_of(r: pd.Series) -> pd.DataFrame:
        same = (runs["variant"] == r["variant"]) & (runs["id_dataset"] == r["id_dataset"])
        for c in protocol:
            same &= runs[c].map(_text) == _text(r[c])
        return runs[same]

    out = {}
    for label in references:
        key = reference_key(label)
        same_protocol = summary["label"] == label
        for c in protocol:
            same_protocol &= summary[c].map(_text) == _text(row[c])
        references = summary[same_protocol]
        if references.empty or references.iloc[0]["variant"] == row["variant"]:
            continue
        reference = references.iloc[0]
        their = column if column == "id_acc" else column.replace(row["primary_score"], reference["primary_score"], 1)
        result = pair(runs_of(row), runs_of(reference), column, their)
        out.update({f"{key}_mean": scale * result["mean"], f"{key}_low": scale * result["low"],
                    f"{key}_high": scale * result["high"], f"{key}_n": result["n"], f"{key}_real": result["real"],
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


def _cell(mean: float, std: float, n, digits: int = 1) -> str:
    if mean != mean:
        return "-"
    sd = "" if std != std else f" ± {spread(std, digits)}"
    return f"{mean:.{digits}f}{sd}" + (f" ({n})" if n else "")


def _paired_cell(r: pd.Series, key: str, digits: int = 1) -> str:
    """'+1.2 [+0.4, +2.0] *' (percent points; * when the 95 % interval excludes 0), '-' without a pair."""
    mean = r.get(f"{key}_mean", math.nan)
    if mean != mean:
        return "-"
    cell = format_difference({"n": r[f"{key}_n"], "mean": mean, "low": r[f"{key}_low"], "high": r[f"{key}_high"],
                              "real": bool(r[f"{key}_real"])}, 1, digits)
    fewer = r[f"{key}_n"] < r["harness_n"] and not cell.endswith(")")  # fewer pairs than the row's seeds: say so
    return cell + (f" (n={int(r[f'{key}_n'])})" if fewer else "")


def format_markdown(table: pd.DataFrame, references: tuple[str, ...] = ()) -> str:
    """Wide Markdown: a row per config (then per published method without runs); per quantity the
    harness, the paper, the verdict and, where the card names them (``references``, their order; else the
    table's), the paired differences."""
    if table.empty:
        return "no finished runs for this in-distribution set"
    quantities = list(dict.fromkeys(table["quantity"]))
    chosen = "selected" in table and table["selected"].fillna("").astype(bool).any()
    header = ["method", "variant", "score"]
    paired = [c[:-len("_mean")] for c in table.columns if c.startswith("vs_") and c.endswith("_mean")]
    order = [reference_key(label) for label in references]
    paired.sort(key=lambda k: order.index(k) if k in order else len(order))
    for q in quantities:
        header += [f"{q}: harness", f"{q}: paper", f"{q}: verdict"]
        header += [f"{q}: paired Δ vs " + "; vs ".join(_reference_names(table, paired))] if paired else []
    header += ["selected on validation (by seed)"] if chosen else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (label, variant), group in table.groupby(["label", "variant"], sort=False):
        by_q = group.set_index("quantity")
        scores = sorted({s for s in group["score"] if s})
        cells = [label, f"`{variant}`" if variant else "(no runs)", ", ".join(scores)]
        for q in quantities:
            r = by_q.loc[q]
            digits = PUBLISHED_METRICS[r["metric"]].digits
            cells += [_cell(r["harness_mean"], r["harness_std"], r["harness_n"], digits),
                      _cell(r["paper_mean"], r["paper_std"], None, digits), format_verdict(r, digits)]
            cells += ["; ".join(_paired_cell(r, k, digits) for k in paired)] if paired else []
        cells += [group["selected"].iloc[0] or "-"] if chosen else []
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _reference_names(table: pd.DataFrame, keys: list[str]) -> list[str]:
    """The labels behind the paired columns' keys, in their order."""
    labels = {reference_key(label): label for label in table["label"].dropna().unique()}
    return [labels.get(k, k) for k in keys]


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


def figure_rows(table: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """The figure's row names, one per config in order, and which configs are not the published setup
    (other networks, or other method options than the card pins: any cell not comparable for that
    reason); those names say which."""
    configs = table.drop_duplicates("config")
    notes = table["verdict_note"].fillna("").astype(str)
    tags = {NETWORKS_DIFFER: "other networks", OPTIONS_DIFFER: "other options"}
    tag = configs["config"].map(lambda c: next((t for start, t in tags.items()
                                                if notes[table["config"] == c].str.startswith(start).any()), ""))
    names = _short_names(list(configs["label"]), list(configs["variant"]))
    return ([f"{name}\n({t}: n/c)" if t else name for name, t in zip(names, tag)],
            tag.astype(bool).to_numpy(dtype=bool))


def plot_paper_table(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Harness vs paper per method, one panel per quantity, mean ± sd error bars. The harness markers of
    rows that are not the published setup (other networks or method options) are hollow, their names say so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    quantities = list(dict.fromkeys(table["quantity"]))
    configs = table.drop_duplicates("config")
    names, other = figure_rows(table)
    fig, axes = plt.subplots(1, len(quantities), figsize=(4.3 * len(quantities), 0.6 * len(names) + 1.8),
                             sharey=True, squeeze=False)
    harness_color, paper_color = sns.color_palette("colorblind", 2)
    for ax, q in zip(axes[0], quantities):
        sub = table[table["quantity"] == q].set_index("config").loc[configs["config"]]
        y = np.arange(len(sub))
        for hollow, label in ((False, "harness (mean ± sd over seeds)"), (True, "harness, not the published setup (n/c)")):
            rows = other == hollow
            if rows.any():
                ax.errorbar(sub["harness_mean"][rows], y[rows] - 0.12, xerr=sub["harness_std"][rows], fmt="o",
                            color=harness_color, mfc="white" if hollow else harness_color, capsize=3, label=label)
        ax.errorbar(sub["paper_mean"], [v + 0.12 for v in y], xerr=sub["paper_std"], fmt="s",
                    color=paper_color, capsize=3, label="published (mean ± sd where given)")
        ax.set_title(f"{q} (%)" if sub["metric"].iloc[0].endswith("_pct") else q)
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


def missing_cells(published: PublishedTable, in_distribution: str, name: str = "") -> str:
    """Why ``published`` (called ``name``, else its own) cannot stand beside runs of ``in_distribution``
    (it has no cells for it), or ''."""
    present = list(dict.fromkeys(published.cells["in_distribution"]))
    if in_distribution in present:
        return ""
    return (f"published table {name or published.name} has no cells with in-distribution set '{in_distribution}' "
            f"(it has {', '.join(present) or 'none'})")


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
    if missing := missing_cells(published, in_distribution):
        raise ConfigError(f"{missing}: no paper table written")
    unscored = {reason.split(":")[0] for reason in skipped or []}  # an OOD set the runs could not score
    table = build_paper_table(summary, published, in_distribution, runs, unscored)
    notes = _notes(table, published, in_distribution, runs is not None)
    notes += [f"Skipped OOD set: {s}" for s in skipped or []]
    markdown = format_markdown(table, published.paired_with) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    write_csv(table, out / "paper_table.csv")
    (out / "paper_table.md").write_text(markdown)
    files = [out / "paper_table.csv", out / "paper_table.md"]
    figures = [] if table.empty else [plot_paper_table(table, out / "paper_table.png",
                                                       f"{in_distribution} in distribution: harness vs {published.name}")]
    from bench.reporting.figures import record_figures  # the figure modules import matplotlib
    record_figures(out, "paper_table", figures)
    return table, files + figures


def _notes(table: pd.DataFrame, published: PublishedTable, in_distribution: str, paired: bool) -> list[str]:
    """The lines under the Markdown table: what is compared, the verdict's rule, the card, unpaired seeds."""
    sources = sorted(set(published.cells["source"]) - {""})
    notes = [f"In-distribution: {in_distribution}. Harness: mean ± sd (n seeds) over the runs in this folder; "
             f"published: {published.title or published.name} ({'; '.join(sources)}"
             + (f"; {published.link}" if published.link else "") + "), mean ± sd where the source gives one. "
             "AUROC uses each row's score column.",
             "Verdict: the harness mean minus the published value, with its 95 % t-interval from the seed spread "
             "(Welch's where the source gives an sd and a seed count; else the harness's sd standing for both, "
             "a source without a seed count taken as one run), widened by the published value's rounding: inside "
             "when the interval holds 0, OUTSIDE when not, n/c (not comparable) and why (bench.reporting.verdicts)."]
    if published.conventions:
        notes.append(f"Conventions of the source: {' '.join(published.conventions.split())}")
    if published.left_open:
        notes.append(f"What the source leaves open: {' '.join(published.left_open.split())}")
    for label in published.paired_with:
        key = reference_key(label)
        for (row, variant, quantity), note in (table.set_index(["label", "variant", "quantity"])
                                               .get(f"{key}_note", pd.Series(dtype=str)).dropna().items()):
            if note:
                notes.append(f"{row} `{variant}`, {quantity}, paired with {label}: {note}")
    if paired and published.paired_with:
        notes.append(f"Paired Δ: the row minus {', then minus '.join(published.paired_with)}, of the same protocol, "
                     "seed by seed over the seeds both finished, in the published unit: mean [95 % t-interval]; * where "
                     "the interval excludes 0 (docs/evaluation.md). AUROC: each row by its own score.")
    return notes
