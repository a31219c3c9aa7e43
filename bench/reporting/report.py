"""The human-facing report of a results folder: the summary table (printed and summary.md), the
plots and, when asked, the paper table. Runs of different protocols are never mixed: each protocol
gets its own section and its own plots, and every table and plot names the protocol it shows."""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path
from typing import Callable

import pandas as pd

from bench.config import Protocol, available_presets, load_preset, make_protocol
from bench.errors import BenchError, ConfigError
from bench.evaluation.catalog import PAIRED, SUMMARY, shown_in
from bench.evaluation.columns import scored_sets
from bench.evaluation.scores import DEFAULT_SCORE
from bench.store import RunStore, write_csv
from bench.tables import FolderTables, parse_skipped, sorted_runs, summarize, without_candidates
from bench.reporting.formatting import format_difference, mean_std
from bench.reporting import pages as pages_module, shift_tables
from bench.reporting.paired import paired_table, bootstrap_table, paired_metric
from bench.reporting.paper import missing_cells, write_paper_table
from bench.reporting.published import available_tables, load_published

PROTOCOL_COLUMNS = [f.name for f in dataclasses.fields(Protocol)]


@dataclasses.dataclass
class ProtocolGroup:
    label: str        # e.g. "preset seed: mnist in distribution, OOD fashion_mnist"
    tag: str          # "" when the folder holds one protocol, else a file-name suffix such as "_seed_mnist"
    details: str      # every protocol value, one line
    runs: pd.DataFrame


def protocol_groups(runs: pd.DataFrame) -> list[ProtocolGroup]:
    """The runs split by protocol (every protocol value, not the preset's name). Labels name the
    preset(s) and, when a folder holds several protocols, the values that tell them apart."""
    cols = [c for c in PROTOCOL_COLUMNS if c in runs.columns]
    if runs.empty or not cols:
        return [ProtocolGroup("", "", "", runs)] if not runs.empty else []
    values = runs[cols + (["preset"] if "preset" in runs else [])].copy()
    for field in dataclasses.fields(Protocol):  # an implicit value (precision) that older records lack: its default
        if field.metadata.get("implicit") and field.name in values:
            values[field.name] = values[field.name].fillna(field.default)
    keys = values.astype(str)
    groups = [frame for _, frame in runs.groupby([keys[c] for c in cols], sort=False, dropna=False)]
    differing = [c for c in cols if keys[c].nunique() > 1 and c not in ("id_dataset", "ood_sets")]
    out = []
    for frame in groups:
        first = values.loc[frame.index[0]]  # the protocol values, implicit ones filled in
        presets = ", ".join(dict.fromkeys(map(str, frame["preset"]))) if "preset" in frame else "?"
        label = f"preset {presets}: {first['id_dataset']} in distribution, OOD {first['ood_sets']}"
        extra = ", ".join(f"{c}={first[c]}" for c in differing)
        if extra:
            label += f" ({extra})"
        tag = "" if len(groups) == 1 else "_" + re.sub(r"[^A-Za-z0-9]+", "_", f"{presets} {first['id_dataset']} {extra}").strip("_")
        # a value the group's runs do not have (an architecture's option under another one: hidden) is not shown
        details = ", ".join(f"{c}={first[c]}" for c in cols if not (isinstance(first[c], float) and math.isnan(first[c])))
        out.append(ProtocolGroup(label, tag, details, frame))
    tags = [g.tag for g in out]
    if len(set(tags)) < len(tags):  # equal slugs of different values: fall back to numbers
        for i, g in enumerate(out):
            g.tag = f"_protocol{i + 1}"
    # the runs of a preset's own protocol keep the plain file names (comparison.png, ...); checks
    # that change a protocol value beside them (e.g. --preprocess raw) get the tagged ones
    home = next((g for g in out if _is_presets_own(values.loc[g.runs.index], cols)), None)
    if home is not None:
        home.tag = ""
    return out


