"""A star design's analysis: ``star_design.csv`` (bench.design.star) and the runs turned into one
tidy table: per setting and method each metric's mean, sd and n over seeds, the checkpoint counts
of methods with a checkpoint rule, and each method's paired difference to the reference method
(the deep ensemble) of the same setting, with its 95 % t-interval (``bench.reporting.paired``);
its per-setting summary (star_summary.csv, star.md) and forest plot."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.design.star import read_design
from bench.evaluation.catalog import ID_ACC, STAR, STAR_PAIRED, Metric, shown_in
from bench.evaluation.columns import ood_column, scored_sets
from bench.evaluation import scores as score_registry
from bench.reporting.paired import pair
from bench.config import REFERENCE_METHOD
from bench.store import write_csv


TIDY_COLUMNS = ["setting", "choice", "is_base", "kind", "method", "label", "reference", "metric", "ood_set",
                "score", "compared", "n", "mean", "sd", "low", "high", "real", "total", "out_of", "note"]


def star_table(design: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The tidy table of a star design (TIDY_COLUMNS): kind 'value' (a method's metric: mean, sd,
    n over seeds; AUROC per OOD set and score, ``compared`` marking the score the comparison
    reads), 'checkpoint' (members whose checkpoint rule kept an epoch, ``total`` of ``out_of``,
    and members restored to an earlier epoch than their last) and 'paired' (the method minus the
    reference method of the same setting, seed by seed: mean and 95 % t-interval). The metrics are
    the catalog's (STAR, STAR_PAIRED); a per-OOD-set one against each set."""
    rows: list[dict] = []
    by_id = runs.drop_duplicates("run_id").set_index("run_id", drop=False) if len(runs) else runs
    for _, part in design.groupby("order", sort=True):
        first = part.iloc[0]
        head = {"setting": first["setting"], "choice": first["choice"], "is_base": _bool(first["is_base"])}
        frames = {m: by_id.loc[by_id.index.intersection(g["run_id"])] for m, g in part.groupby("method", sort=False)}
        found = [f for f in frames.values() if len(f)]
        chosen = {m: first["score"] or (f["primary_score"].iloc[0] if len(f) else "") for m, f in frames.items()}
        sets = scored_sets(pd.concat(found), added=False) if found else []
        for method, frame in frames.items():
            if frame.empty:  # no record yet: the setting keeps its line, with nothing in it
                rows.append({**head, "kind": "value", "method": method, "metric": ID_ACC.name, "n": 0,
                             "note": "no finished record"})
                continue
            ok = frame[frame["status"] == "ok"]
            ident = {**head, "method": method, "label": frame["label"].iloc[0]}
            scores = list(dict.fromkeys([*score_registry.shared(), frame["primary_score"].iloc[0]]))
            for metric in shown_in(STAR):
                rows += _value_rows(ident, ok, metric, sets, scores, chosen[method])
            rows += _checkpoint_rows(ident, ok)
        reference = frames.get(REFERENCE_METHOD)
        if reference is None:
            continue
        for method, frame in frames.items():
            if method == REFERENCE_METHOD:
                continue
            ident = {**head, "kind": "paired", "method": method, "reference": REFERENCE_METHOD,
                     "label": frame["label"].iloc[0] if len(frame) else ""}
            caveat = _loss_caveat(frame, reference)
            for metric in shown_in(STAR_PAIRED):
                rows += _paired_rows(ident, frame, reference, metric, sets,
                                     (chosen[method], chosen[REFERENCE_METHOD]), caveat)
    table = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    return table


def _value_rows(ident: dict, ok: pd.DataFrame, metric: Metric, sets: list[str], scores: list[str],
                chosen: str) -> list[dict]:
    """A method's value rows of one metric: mean, sd and n over its finished seeds; a per-OOD-set
    metric per set and score (those in the records), ``compared`` marking the chosen score."""
    if not metric.per_ood_set:
        return [{**ident, "kind": "value", "metric": metric.name, **_stats(ok, metric.name)}]
    return [{**ident, "kind": "value", "metric": metric.name, "ood_set": ood_set, "score": score,
             "compared": score == chosen, **_stats(ok, column)}
            for ood_set in sets for score in scores
            if (column := ood_column(metric.ood_metric, score, ood_set)) in ok]


