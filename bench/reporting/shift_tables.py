"""Tables of what ``bench evaluate`` adds: the OOD suite by near / far group, and the shift suite
(a summary per variant, the per-corruption table, and each row's paired difference to its deep
ensemble under every shift). Inputs are one protocol's runs (``runs.csv`` rows) and their rows of
``shift.csv``; outputs are DataFrames (written as CSV) and Markdown for summary.md."""
from __future__ import annotations

import pandas as pd

from bench.data import ood_sets
from bench.evaluation.catalog import SHIFT_CLEAN, SHIFT_SUMMARY, SHIFT_TABLE, Metric, clean_columns, get, shown_in
from bench.evaluation.columns import ood_column, scored_sets
from bench.reporting.paired import pair
from bench.reporting.formatting import format_difference
from bench.reporting.formatting import mean_std
from bench.data.shifts import SHIFTS


def _by_variant(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    return frame.groupby("variant", sort=False)[column].agg(["mean", "std", "count"])


# -- the OOD suite -------------------------------------------------------------------------------

def ood_suite_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run, the AUROC of each scored OOD set by the run's own score, and the mean over each
    group's sets (``near_mean``, ``far_mean``): run_id, variant, seed and one column per set."""
    sets = [s for s in scored_sets(runs) if s in ood_sets.SETS]  # a foreign runs.csv may name others
    rows = []
    for _, run in runs[runs["status"] == "ok"].iterrows():
        row = {"run_id": run["run_id"], "variant": run["variant"], "seed": run["seed"]}
        for s in sets:
            row[s] = run.get(ood_column("auroc", run["primary_score"], s))
        for group in ("near", "far"):
            values = [row[s] for s in sets if ood_sets.group(s) == group and pd.notna(row[s])]
            row[f"{group}_mean"] = sum(values) / len(values) if values else float("nan")
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["added"] = bool(runs.get("scored_ood_sets", pd.Series(dtype=object)).fillna("").astype(str)
                                .str.strip().ne("").any())
    return table


def format_ood_suite(table: pd.DataFrame) -> str:
    """Markdown: AUROC by each row's own score per OOD set, near sets then far sets, each group with
    its mean (per seed, then mean ± sd over seeds). Empty when only one set is scored."""
    sets = [c for c in table.columns if c in ood_sets.SETS]
    if len(sets) < 2 or not table.attrs.get("added"):  # only once `bench evaluate` has added sets
        return ""
    near = [s for s in sets if ood_sets.group(s) == "near"]
    far = [s for s in sets if ood_sets.group(s) == "far"]
    columns = near + ["near_mean"] + far + ["far_mean"]
    titles = [f"near: {s}" for s in near] + ["**near mean**"] + [f"far: {s}" for s in far] + ["**far mean**"]
    lines = ["| variant | n | " + " | ".join(titles) + " |", "|" + "---|" * (len(columns) + 2)]
    for variant, frame in table.groupby("variant", sort=False):
        cells = [mean_std(frame[c].mean(), frame[c].std(), 1, 3) if frame[c].notna().any() else "-" for c in columns]
        lines.append(f"| `{variant}` | {len(frame)} | " + " | ".join(cells) + " |")
    return ("\n**OOD suite** (`bench evaluate`): AUROC by each row's own score, mean ± sd over seeds; near and far "
            "as docs/evaluation.md defines them:\n\n" + "\n".join(lines) + "\n")


# -- the shift suite -----------------------------------------------------------------------------

def table_level_rows(shift: pd.DataFrame) -> pd.DataFrame:
    """The rows of each shift at its table level (``Shift.table_level``: MNIST-C's severity; rotation 90°, translation 14 px)."""
    # a boolean Series: an empty list would select no columns instead of no rows (a folder scored under
    # rotation alone has no MNIST-C row)
    return shift[pd.Series([row.level == SHIFTS[row.shift].table_level if row.shift in SHIFTS else False
                            for row in shift[["shift", "level"]].itertuples()], index=shift.index, dtype=bool)]


def shift_summary(shift: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the clean metrics, the mean over the scored MNIST-C corruptions at MNIST-C's
    severities, and the mean accuracy over all rotation and all translation levels; mean and sd
    over seeds of each run's value (long form: variant, where, metric, mean, std, n). The metrics are
    the catalog's: SHIFT_CLEAN (read from each one's clean column) and SHIFT_SUMMARY."""
    parts = []
    clean = runs[(runs["status"] == "ok") & runs["run_id"].isin(shift["run_id"])]  # the runs the shifts scored
    for metric in shown_in(SHIFT_CLEAN):
        if metric.clean in clean:
            stats = _by_variant(clean, metric.clean)
            parts.append(stats.assign(where="clean", metric=metric.name))
    corrupt = table_level_rows(shift[shift["family"] == "mnist_c"])
    shown = [m.name for m in shown_in(SHIFT_SUMMARY)]
    per_run = corrupt.groupby(["variant", "run_id"], sort=False)[shown].mean().reset_index()
    for metric in shown if len(per_run) else ():
        parts.append(_by_variant(per_run, metric).assign(where="mnist_c", metric=metric))
    for family in ("rotation", "translation"):
        per_run = shift[shift["family"] == family].groupby(["variant", "run_id"], sort=False)["acc"].mean().reset_index()
        if len(per_run):
            parts.append(_by_variant(per_run, "acc").assign(where=f"{family} (all levels)", metric="acc"))
    out = pd.concat(parts).reset_index().rename(columns={"count": "n"})
    return out[["variant", "where", "metric", "mean", "std", "n"]]


def format_shift_summary(summary: pd.DataFrame) -> str:
    if summary.empty:
        return ""
    acc, clean_acc = get("acc"), get(get("acc").clean)  # the clean column: shown like the run's own accuracy
    columns = [("clean", acc.name, f"clean {acc.label}", clean_acc.scale, clean_acc.digits)]
    columns += [("mnist_c", m.name, f"MNIST-C {m.label}", m.scale, m.digits) for m in shown_in(SHIFT_SUMMARY)]
    columns += [(f"{f} (all levels)", acc.name, f"{f} {acc.label}", acc.scale, acc.digits)
                for f in ("rotation", "translation") if (summary["where"] == f"{f} (all levels)").any()]
    lines = ["| variant | " + " | ".join(c[2] for c in columns) + " |", "|" + "---|" * (len(columns) + 1)]
    indexed = summary.set_index(["variant", "where", "metric"])
    for variant in dict.fromkeys(summary["variant"]):
        cells = []
        for where, metric, _, scale, digits in columns:
            key = (variant, where, metric)
            cells.append(mean_std(indexed.loc[key, "mean"], indexed.loc[key, "std"], scale, digits)
                         if key in indexed.index else "-")
        lines.append(f"| `{variant}` | " + " | ".join(cells) + " |")
    return ("\n**Under shift** (`bench evaluate`): MNIST-C columns are the mean over the scored MNIST-C corruptions "
            "(all 15 by default) at the severities the MNIST-C dataset uses; rotation and translation the mean accuracy over all their levels; "
            "mean ± sd over seeds:\n\n" + "\n".join(lines) + "\n")


def corruption_table(shift: pd.DataFrame) -> pd.DataFrame:
    """The per-corruption table: per variant and shift at its table level, mean, sd and n over seeds
    of every metric of the catalog's SHIFT_TABLE in the rows (long form)."""
    rows = table_level_rows(shift)
    metrics = [m.name for m in shown_in(SHIFT_TABLE) if m.name in rows]
    stats = rows.groupby(["variant", "shift", "level"], sort=False)[metrics].agg(["mean", "std", "count"])
    stats.columns = [f"{m}_{'n' if s == 'count' else s}" for m, s in stats.columns]
    return stats.reset_index()


def format_corruption_table(table: pd.DataFrame, name: str = "acc") -> str:
    if table.empty:
        return ""
    metric, lit = get(name), get("dead_pixels_lit")
    shifts = list(dict.fromkeys(table["shift"]))
    lines = ["| variant | " + " | ".join(shifts) + " |", "|" + "---|" * (len(shifts) + 1)]
    for variant, frame in table.groupby("variant", sort=False):
        by_shift = frame.set_index("shift")
        cells = [f"{by_shift.loc[s, f'{name}_mean'] * metric.scale:.{metric.digits}f}" if s in by_shift.index else "-"
                 for s in shifts]
        lines.append(f"| `{variant}` | " + " | ".join(cells) + " |")
    if f"{lit.name}_mean" in table:  # a property of the shifted images, the same for every row
        values = table.groupby("shift", sort=False)[f"{lit.name}_mean"].first()
        lines.append(f"| *{lit.label}* | "
                     + " | ".join(f"*{values[s] * lit.scale:.{lit.digits}f}*" for s in shifts) + " |")
    what = _words(metric) + (" in %" if metric.scale == 100 else "")
    return (f"\n**Per shift** ({what}, mean over seeds, each shift at "
            "MNIST-C's severity; rotation 90°, translation 14 px; shift_table.csv has every metric with its sd; "
            "*dead pixels lit*: the share of the pixels that are 0 in every training image which the shifted test "
            "images switch on):\n\n"
            + "\n".join(lines) + "\n")


def shift_paired(shift: pd.DataFrame, runs: pd.DataFrame, references: dict[str, str]) -> pd.DataFrame:
    """Each row's paired difference to its reference (``references``: variant -> reference variant,
    as bench.reporting.paired chose it) under every shift at its table level and on the clean split: variant,
    reference, shift, metric, n, mean, low, high, real, note."""
    rows = table_level_rows(shift)
    clean = runs[(runs["status"] == "ok") & runs["run_id"].isin(shift["run_id"])].rename(
        columns=clean_columns())
    out = []
    for variant, reference in references.items():
        for name, frame in [("clean", clean)] + list(rows.groupby("shift", sort=False)):
            mine, theirs = frame[frame["variant"] == variant], frame[frame["variant"] == reference]
            for metric in shown_in(SHIFT_SUMMARY):
                if metric.name in frame:
                    out.append({"variant": variant, "reference": reference, "shift": name, "metric": metric.name,
                                **pair(mine, theirs, metric.name)})
    return pd.DataFrame(out)


def format_shift_paired(paired: pd.DataFrame, name: str = "acc") -> str:
    if paired.empty:
        return ""
    metric = get(name)
    part = paired[paired["metric"] == name]
    shifts = list(dict.fromkeys(part["shift"]))
    lines = ["| variant − reference | " + " | ".join(shifts) + " |", "|" + "---|" * (len(shifts) + 1)]
    for (variant, reference), frame in part.groupby(["variant", "reference"], sort=False):
        by_shift = frame.set_index("shift")
        cells = [_short(by_shift.loc[s].to_dict(), metric.scale, metric.digits) if s in by_shift.index else "-"
                 for s in shifts]
        lines.append(f"| `{variant}` − `{reference}` | " + " | ".join(cells) + " |")
    what = _words(metric) + (" points" if metric.scale == 100 else "")
    return (f"\n**Paired Δ under shift** ({what}; row − its deep-ensemble "
            "reference over the seeds both finished; * where the 95 % t-interval excludes 0; every metric with its "
            "interval in shift_paired.csv):\n\n" + "\n".join(lines) + "\n")


def _short(result: dict, scale: float, digits: int) -> str:
    """The mean and the mark only: a table of many columns."""
    text = format_difference(result, scale, digits)
    return text.split(" [")[0] + (" *" if result.get("real") else "")


def _words(metric: Metric) -> str:
    """A metric as the text above a table names it: its long label."""
    return metric.long_label or metric.label
