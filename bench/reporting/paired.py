"""Paired comparisons: each row of a table against a reference row of the same protocol, seed by
seed. Rows trained on the same seeds share the seed's split, initial streams and data order, so
their difference per seed removes the seed-to-seed noise that both rows share.

For a metric, the paired difference of row A to reference R is d_s = A_s - R_s over the seeds s
that both finished (status ok). Reported: the number of pairs n, the mean difference, and the 95 %
t-interval mean ± t(0.975, n - 1) * sd(d) / sqrt(n) (Student's t over seeds; it needs n >= 2). A
difference is marked real when its interval excludes 0. With 5 seeds the interval is wide
(t(0.975, 4) = 2.78): it speaks about these seeds' spread, not about other seeds' test sets. An
exact sign test cannot reach p < 0.05 with 5 pairs (its smallest two-sided p is 2/32 = 0.0625), so
none is reported.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from bench.config import REFERENCE_METHOD
from bench.evaluation.catalog import CATALOG, PAIRED, Metric, shown_in
from bench.evaluation.metrics import ood_metrics
from bench.evaluation.columns import score_key
from bench.evaluation.scores import PRED_ENTROPY

LEVEL = 0.95
NO_PREDICTIONS = "no cached predictions"  # how a bootstrap row of a run without predictions/ begins its note


def t_interval(differences: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high) of the mean difference; low and high nan for fewer than 2 pairs."""
    d = np.asarray(differences, dtype=np.float64)
    if len(d) == 0:
        return math.nan, math.nan, math.nan
    mean = float(d.mean())
    if len(d) < 2:
        return mean, math.nan, math.nan
    from scipy import stats  # imported when an interval is computed: not at every command's start
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return mean, mean - half, mean + half


def pair(row: pd.DataFrame, reference: pd.DataFrame, metric: str, reference_metric: str | None = None) -> dict:
    """The paired difference of ``metric`` between two rows' runs (one run per seed each; status ok
    only). ``reference_metric``: the reference's column when it differs (e.g. its own OOD score).
    Returns n, mean, low, high, real and a note on unpaired seeds ('' when every seed pairs)."""
    a = _by_seed(row, metric)
    b = _by_seed(reference, reference_metric or metric)
    seeds = sorted(set(a.index) & set(b.index))
    d = (a.loc[seeds] - b.loc[seeds]).to_numpy() if seeds else np.array([])
    mean, low, high = t_interval(d)
    if a.empty and b.empty:  # e.g. a metric computed from cached predictions that the folder lacks
        return {"n": 0, "mean": mean, "low": low, "high": high, "real": False,
                "note": f"no run of either row has a value of {metric}"}
    only_a, only_b = sorted(set(a.index) - set(b.index)), sorted(set(b.index) - set(a.index))
    note = "; ".join(part for part in (
        f"seeds {_list(only_a)} without a finished reference run with this value" if only_a else "",
        f"reference seeds {_list(only_b)} without a finished run with this value" if only_b else "",
        "fewer than 2 pairs: no interval" if len(seeds) < 2 else "") if part)
    return {"n": len(seeds), "mean": mean, "low": low, "high": high,
            "real": bool(len(seeds) >= 2 and (low > 0 or high < 0)), "note": note}


def _by_seed(runs: pd.DataFrame, metric: str) -> pd.Series:
    ok = runs[(runs.get("status", "ok") == "ok")] if "status" in runs else runs
    if metric not in ok:
        return pd.Series(dtype=float)
    values = ok.set_index("seed")[metric].astype(float).dropna()
    return values[~values.index.duplicated(keep="first")]


def _list(seeds: list) -> str:
    return ", ".join(map(str, seeds))


def paired_metric(metric: Metric, ood_set: str = "") -> str:
    """The paired table's name of a metric: its name, or against one OOD set 'auroc_vs_mnist'."""
    return f"{metric.name}_vs_{ood_set}" if metric.per_ood_set else metric.name