def _paired_rows(ident: dict, frame: pd.DataFrame, reference: pd.DataFrame, metric: Metric, sets: list[str],
                 chosen: tuple[str, str], caveat: str) -> list[dict]:
    """The method against the reference method on one metric, seed by seed; a per-OOD-set metric
    per set, each by its chosen score (``chosen``: the method's, the reference's)."""
    if not metric.per_ood_set:
        result = _paired(pair(frame, reference, metric.name))
        return [{**ident, "metric": metric.name, **result, "note": "; ".join(n for n in (caveat, result["note"]) if n)}]
    rows = []
    for ood_set in sets:
        own, theirs = (ood_column(metric.ood_metric, score, ood_set) for score in chosen)
        missing = [c for c, f in ((own, frame), (theirs, reference)) if c not in f]
        result = _paired(pair(frame, reference, own, theirs))
        note = "; ".join(n for n in (caveat, result["note"], f"no column {', '.join(missing)} in the records "
                                     "(bench evaluate adds new scores)" if missing else "") if n)
        rows.append({**ident, "metric": metric.name, "ood_set": ood_set, "compared": True,
                     "score": chosen[0] if chosen[0] == chosen[1] else f"{chosen[0]} - {chosen[1]}",
                     **result, "note": note})
    return rows


def _loss_caveat(frame: pd.DataFrame, reference: pd.DataFrame) -> str:
    """A note when the method and its reference trained on different losses."""
    losses = [f["loss"].dropna().iloc[0] if "loss" in f and f["loss"].notna().any() else "ce"
              for f in (frame, reference)]
    return "" if losses[0] == losses[1] else f"the method trained on {losses[0]}, its reference on {losses[1]}"


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1")


def _stats(frame: pd.DataFrame, column: str) -> dict:
    values = frame[column].astype(float).dropna() if column in frame else pd.Series(dtype=float)
    return {"n": len(values), "mean": values.mean() if len(values) else math.nan,
            "sd": values.std() if len(values) > 1 else math.nan}


def _paired(result: dict) -> dict:
    return {"n": result["n"], "mean": result["mean"], "low": result["low"], "high": result["high"],
            "real": result["real"], "note": result["note"]}


def _members(text: Any) -> list[int]:
    return [int(v) for v in str(text).split()] if isinstance(text, str) and text.strip() else []


def _checkpoint_rows(ident: dict, ok: pd.DataFrame) -> list[dict]:
    """For a method with a checkpoint rule: members whose rule kept an epoch (the rule fired at
    least once), and members restored to an epoch before their last (the rule changed the weights)."""
    if ok.empty or "checkpoint" not in ok or (ok["checkpoint"].astype(str) == "none").all():
        return []
    kept = [_members(v) for v in ok["kept_epochs"]]
    last = [_members(v) for v in ok["epochs_run"]]
    fired = [sum(k > 0 for k in ks) for ks in kept]
    earlier = [sum(0 < k < e for k, e in zip(ks, es)) for ks, es in zip(kept, last)]
    members = sum(len(ks) for ks in kept)
    return [{**ident, "kind": "checkpoint", "metric": name, "n": len(counts), "mean": float(np.mean(counts)),
             "sd": float(np.std(counts, ddof=1)) if len(counts) > 1 else math.nan, "total": int(sum(counts)),
             "out_of": members}
            for name, counts in (("members_checkpoint_kept", fired), ("members_restored_earlier", earlier))]


def setting_summary(table: pd.DataFrame, reference: str = REFERENCE_METHOD) -> pd.DataFrame:
    """One row per (setting, compared method, OOD set): both methods' AUROC by the compared score,
    the paired difference with its interval, how each method moved from the base, the reference's
    predictive-entropy AUROC, the accuracy difference and the checkpoint counts."""
    rows = []
    paired = table[(table["kind"] == "paired") & (table["metric"] == "auroc")]
    # the first OOD set of each setting's protocol (a setting may change the ID dataset, and with it the set)
    first = ~paired.duplicated(["setting", "method"])
    for (_, p), is_first in zip(paired.iterrows(), first):
        at = table[table["setting"] == p["setting"]]
        base = table[table["is_base"].astype(bool)]

        def value(frame, method, score=None):
            v = frame[(frame["kind"] == "value") & (frame["method"] == method) & (frame["metric"] == "auroc")
                      & (frame["ood_set"] == p["ood_set"])]
            v = v[v["score"] == score] if score else v[v["compared"].astype(bool)]
            return float(v["mean"].iloc[0]) if len(v) else math.nan

        def acc(frame):
            v = frame[(frame["kind"] == "paired") & (frame["method"] == p["method"]) & (frame["metric"] == "id_acc")]
            return v.iloc[0] if len(v) else None

        base_p = paired[paired["is_base"].astype(bool) & (paired["method"] == p["method"])
                        & (paired["ood_set"] == p["ood_set"])]
        base_mean = float(base_p["mean"].iloc[0]) if len(base_p) else math.nan
        fired = at[(at["kind"] == "checkpoint") & (at["method"] == p["method"])
                   & (at["metric"] == "members_checkpoint_kept")]
        earlier = at[(at["kind"] == "checkpoint") & (at["method"] == p["method"])
                     & (at["metric"] == "members_restored_earlier")]
        a = acc(at)
        rows.append({
            "setting": p["setting"], "choice": p["choice"], "is_base": bool(p["is_base"]), "method": p["method"],
            "reference": reference, "ood_set": p["ood_set"], "first_set": bool(is_first), "score": p["score"],
            "n": p["n"],
            f"auroc_{reference}": value(at, reference), f"auroc_{p['method']}": value(at, p["method"]),
            "difference": p["mean"], "low": p["low"], "high": p["high"], "real": bool(p["real"]),
            "same_sign_as_base": bool(np.sign(p["mean"]) == np.sign(base_mean)) if not math.isnan(base_mean) else None,
            f"{reference}_moved": value(at, reference) - value(base, reference),
            f"{p['method']}_moved": value(at, p["method"]) - value(base, p["method"]),
            f"{reference}_pred_entropy_auroc": value(at, reference, score_registry.PRED_ENTROPY),
            "acc_difference": a["mean"] if a is not None else math.nan,
            "acc_low": a["low"] if a is not None else math.nan, "acc_high": a["high"] if a is not None else math.nan,
            "checkpoint_kept": f"{int(fired['total'].iloc[0])}/{int(fired['out_of'].iloc[0])}" if len(fired) else "",
            "restored_earlier": f"{int(earlier['total'].iloc[0])}/{int(earlier['out_of'].iloc[0])}" if len(earlier) else "",
            "note": p["note"] if isinstance(p["note"], str) else ""})
    return pd.DataFrame(rows)


