"""A results folder as one web page, OUT/index.html, and the results root's list of folders.

The page is rendered with Jinja2 from the tables the report has in memory (bench.reporting.report)
and the tables other commands left in the folder (paper_table.csv, ablation.csv, star.csv); its
style and its small script are inlined and its figures are the folder's own PNG files, so it opens
from file:// with no network. It holds nothing that changes between renders of the same records
(no time, no absolute path): re-rendering writes the same bytes.

Tables are sortable by any column (each cell carries its sort value) and the summary is filterable
by method; each summary row opens its drill-down: the row's seeds and its paired differences to
its reference.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd

from bench.evaluation.catalog import PAIRED, shown_in
from bench.reporting.formatting import format_difference, mean_std, spread
from bench.reporting.paired import paired_metric

TEMPLATES = Path(__file__).parent / "templates"
PAGE = "index.html"
# the folder's other tables shown on its page, when present: (file, title, whether shown open)
FOLDER_TABLES = (("ood_suite.csv", "OOD suite: AUROC per set, run by run", False),
                 ("shift_summary.csv", "Shift suite: summary", False),
                 ("ablation.csv", "Ablation", False),
                 ("star_summary.csv", "Star design", True))
WRAPPED = ("variant", "reference")  # long config strings: wrapped, in small type
VERDICT_CLASSES = {"inside": "inside", "outside": "outside"}


@dataclasses.dataclass
class Cell:
    text: str
    sort: Any = None    # the value a sort compares: a number, or the text
    css: str = ""

    @property
    def sort_value(self) -> str:
        value = self.text if self.sort is None else self.sort
        if isinstance(value, float) and not math.isfinite(value):
            return ""
        return f"{value:.10g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]]
    row_ids: list[str] = dataclasses.field(default_factory=list)     # a drill-down's anchor per row, if any
    row_filter: list[str] = dataclasses.field(default_factory=list)  # the text the method filter matches


@dataclasses.dataclass
class Drilldown:
    anchor: str
    title: str
    seeds: Table
    paired: Table | None


@dataclasses.dataclass
class Section:
    """One protocol's part of the page: its summary table and each row's drill-down."""
    anchor: str
    label: str
    details: str
    summary: Table
    drilldowns: list[Drilldown]


def number_cell(value: Any, digits: int = 4) -> Cell:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Cell("-", "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:.{digits}g}" if isinstance(value, float) else str(value)
        return Cell(text, float(value))
    return Cell(str(value))


def frame_table(frame: pd.DataFrame, drop: tuple[str, ...] = ("protocol",)) -> Table:
    """Any table as a page table: numbers at 4 significant digits, sortable by their values."""
    columns = [c for c in frame.columns if c not in drop]
    rows = [[dataclasses.replace(number_cell(v), css="wrap") if c in WRAPPED else number_cell(v)
             for c, v in zip(columns, row)] for row in frame[columns].itertuples(index=False)]
    return Table(columns, rows)


def summary_section(group, summary: pd.DataFrame, differences: pd.DataFrame, columns: list[tuple]) -> Section:
    """A protocol's summary rows (``columns``: report.headline's (column, title, scale, digits)) with
    each row's drill-down: its seeds, its paired differences to its reference."""
    header = ["label", "variant", "n", "score", *(title for _, title, _, _ in columns)]
    rows, anchors, filters, drilldowns = [], [], [], []
    for i, row in enumerate(summary.to_dict("records")):
        score = row.get("primary_score")
        cells = [Cell(str(row.get("label", row["method"]))), Cell(str(row["variant"]), css="wrap"),
                 number_cell(int(row["n"])), Cell(str(score or "-"))]
        for column, _, scale, digits in columns:
            mean, std = row.get(f"{column(score)}_mean"), row.get(f"{column(score)}_std")
            cells.append(Cell(mean_std(mean, std, scale, digits), mean * scale if _is_number(mean) else ""))
        anchor = f"{_slug(group.label)}-{i + 1}"
        rows.append(cells)
        anchors.append(anchor)
        filters.append(f"{row['method']} {row.get('label', '')} {row['variant']}".lower())
        runs = group.runs[group.runs["variant"] == row["variant"]]
        mine = differences[differences["variant"] == row["variant"]] if len(differences) else differences
        drilldowns.append(Drilldown(anchor, str(row["variant"]), seeds_table(runs, columns, score),
                                    paired_rows(mine) if len(mine) else None))
    return Section(_slug(group.label), group.label, group.details, Table(header, rows, anchors, filters), drilldowns)


def seeds_table(runs: pd.DataFrame, columns: list[tuple], score: str | None) -> Table:
    header = ["seed", "status", *(title for _, title, _, _ in columns)]
    rows = []
    for run in runs.sort_values("seed").to_dict("records"):
        cells = [number_cell(int(run["seed"])), Cell(str(run.get("status", "")))]
        for column, _, scale, digits in columns:
            value = run.get(column(score))
            cells.append(Cell(f"{value * scale:.{digits}f}", value * scale) if _is_number(value) else Cell("-", ""))
        rows.append(cells)
    return Table(header, rows)


