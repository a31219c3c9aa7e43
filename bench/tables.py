"""The tables built from a folder's records, as DataFrames: one row per run (``records_frame``, in
the one order of every table and plot, ``sorted_runs``), the summary over seeds (``summarize``) and
the shift suite in long form (``shift_table``). bench.store reads the records and writes the CSVs."""
from __future__ import annotations

import dataclasses
import re

import pandas as pd

from bench.data.shifts import SHIFTS

# record only; "shifts" (bench evaluate's shift suite) becomes shift.csv
NOT_IN_TABLES = ("config", "config_columns", "history", "candidates", "traceback", "beyond_walk", "shifts",
                 "evaluation", "schema", "worker")
# numeric columns that describe a run's execution, not its result: never summarised
NOT_METRICS = {"seed", "threads", "diverged_epoch", "vectorized", "failed_candidates", "pack_runs", "pack_networks",
               "train_tflop"}


@dataclasses.dataclass
class FolderTables:
    """A results folder's tables, built once per command from one scan of its records
    (``RunStore.write_tables``) and handed to every report, paper table and figure after it."""
    runs: pd.DataFrame      # one row per record, selection candidates included (runs.csv)
    summary: pd.DataFrame   # mean, std and n over seeds per config (summary.csv)
    shift: pd.DataFrame     # the shift suite in long form (shift.csv; no rows until bench evaluate)
    keys: list[str]         # the config columns: the summary's group keys
    problems: list[str]     # one line per corrupt record, or per kind of missing cache


def parse_skipped(cell) -> dict[str, str]:
    """A record's ``ood_skipped`` ('set: why; set: why') as {set: why}."""
    out = {}
    for note in filter(None, str(cell or "").split("; ")):
        name, _, why = note.partition(":")
        out[name.strip()] = why.strip()
    return out


SHIFT_IDS = ["run_id", "method", "label", "variant", "seed", "candidate_of"]


def shift_table(records: list[dict], runs: pd.DataFrame) -> pd.DataFrame:
    """The shift suite's metrics in long form: one row per (run, shift, level) with the run's ids,
    the shift's family and unit, and the shift metrics of bench.evaluation.catalog."""
    rows = [{"run_id": r["run_id"], **entry} for r in records if r.get("status") == "ok" for entry in r.get("shifts", [])]
    if not rows:
        return pd.DataFrame(columns=SHIFT_IDS + ["shift", "family", "level", "unit"])
    table = pd.DataFrame(rows)
    table.insert(2, "family", table["shift"].map(lambda n: SHIFTS[n].family if n in SHIFTS else ""))
    table.insert(4, "unit", table["shift"].map(lambda n: SHIFTS[n].unit if n in SHIFTS else ""))
    ids = runs[[c for c in SHIFT_IDS if c in runs]]
    return ids.merge(table, on="run_id", how="inner").reset_index(drop=True)


def id_datasets(records: list[dict]) -> list[str]:
    """The in-distribution datasets of a folder's records."""
    return sorted({r["config"]["protocol"]["id_dataset"] for r in records if "protocol" in r.get("config", {})})


def records_frame(records: list[dict], candidates: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per record; ``candidate_of`` names the selections a run is a candidate of."""
    runs = sorted_runs(pd.DataFrame([{k: v for k, v in r.items() if k not in NOT_IN_TABLES} for r in records]))
    if not runs.empty:
        candidates = candidates or {}
        runs["candidate_of"] = runs["run_id"].map(lambda i: " ".join(candidates.get(i, [])))
    return runs


def sorted_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The one row order of every table and plot: by method, variant, seed (whatever order a grid
    ran in), so that re-rendering the same records writes the same bytes."""
    if runs.empty:
        return runs
    return runs.sort_values(["method", "variant", "seed"], kind="stable",
                            key=lambda s: s.map(_natural) if s.name == "variant" else s).reset_index(drop=True)


def _natural(text: str) -> tuple:
    """'dare(members=10)' after 'dare(members=2)': the numbers in a variant compare as numbers."""
    return tuple((0, float(part), "") if i % 2 else (1, 0.0, part)
                 for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?(?:e-?\d+)?)", str(text))) if part)


def without_candidates(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs less selection candidates: a selection's own row stands for its candidates."""
    if "candidate_of" not in runs:
        return runs
    return runs[runs["candidate_of"].fillna("") == ""].reset_index(drop=True)


def config_columns(records: list[dict]) -> list[str]:
    """The columns that describe a run's config (every option and protocol value but the seed), in
    the records' own order: the summary's group keys."""
    return list(dict.fromkeys(c for r in records for c in r["config_columns"]))


def metric_columns(runs: pd.DataFrame, keys: list[str]) -> list[str]:
    """Numeric result columns: everything numeric that is not config or execution detail."""
    return [c for c in runs.columns if c not in keys and c not in NOT_METRICS
            and pd.api.types.is_numeric_dtype(runs[c]) and not pd.api.types.is_bool_dtype(runs[c])
            and runs[c].notna().any()]  # an all-empty column (harness_commit outside git) is no metric


def summarize(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, std and n over seeds for each config (``keys``: every config column but the seed).

    Only runs with status ok enter the statistics; the others are counted in n_diverged / n_error.
    """
    if runs.empty:
        return pd.DataFrame()
    keys = [k for k in keys if k in runs.columns]
    metrics = metric_columns(runs, keys)
    ok = runs["status"] == "ok"
    extra = pd.DataFrame({"_ok": ok, "_status": runs["status"], "_seed": runs["seed"].where(ok),
                          "_candidate_of": runs["candidate_of"].fillna("") if "candidate_of" in runs else ""},
                         index=runs.index)
    # one concat, not a column at a time: folders scored by `evaluate` have thousands of metric columns
    masked = pd.concat([runs[keys], extra, runs[metrics].where(ok, axis=0)], axis=1)
    grouped = masked.groupby(keys, dropna=False, sort=False)
    out = grouped["_ok"].agg(n="sum")
    out["n_diverged"] = grouped["_status"].agg(lambda s: int((s == "diverged").sum()))
    out["n_error"] = grouped["_status"].agg(lambda s: int((s == "error").sum()))
    out["seeds"] = grouped["_seed"].agg(lambda s: " ".join(str(int(v)) for v in sorted(s.dropna())))
    if "candidate_of" in runs:  # a selection's candidates are rows too: say whose
        out["candidate_of"] = grouped["_candidate_of"].agg(lambda s: " ".join(dict.fromkeys(" ".join(s).split())))
    if "selected" in runs:  # selections: the value chosen at each seed, in seed order
        chosen = masked[[*keys, "_seed"]].assign(_selected=runs["selected"].where(ok)).sort_values("_seed", kind="stable")
        out["selected"] = chosen.groupby(keys, dropna=False, sort=False)["_selected"].agg(
            lambda s: "; ".join(map(str, s.dropna())))
    if metrics:
        # _n: seeds with a value (an OOD set skipped in some runs has fewer than n)
        stats = grouped[metrics].agg(["mean", "std", "count"])
        stats.columns = [f"{m}_{'n' if stat == 'count' else stat}" for m, stat in stats.columns]
        out = out.join(stats)
    return out.copy().reset_index()  # copy: one block, not the many the columns above were added as