def _norm(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_presets_own(values: pd.DataFrame, cols: list[str]) -> bool:
    """Whether these runs' protocol values (one protocol; implicit ones filled in, with the preset
    column) are of one shipped preset and are its protocol values."""
    presets = set(map(str, values.get("preset", [])))
    if len(presets) != 1 or (preset := presets.pop()) not in available_presets():
        return False
    try:
        protocol = make_protocol(load_preset(preset)[1].get("protocol", {}))
    except BenchError:
        return False
    own = {**dataclasses.asdict(protocol), "ood_sets": " ".join(protocol.ood_sets)}
    own.update(hidden="-".join(map(str, protocol.hidden)) if "hidden" in protocol.as_dict() else None)
    first = values.iloc[0]
    return all(_norm(first[c]) == _norm(own[c]) for c in cols)


def headline(summary) -> list[tuple[Callable[[str], str], str, float, int]]:
    """The summary's metrics (catalog.SUMMARY), each per-OOD-set one against every OOD set present:
    (the column for a row's primary score, title, scale, digits)."""
    sets = list(dict.fromkeys(s for v in summary.get("ood_sets", []) for s in str(v).split()))
    return [(functools.partial(metric.column, ood_set=s), metric.title(SUMMARY, s), metric.scale, metric.digits)
            for metric in shown_in(SUMMARY) for s in metric.sets(sets)]


def format_summary(summary, markdown: bool = False) -> str:
    """The headline columns as 'mean ± std' per config; AUROC/FPR by each row's primary score."""
    if summary.empty:
        return "no finished runs"
    columns = headline(summary)
    chosen = "selected" in summary and summary["selected"].fillna("").astype(bool).any()
    header = ["variant", "n", "score"] + [title for _, title, _, _ in columns] + (["selected (by seed)"] if chosen else [])
    lines = []
    for _, row in summary.iterrows():
        n = f"{row['n']}" + "".join(f" (+{row[f'n_{k}']} {k})" for k in ("diverged", "error") if row.get(f"n_{k}"))
        restored = row.get("nonfinite_members_mean")
        if restored is not None and not pd.isna(restored) and restored > 0:  # members kept a checkpoint
            n += f" ({round(restored * row['n'])} members non-finite, checkpoint kept)"
        score = row.get("primary_score", DEFAULT_SCORE)
        lines.append([str(row["variant"]), n, score] + [
            mean_std(row.get(f"{column(score)}_mean"), row.get(f"{column(score)}_std"), scale, digits)
            for column, _, scale, digits in columns] + ([str(row.get("selected") or "")] if chosen else []))
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in lines])
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [header] + lines)


def report_folder(store: RunStore, tables: FolderTables, plots: bool = True, echo=print,
                  compare_to: str | None = None) -> list:
    """The report of every run in a results folder (selection candidates left out: their selection
    stands for them), with the paper table of ``compare_to`` (a published table's name or CSV), by
    default that of the first shipped preset among the runs that names one. Every command that renders
    a folder renders it this way, so the same records give the same files."""
    runs = without_candidates(sorted_runs(tables.runs))
    table = compare_to or preset_table(runs)
    gap = table_gap(table, runs) if table else ""
    if gap and compare_to:  # asked for: refused before anything is written
        raise ConfigError(gap)
    if gap:  # the preset's table does not fit these runs (another ID set): the rest of the report stands
        echo(f"note: no paper table: {gap}")
    return write_report(store, runs, tables.keys, tables.shift, plots, compare_to=None if gap else table, echo=echo)


def table_gap(table: str, runs: pd.DataFrame) -> str:
    """Why the runs cannot be set beside the published ``table`` (several ID sets, or one it has no
    cells for), or ''."""
    present = list(dict.fromkeys(map(str, runs.get("id_dataset", []))))
    if len(present) > 1:
        return (f"the runs hold in-distribution sets {', '.join(present)}: `python -m bench paper-table "
                "--in-distribution SET` sets one beside the published table")
    return missing_cells(load_published(table), present[0], table) if present else ""


def preset_table(runs: pd.DataFrame) -> str | None:
    """The published table (``compare_to``) of the first shipped preset among the runs that names one."""
    known = set(available_presets())
    tables = [load_preset(p)[1].get("compare_to") for p in dict.fromkeys(runs.get("preset", [])) if p in known]
    return next((t for t in tables if t), None)