def paired_rows(differences: pd.DataFrame) -> Table:
    """One line per paired metric: the mean difference to the reference and its 95 % t-interval."""
    titles = {paired_metric(m, s): (m.title(PAIRED, s), m.scale, m.digits)
              for m in shown_in(PAIRED) for s in [""] + sorted({*_sets(differences)})}
    rows = []
    for record in differences.to_dict("records"):
        title, scale, digits = titles.get(record["metric"], (record["metric"], 1.0, 4))
        css = "outside" if record.get("real") is True or record.get("real") == "True" else ""
        rows.append([Cell(title), Cell(str(record["reference"]), css="wrap"), number_cell(int(record["n"])),
                     Cell(format_difference(record, scale, digits), record["mean"] * scale
                          if _is_number(record["mean"]) else "", css)])
    return Table(["metric", "reference", "pairs", "difference [95 % interval]"], rows)


def _sets(differences: pd.DataFrame) -> set[str]:
    return {m.rsplit("_vs_", 1)[1] for m in differences["metric"] if "_vs_" in m}


def paper_table(path: Path) -> Table | None:
    """paper_table.csv as the page shows it: each cell beside the published one, with its verdict."""
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    rows = []
    for r in frame.to_dict("records"):
        # as many decimals as the published rounding has (0.05: one; 0.0005: three), as paper_table.md
        step = r.get("paper_resolution")
        d = max(0, math.ceil(-math.log10(2 * step) - 1e-9)) if _is_number(step) and step > 0 else 3
        verdict = str(r.get("verdict") or "")
        if verdict in VERDICT_CLASSES and _is_number(r.get("verdict_diff")):
            word = verdict if verdict == "inside" else "OUTSIDE"
            text = f"{word}: Δ {r['verdict_diff']:+.{d}f} [{r['verdict_low']:+.{d}f}, {r['verdict_high']:+.{d}f}]"
        else:
            text = f"{verdict}: {r.get('verdict_note') or ''}".strip(": ") if verdict else "-"
        harness = (f"{r['harness_mean']:.{d}f} ± {spread(r['harness_std'] if _is_number(r['harness_std']) else 0, d)} "
                   f"({int(r['harness_n'])})" if _is_number(r.get("harness_mean")) else "-")
        paper = (f"{r['paper_mean']:.{d}f}" + (f" ± {r['paper_std']:.{d}f}" if _is_number(r.get("paper_std")) else "")
                 if _is_number(r.get("paper_mean")) else "-")
        rows.append([Cell(str(r.get("label", ""))), Cell(str(r.get("variant") or "-"), css="wrap"), Cell(str(r["quantity"])),
                     Cell(harness, r.get("harness_mean") if _is_number(r.get("harness_mean")) else ""),
                     Cell(paper, r.get("paper_mean") if _is_number(r.get("paper_mean")) else ""),
                     Cell(text, r.get("verdict_diff") if _is_number(r.get("verdict_diff")) else text,
                          VERDICT_CLASSES.get(verdict, "nc"))])
    return Table(["method", "variant", "quantity", "harness", "published", "verdict"], rows)


def folder_figures(out: Path) -> list[dict[str, str]]:
    """The figures the folder's commands drew (figures.json), those on disk, with their captions."""
    from bench.reporting.figures import caption_of  # matplotlib: only where the figures module is loaded
    path = out / "figures.json"
    names = [n for names in json.loads(path.read_text()).values() for n in names] if path.is_file() else []
    return [{"file": n, "caption": caption_of(n)} for n in dict.fromkeys(names) if (out / n).is_file()]


def write_folder_page(out: Path, sections: list[Section], n_runs: int, presets: list[str]) -> Path:
    """OUT/index.html from the report's sections and the folder's other tables and figures;
    ``presets``: the shipped presets among the runs, whose grid command the page shows."""
    tables = [{"title": title, "open": shown, "table": frame_table(pd.read_csv(out / name)), "file": name}
              for name, title, shown in FOLDER_TABLES if (out / name).is_file()]
    where = f"results/{out.name}" if out.parent.name == "results" else out.name
    commands = [f"python -m bench report --out {where}    # re-render this page and every table from the records"]
    commands += [f"python -m bench run --preset {p} --out {where}    # the preset's grid (finished runs are reused)"
                 for p in presets]
    html = environment().get_template("folder.html.j2").render(
        name=out.name, sections=sections, paper=paper_table(out / "paper_table.csv"), tables=tables,
        figures=folder_figures(out), readme=(out / "README.md").is_file(), runs=n_runs, commands=commands)
    path = out / PAGE
    path.write_text(html)
    return path


def write_index(root: Path) -> Path:
    """ROOT/index.html: every results folder under ROOT (at any depth) that has a summary, with its headline rows."""
    folders = []
    for summary in sorted(root.rglob("summary.csv")):
        frame = pd.read_csv(summary)
        if frame.empty or "variant" not in frame:
            continue
        columns = [c for c in ("id_acc_mean", "id_nll_nats_mean", "id_ece_mean") if c in frame]
        shown = frame[["variant", "n", *columns]].rename(columns=lambda c: c.removesuffix("_mean"))
        folders.append({"name": summary.parent.relative_to(root).as_posix(), "page": (summary.parent / PAGE).is_file(),
                        "table": frame_table(shown), "runs": int(frame["n"].sum())})
    path = root / PAGE
    path.write_text(environment().get_template("index.html.j2").render(folders=folders))
    return path


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    # the page's own style and script, inlined as they are (the files are ours, not data: no escaping)
    env.globals["inline"] = lambda name: markupsafe.Markup((TEMPLATES / name).read_text())
    return env


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")[:40] or "runs"
