"""Tables of what ``bench evaluate`` adds: the OOD suite by near / far group, and the shift suite
(a summary per variant, the per-corruption table, and each row's paired difference to its deep
ensemble under every shift). Inputs are one protocol's runs (``runs.csv`` rows) and their rows of
``shift.csv``; outputs are DataFrames (written as CSV) and Markdown for summary.md."""
from __future__ import annotations

import pandas as pd

from bench.data import ood_sets
from bench.evaluation.columns import ood_column, scored_sets
from bench.reporting.paired import pair
from bench.reporting.formatting import format_difference
from bench.reporting.formatting import mean_std
from bench.data.shifts import SHIFTS

# (shift.csv metric, title, scale, digits): the summary's and the paired table's columns
SHIFT_COLUMNS = [("acc", "acc", 100, 1), ("nll_nats", "NLL", 1, 3), ("ece", "ECE", 1, 3), ("augrc", "AUGRC", 1, 4),
                 ("pred_entropy_bits", "entropy (bits)", 1, 3)]
CLEAN = {"acc": "id_acc", "nll_nats": "id_nll_nats", "ece": "id_ece", "augrc": "augrc_one_minus_max_prob",
         "pred_entropy_bits": "id_pred_entropy_bits", "mutual_info_bits": "id_mutual_info_bits",
         "brier": "id_brier"}


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
    return shift[[row.level == SHIFTS[row.shift].table_level if row.shift in SHIFTS else False
                  for row in shift[["shift", "level"]].itertuples()]]


def shift_summary(shift: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the clean metrics, the mean over the scored MNIST-C corruptions at MNIST-C's
    severities, and the mean accuracy over all rotation and all translation levels; mean and sd
    over seeds of each run's value (long form: variant, where, metric, mean, std, n)."""
    parts = []
    clean = runs[(runs["status"] == "ok") & runs["run_id"].isin(shift["run_id"])]  # the runs the shifts scored
    for metric, column in CLEAN.items():
        if column in clean:
            stats = _by_variant(clean, column)
            parts.append(stats.assign(where="clean", metric=metric))
    corrupt = table_level_rows(shift[shift["family"] == "mnist_c"])
    per_run = corrupt.groupby(["variant", "run_id"], sort=False)[[m for m, _, _, _ in SHIFT_COLUMNS]].mean().reset_index()
    for metric, _, _, _ in SHIFT_COLUMNS:
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
    columns = [("clean", "acc", "clean acc", 100, 2)] + [("mnist_c", m, f"MNIST-C {t}", s, d) for m, t, s, d in SHIFT_COLUMNS]
    columns += [(f"{f} (all levels)", "acc", f"{f} acc", 100, 1) for f in ("rotation", "translation")
                if (summary["where"] == f"{f} (all levels)").any()]
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
    of every metric (long form)."""
    rows = table_level_rows(shift)
    metrics = [m for m, _, _, _ in SHIFT_COLUMNS] + [m for m in ("brier", "mutual_info_bits", "dead_pixels_lit")
                                                     if m in rows]
    stats = rows.groupby(["variant", "shift", "level"], sort=False)[metrics].agg(["mean", "std", "count"])
    stats.columns = [f"{m}_{'n' if s == 'count' else s}" for m, s in stats.columns]
    return stats.reset_index()


def format_corruption_table(table: pd.DataFrame, metric: str = "acc", scale: float = 100, digits: int = 1) -> str:
    if table.empty:
        return ""
    shifts = list(dict.fromkeys(table["shift"]))
    lines = ["| variant | " + " | ".join(shifts) + " |", "|" + "---|" * (len(shifts) + 1)]
    for variant, frame in table.groupby("variant", sort=False):
        by_shift = frame.set_index("shift")
        cells = [f"{by_shift.loc[s, f'{metric}_mean'] * scale:.{digits}f}" if s in by_shift.index else "-" for s in shifts]
        lines.append(f"| `{variant}` | " + " | ".join(cells) + " |")
    if "dead_pixels_lit_mean" in table:  # a property of the shifted images, the same for every row
        lit = table.groupby("shift", sort=False)["dead_pixels_lit_mean"].first()
        lines.append("| *dead pixels lit (%)* | " + " | ".join(f"*{lit[s] * 100:.0f}*" for s in shifts) + " |")
    return (f"\n**Per shift** ({'accuracy in %' if metric == 'acc' else metric}, mean over seeds, each shift at "
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
        columns={v: k for k, v in CLEAN.items()})
    out = []
    for variant, reference in references.items():
        for name, frame in [("clean", clean)] + list(rows.groupby("shift", sort=False)):
            mine, theirs = frame[frame["variant"] == variant], frame[frame["variant"] == reference]
            for metric, _, _, _ in SHIFT_COLUMNS:
                if metric in frame:
                    out.append({"variant": variant, "reference": reference, "shift": name, "metric": metric,
                                **pair(mine, theirs, metric)})
    return pd.DataFrame(out)


def format_shift_paired(paired: pd.DataFrame, metric: str = "acc", scale: float = 100, digits: int = 1) -> str:
    if paired.empty:
        return ""
    part = paired[paired["metric"] == metric]
    shifts = list(dict.fromkeys(part["shift"]))
    lines = ["| variant − reference | " + " | ".join(shifts) + " |", "|" + "---|" * (len(shifts) + 1)]
    for (variant, reference), frame in part.groupby(["variant", "reference"], sort=False):
        by_shift = frame.set_index("shift")
        cells = [_short(by_shift.loc[s].to_dict(), scale, digits) if s in by_shift.index else "-" for s in shifts]
        lines.append(f"| `{variant}` − `{reference}` | " + " | ".join(cells) + " |")
    return (f"\n**Paired Δ under shift** ({'accuracy points' if metric == 'acc' else metric}; row − its deep-ensemble "
            "reference over the seeds both finished; * where the 95 % t-interval excludes 0; every metric with its "
            "interval in shift_paired.csv):\n\n" + "\n".join(lines) + "\n")


def _short(result: dict, scale: float, digits: int) -> str:
    """The mean and the mark only: a table of many columns."""
    text = format_difference(result, scale, digits)
    return text.split(" [")[0] + (" *" if result.get("real") else "")