def read_paired_metric(name: str) -> tuple[Metric, str] | None:
    """A paired table's metric name -> (its catalog metric, its OOD set or ''); None when the
    catalog has no such metric."""
    if name in CATALOG and not CATALOG[name].per_ood_set:
        return CATALOG[name], ""
    return next(((m, name[len(m.name) + len("_vs_"):]) for m in CATALOG.values()
                 if m.per_ood_set and name.startswith(f"{m.name}_vs_")), None)


DEFAULT_LOSS = "ce"  # a method without a loss option trains on cross-entropy


def options_of(run: pd.Series, option_names: list[str]) -> dict:
    """A run's method options (those set), with the loss of a method that has none: cross-entropy."""
    out = {k: run[k] for k in option_names if k in run and not pd.isna(run[k])}
    out.setdefault("loss", DEFAULT_LOSS)
    return out


def choose_reference(variant_runs: pd.DataFrame, references: dict[str, pd.DataFrame], option_names: list[str]) -> str:
    """Of the reference rows (variant -> runs), the one whose options agree with this row's on the
    most option names (members, loss, checkpoint, ...); ties go to the first."""
    mine = options_of(variant_runs.iloc[0], option_names)
    def agreement(variant: str) -> int:
        theirs = options_of(references[variant].iloc[0], option_names)
        return sum(1 for k, v in mine.items() if k in theirs and str(theirs[k]) == str(v))
    return max(references, key=agreement)  # max keeps the first of equals


def paired_table(runs: pd.DataFrame, option_names: list[str], sets: list[str],
                 reference: Callable[[pd.DataFrame], bool] | None = None) -> pd.DataFrame:
    """Per row (variant) of one protocol's runs, the paired difference of each paired metric
    (catalog.PAIRED) to its reference row: by default the deep-ensemble row whose options agree most
    (``choose_reference``); the reference rows themselves get none.
    Long form: variant, reference, metric, n, mean, low, high, real, note."""
    if runs.empty:
        return pd.DataFrame(columns=["variant", "reference", "metric", "n", "mean", "low", "high", "real", "note"])
    by_variant = {v: frame for v, frame in runs.groupby("variant", sort=False)}
    is_reference = reference or (lambda frame: frame["method"].iloc[0] == REFERENCE_METHOD)
    references = {v: frame for v, frame in by_variant.items() if is_reference(frame)}
    rows = []
    for variant, frame in by_variant.items():
        if not references or variant in references:  # a reference row is what the others are compared with
            continue
        ref = choose_reference(frame, references, option_names)
        for metric in shown_in(PAIRED):
            for s in metric.sets(sets):  # a per-OOD-set metric: each row by its own score
                own, theirs = (metric.column(f["primary_score"].iloc[0], s) for f in (frame, references[ref]))
                rows.append({"variant": variant, "reference": ref, "metric": paired_metric(metric, s),
                             **pair(frame, references[ref], own, theirs)})
    return pd.DataFrame(rows)


def _cached_metric(name: str, arrays: dict, primary_score: str, id_idx: np.ndarray, ood_idx: dict) -> float:
    """One paired metric of a run on a resample of its cached test predictions (nan when the
    cache lacks what it needs, or the metric has no form on the cache)."""
    metric, ood_set = read_paired_metric(name) or (None, "")
    if metric is not None and metric.per_ood_set:
        score = metric.score_for(primary_score)
        if score_key(score) not in arrays or score_key(score, ood_set) not in arrays:
            return math.nan
        return ood_metrics(arrays[score_key(score)][id_idx],
                           arrays[score_key(score, ood_set)][ood_idx[ood_set]])[metric.ood_metric]
    return metric.from_cache(arrays, id_idx) if metric is not None and metric.from_cache else math.nan