def write_report(store: RunStore, runs: pd.DataFrame, keys: list[str], shift: pd.DataFrame, plots: bool = True,
                 compare_to: str | None = None, echo=print) -> list:
    """summary.md (one section per protocol) and the plots of each protocol; the paper table when a
    preset names one. ``shift``: the shift suite in long form (``FolderTables.shift``). Prints the
    summary. Returns the files written."""
    runs = sorted_runs(runs)  # the order of `bench report`, whatever order a grid ran in
    groups = protocol_groups(runs)
    sections, files, paired, robust, pages = [], [], [], [], []
    for group in groups:
        summary = summarize(group.runs, keys)
        pages.append((group, summary))
        differences = paired_differences(group.runs, keys)
        paired.append(differences.assign(protocol=group.label))
        robust.append(shift_and_suite_tables(group.runs, differences, shift, group.label))
        echo(f"{group.label}\n{format_summary(summary)}")
        sections.append(f"## {group.label}\n\nProtocol: {group.details}\n\n{format_summary(summary, markdown=True)}\n"
                        + format_paired(differences, scored_sets(group.runs, added=False)) + robust[-1]["markdown"])
    (store.out / "summary.md").write_text("\n".join(sections) if sections else "no finished runs\n")
    table = pd.concat(paired, ignore_index=True) if paired else pd.DataFrame()
    write_csv(table, store.out / "paired.csv")
    for name in ("ood_suite", "shift_summary", "shift_table", "shift_paired"):
        parts = [r[name] for r in robust if r.get(name) is not None and len(r[name])]
        if parts:
            write_csv(pd.concat(parts, ignore_index=True), store.out / f"{name}.csv")
        else:
            (store.out / f"{name}.csv").unlink(missing_ok=True)
    for error in runs.get("error", pd.Series(dtype=object)).dropna().unique():
        echo(f"error recorded: {error}")
    if compare_to and not runs.empty:
        files += report_paper_table(store, runs, summarize(runs, keys), compare_to, echo=echo)
    if plots:  # the figure modules import matplotlib: only when a figure is drawn
        from bench.reporting.figures import protocol_view, write_figures
        files += write_figures(store.out, [protocol_view(store, group, differences, tables)
                                           for group, differences, tables in zip(groups, paired, robust)], echo)
    files.append(write_page(store.out, runs, pages, paired))
    for path in files:
        echo(f"wrote {path}")
    return files


def write_page(out: Path, runs: pd.DataFrame, pages: list, paired: list) -> Path:
    """OUT/index.html (bench.reporting.pages): each protocol's summary with its drill-downs."""
    sections = [pages_module.summary_section(group, summary, differences, headline(summary))
                for (group, summary), differences in zip(pages, paired) if not summary.empty]
    known = set(available_presets())
    presets = [p for p in dict.fromkeys(map(str, runs.get("preset", []))) if p in known]
    return pages_module.write_folder_page(out, sections, len(runs), presets)


def shift_and_suite_tables(runs: pd.DataFrame, differences: pd.DataFrame, shift: pd.DataFrame | None, label: str) -> dict:
    """One protocol's OOD-suite and shift tables (bench.reporting.shift_tables; empty until ``bench evaluate``
    has scored its runs) and their summary.md text."""
    suite = shift_tables.ood_suite_table(runs)
    markdown = shift_tables.format_ood_suite(suite)
    out = {"ood_suite": suite.assign(protocol=label) if markdown else None, "markdown": markdown}
    rows = shift[shift["run_id"].isin(runs["run_id"])] if shift is not None else None
    if rows is None or rows.empty:
        return out
    references = dict(zip(differences["variant"], differences["reference"])) if len(differences) else {}
    summary = shift_tables.shift_summary(rows, runs)
    corruption = shift_tables.corruption_table(rows)
    shift_paired = shift_tables.shift_paired(rows, runs, references)
    out.update(shift_summary=summary.assign(protocol=label), shift_table=corruption.assign(protocol=label),
               shift_paired=shift_paired.assign(protocol=label), shift_rows=rows,
               shift_table_rows=shift_tables.table_level_rows(rows),
               markdown=markdown + shift_tables.format_shift_summary(summary)
               + shift_tables.format_corruption_table(corruption) + shift_tables.format_shift_paired(shift_paired))
    return out