def _signed(value: float, digits: int = 3) -> str:
    return "" if pd.isna(value) else f"{value:+.{digits}f}"


def format_star_summary(summary: pd.DataFrame) -> str:
    """The setting summary as Markdown: per compared method, a table against each setting's first
    OOD set, then one against its other sets (if any)."""
    out = []
    for (method, first), part in summary.groupby(["method", "first_set"], sort=False):
        reference = part["reference"].iloc[0]
        sets = "each setting's first OOD set" if first else "the other OOD sets"
        out += [f"### {method} − {reference}: AUROC vs {sets}", "",
                f"| choice | setting | OOD set | score | n | AUROC {reference} | AUROC {method} | Δ AUROC [95 % CI] | "
                f"moved from base ({reference} / {method}) | {reference} entropy AUROC | Δ acc (points) | "
                f"checkpoints kept | restored earlier | note |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in part.iterrows():
            name = f"**{r['setting']}**" if r["is_base"] else r["setting"]
            diff = (f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]" + (" *" if r["real"] else "")
                    if not pd.isna(r["low"]) else "-" if pd.isna(r["difference"]) else f"{r['difference']:+.3f}")
            moved = ("" if r["is_base"] or pd.isna(r[f"{reference}_moved"])
                     else f"{_signed(r[f'{reference}_moved'])} / {_signed(r[f'{method}_moved'])}")
            acc = _signed(ID_ACC.scale * r["acc_difference"], ID_ACC.digits)
            out.append(f"| {r['choice']} | {name} | {r['ood_set']} | {r['score']} | {r['n']} | {r[f'auroc_{reference}']:.3f} | "
                       f"{r[f'auroc_{method}']:.3f} | {diff} | {moved} | {r[f'{reference}_pred_entropy_auroc']:.3f} | "
                       f"{acc} | {r['checkpoint_kept']} | {r['restored_earlier']} | {r['note']} |")
        out.append("")
    return "\n".join(out)


def write_star(out: Path, runs: pd.DataFrame, plots: bool = True, title: str = "") -> list[Path]:
    """OUT/star.csv (tidy), OUT/star_summary.csv and OUT/star.md (one row per setting) and, unless
    not ``plots``, OUT/star_forest.png, from OUT/star_design.csv and the folder's runs."""
    out = Path(out)
    table = star_table(read_design(out), runs)
    summary = setting_summary(table)
    write_csv(table, out / "star.csv")
    write_csv(summary, out / "star_summary.csv")
    (out / "star.md").write_text(f"# {title or 'Star design'}\n\nOne choice changed at a time from the base "
                                 "(bold); Δ: paired over seeds, 95 % t-interval, * when it excludes 0. "
                                 "Checkpoints kept: members whose checkpoint rule kept an epoch; restored earlier: "
                                 "members whose kept epoch is before their last.\n\n" + format_star_summary(summary))
    files = [out / "star.csv", out / "star_summary.csv", out / "star.md"]
    if plots:  # the figure modules import matplotlib: only when a figure is drawn
        from bench.reporting.figures import record_figures
        from bench.reporting.forest_plots import star_forest
        forest = star_forest(out / "star_forest.png", title or "star design", summary)
        figures = [forest] if forest else []  # none when the summary has no row
        record_figures(out, "star", figures)
        files += figures
    return files