def bootstrap_table(runs: pd.DataFrame, differences: pd.DataFrame, load_arrays, n_boot: int,
                    seed: int = 0) -> pd.DataFrame:
    """For each paired difference (row vs reference) and each seed both finished: the difference on
    the whole test set and its paired bootstrap over test samples (the same resampled ID images, and
    OOD images per set, for both runs; ``n_boot`` resamples from a generator seeded by ``seed``, the
    pair and the seed), as the 2.5 and 97.5 percentiles. This is the test-set noise of one seed's
    difference, beside the seed-to-seed noise of the t-interval."""
    rows = []
    for (variant, reference), frame in differences.groupby(["variant", "reference"], sort=False):
        a_runs = runs[(runs["variant"] == variant) & (runs["status"] == "ok")].set_index("seed")
        b_runs = runs[(runs["variant"] == reference) & (runs["status"] == "ok")].set_index("seed")
        a_runs = a_runs[~a_runs.index.duplicated(keep="first")]
        b_runs = b_runs[~b_runs.index.duplicated(keep="first")]
        for s in sorted(set(a_runs.index) ^ set(b_runs.index)):  # said, not silently dropped
            rows.append({"variant": variant, "reference": reference, "seed": int(s), "metric": "",
                         "resamples": n_boot, "real": False,
                         "note": "no finished run of the " + ("reference" if s in a_runs.index else "row")})
        for s in sorted(set(a_runs.index) & set(b_runs.index)):
            a, b = a_runs.loc[s], b_runs.loc[s]
            try:
                arrays_a, arrays_b = load_arrays(a["run_id"]), load_arrays(b["run_id"])
            except (FileNotFoundError, OSError, ValueError) as exc:
                rows.append({"variant": variant, "reference": reference, "seed": int(s), "metric": "",
                             "resamples": n_boot, "real": False, "note": f"{NO_PREDICTIONS}: {exc}"})
                continue
            n = len(arrays_a["id_label"])
            sets = list(dict.fromkeys(parsed[1] for parsed in map(read_paired_metric, frame["metric"])
                                      if parsed and parsed[1]))
            sizes = {o: len(arrays_a.get(score_key(PRED_ENTROPY, o), [])) for o in sets}
            rng = np.random.default_rng([seed, int(s), *map(ord, f"{variant}|{reference}")])
            draws = [(rng.integers(0, n, n), {o: rng.integers(0, m, m) for o, m in sizes.items()})
                     for _ in range(n_boot)]
            whole = (np.arange(n), {o: np.arange(m) for o, m in sizes.items()})
            for metric in frame["metric"]:
                def diff(idx):
                    return (_cached_metric(metric, arrays_a, a["primary_score"], *idx)
                            - _cached_metric(metric, arrays_b, b["primary_score"], *idx))
                observed = diff(whole)
                boot = np.array([diff(d) for d in draws]) if not math.isnan(observed) else np.array([math.nan])
                low, high = (np.percentile(boot, [2.5, 97.5]) if np.isfinite(boot).all() else (math.nan, math.nan))
                missing = _missing_note(metric)
                rows.append({"variant": variant, "reference": reference, "seed": int(s), "metric": metric,
                             "difference": observed, "low": float(low), "high": float(high),
                             "real": bool(low > 0 or high < 0), "resamples": n_boot,
                             "note": "" if not math.isnan(observed) else missing})
    return pd.DataFrame(rows, columns=["variant", "reference", "seed", "metric", "difference", "low", "high",
                                       "real", "resamples", "note"])


def _missing_note(name: str) -> str:
    """Why a paired metric has no value on the cached predictions."""
    metric = (read_paired_metric(name) or (None, ""))[0]
    if metric is None or not (metric.per_ood_set or metric.from_cache):
        return "the cached predictions hold no form of this metric"
    if metric.name == "id_nll_nats":
        return "no id_p_true in the cached predictions (cached before dare-bench 0.3.0)"
    return "a score this metric needs is not in the cached predictions"