def paired_differences(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each row's paired differences to its deep-ensemble reference (bench.reporting.paired), one protocol's runs."""
    options = [k for k in keys if k not in PROTOCOL_COLUMNS and k not in NOT_OPTIONS]
    return paired_table(runs, options, scored_sets(runs, added=False))


NOT_OPTIONS = ("method", "label", "variant", "preset", "ood_split", "primary_score", "select")


def write_bootstrap(store: RunStore, runs: pd.DataFrame, keys: list[str], n_boot: int, seed: int) -> pd.DataFrame:
    """bootstrap.csv: per protocol, each paired difference's paired bootstrap over test samples,
    seed by seed (bench.reporting.paired.bootstrap_table)."""
    parts = []
    for group in protocol_groups(without_candidates(sorted_runs(runs))):
        differences = paired_differences(group.runs, keys)
        if not differences.empty:
            parts.append(bootstrap_table(group.runs, differences, store.load_arrays, n_boot, seed)
                         .assign(protocol=group.label))
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    write_csv(table, store.out / "bootstrap.csv")
    return table


def format_paired(differences: pd.DataFrame, sets: list[str]) -> str:
    """The markdown table of the paired differences: one line per row, '*' where the 95 % interval
    excludes 0; empty when the protocol has no reference row."""
    if differences.empty:
        return ""
    columns = [(paired_metric(metric, s), metric.title(PAIRED, s), metric.scale, metric.digits)
               for metric in shown_in(PAIRED) for s in metric.sets(sets)]
    header = ["variant", "reference", "pairs"] + [title for _, title, _, _ in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for (variant, reference), frame in differences.groupby(["variant", "reference"], sort=False):
        by_metric = frame.set_index("metric")
        cells = [format_difference(by_metric.loc[c].to_dict(), scale, digits) if c in by_metric.index else "-"
                 for c, _, scale, digits in columns]
        lines.append("| " + " | ".join([f"`{variant}`", f"`{reference}`", str(int(frame["n"].max()))] + cells) + " |")
        notes += [f"- `{variant}`: {note}" for note in dict.fromkeys(frame["note"]) if note]
    return ("\n**Paired differences to the deep ensemble** (row − reference over the seeds both finished; "
            "mean [95 % t-interval]; * where the interval excludes 0; AUROC by each row's own score; AUGRC with "
            "the max mean probability as confidence):\n\n" + "\n".join(lines) + "\n"
            + ("\n" + "\n".join(notes) + "\n" if notes else ""))


def skipped_sets(runs: pd.DataFrame) -> list[str]:
    """One "set: why" note per OOD set some run skipped (runs made with and without a download
    attempt word the reason differently: the fuller one is kept)."""
    reasons: dict[str, str] = {}
    for cell in runs.get("ood_skipped", pd.Series(dtype=object)).dropna():
        for name, why in parse_skipped(cell).items():
            reasons[name] = max(reasons.get(name, ""), f"{name}: {why}", key=len)
    return [reasons[name] for name in sorted(reasons)]


def report_paper_table(store, runs, summary, published: str | None, in_distribution: str | None = None,
                       echo=print) -> list:
    """Write and print the runs beside a published table (see bench.reporting.paper); ``published``
    None: the one the runs' preset names."""
    published = published or preset_table(runs)
    if published is None:
        raise ConfigError(f"no preset of the runs in {store.out} names a published table (compare_to): pass "
                          f"--published (one of {', '.join(available_tables())})")
    _, files = write_paper_table(summary, store.out, published, in_distribution, skipped_sets(runs), runs)
    echo((store.out / "paper_table.md").read_text().rstrip())  # the table and the notes under it
    return files


def rewrite_page(store: RunStore, runs: pd.DataFrame, keys: list) -> Path:
    """OUT/index.html again, as ``write_report`` writes it, after a command that changed a table the
    page shows (paper-table) without the rest of the report."""
    runs = sorted_runs(runs)
    groups = protocol_groups(runs)
    pages = [(group, summarize(group.runs, keys)) for group in groups]
    return write_page(store.out, runs, pages, [paired_differences(group.runs, keys) for group in groups])
