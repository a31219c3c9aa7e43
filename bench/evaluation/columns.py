"""The names of metric and score columns: the one place that makes and reads them (a run's flat
metrics, runs.csv, the cached per-sample arrays)."""
from __future__ import annotations

import numpy as np
import pandas as pd

OOD_METRICS = ("auroc", "aupr_in", "aupr_out", "fpr95")
PRIMARY = "primary"  # the score column of each run's own primary score (tables and plots)


def ood_column(metric: str, score: str, ood_set: str) -> str:
    """'auroc', 'pred_entropy', 'mnist' -> 'auroc_pred_entropy_vs_mnist'."""
    return f"{metric}_{score}_vs_{ood_set}"


def read_ood_column(column: str) -> tuple[str, str, str] | None:
    """'auroc_pred_entropy_vs_mnist' -> ('auroc', 'pred_entropy', 'mnist'); None for any other column."""
    head, sep, ood_set = column.rpartition("_vs_")
    metric = next((m for m in sorted(OOD_METRICS, key=len, reverse=True) if head.startswith(f"{m}_")), None)
    if not sep or not ood_set or metric is None or len(head) == len(metric) + 1:
        return None
    return metric, head[len(metric) + 1:], ood_set


def score_key(score: str, ood_set: str | None = None) -> str:
    """The per-sample scores' array name in predictions/<run_id>.npz: 'id_<score>' or 'ood_<set>_<score>'."""
    return f"id_{score}" if ood_set is None else f"ood_{ood_set}_{score}"


def uncertainty_column(name: str, ood_set: str | None = None) -> str:
    """Mean uncertainty in bits: 'id_pred_entropy_bits', or 'ood_<set>_pred_entropy_bits'."""
    return f"{'id' if ood_set is None else f'ood_{ood_set}'}_{name}_bits"


def scored_sets(runs, added: bool = True) -> list[str]:
    """The OOD sets of these runs that have metric columns (a skipped set has none): the protocol's
    (``ood_sets``) first, then, unless not ``added``, those ``bench evaluate`` added (``scored_ood_sets``)."""
    scored = {parsed[2] for parsed in map(read_ood_column, runs.columns) if parsed}
    columns = ("ood_sets", "scored_ood_sets") if added else ("ood_sets",)
    named = dict.fromkeys(s for column in columns for value in runs.get(column, [])
                          if isinstance(value, str) for s in value.split())
    return [s for s in named if s in scored]


def with_primary(runs, sets: list[str], metric: str = "auroc"):
    """The runs plus a column ood_column(metric, PRIMARY, set) per set: each run's metric by the
    score its method is reported with (its ``primary_score``)."""
    return runs.assign(**{ood_column(metric, PRIMARY, s): [r.get(ood_column(metric, r["primary_score"], s), np.nan)
                                                           for _, r in runs.iterrows()] for s in sets})


def selective_column(metric: str, score: str) -> str:
    """'augrc', 'one_minus_max_prob' -> 'augrc_one_minus_max_prob' (the confidence is minus the score)."""
    return f"{metric}_{score}"


def ood_table(runs):
    """The OOD results in long form, one row per (run, score, OOD set): run_id, method, variant,
    seed, candidate_of (the selections a run is a candidate of), score, ood_set and one column per
    metric (the shape OpenOOD's evaluator returns)."""
    ids = ["run_id", "method", "variant", "seed", "candidate_of"]
    keys = [*ids, "score", "ood_set"]
    columns = {c: read_ood_column(c) for c in runs.columns}
    columns = {c: parsed for c, parsed in columns.items() if parsed and parsed[1] != PRIMARY}
    if runs.empty or not columns:
        return pd.DataFrame(columns=keys + list(OOD_METRICS))
    runs = runs.assign(candidate_of=runs["candidate_of"].fillna("") if "candidate_of" in runs else "")
    long = runs[[*ids, *columns]].melt(id_vars=ids, var_name="column").dropna(subset=["value"])
    parsed = long["column"].map(columns)
    long = long.assign(metric=parsed.str[0], score=parsed.str[1], ood_set=parsed.str[2])
    table = long.pivot_table(index=keys, columns="metric", values="value", sort=False).reset_index()
    table.columns.name = None
    table = table.sort_values(["method", "variant", "seed", "score", "ood_set"], kind="stable")
    return table[keys + [m for m in OOD_METRICS if m in table]].reset_index(drop=True)
