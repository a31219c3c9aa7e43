"""The metric catalog: every metric a table or figure shows, declared once. A Metric says what its
column is (or, for a per-OOD-set metric, how bench.evaluation.columns makes it from the set and a
score), how it is worded, scaled and rounded, which direction is better, which views show it and
where, and, for a metric computed from a split's predictions, how. The report, the paired
statistics, the forest plots, the shift, star and ablation tables read their metrics from here;
the evaluation computes every registered metric that has a ``compute``.

``register(Metric(...))`` adds one (the built-ins below are registered the same way); a name is
registered once. A registered metric with ``compute`` is in every new run's record, so in
runs.csv and summary.csv; ``shows={PAIRED: 6, FOREST: 6}`` puts it in paired.csv and forest.png.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

import numpy as np

from bench.errors import ConfigError
from bench.evaluation.calibration import ECE_BINS, binned_ece, ece, left_closed_ece
from bench.evaluation.columns import OOD_METRICS, PRIMARY, ood_column, score_key, selective_column, uncertainty_column
from bench.evaluation.measures import NLL_CLAMP, accuracy, brier, entropy_bits, nll, uncertainty_decomposition
from bench.evaluation.scores import MAX_PROB, MUTUAL_INFO, PRED_ENTROPY
from bench.evaluation.selective import selective_metrics

UB_ECE_BINS = 10  # uncertainty-baselines' calibration error (bench/published/ub_lenet5.toml)
HIGHER, LOWER = "higher", "lower"  # which direction of a metric is better

# The views: where a metric is shown. A metric's ``shows`` maps each of its views to its position
# there (the views order their metrics by position, then by registration).
SUMMARY = "summary"              # the printed summary and summary.md: mean ± sd per row
PAIRED = "paired"                # paired.csv and summary.md's paired differences (bench.reporting.paired)
FOREST = "forest"                # forest.png: a panel per paired metric
ABLATION = "ablation"            # ablation.csv and the panels of the ablation plots (a per-set metric: the first set)
COMPARISON = "comparison"        # comparison.png: a strip-plot panel per metric
STAR = "star"                    # star.csv's value rows (a per-set metric: per set and score)
STAR_PAIRED = "star_paired"      # star.csv's paired rows: the method against the reference method
SHIFT_SUMMARY = "shift_summary"  # the MNIST-C rows of shift_summary.csv, summary.md's shift table, shift_paired.csv
SHIFT_CLEAN = "shift_clean"      # the clean rows of shift_summary.csv (a shift metric read from its clean column)
SHIFT_TABLE = "shift_table"      # the columns of shift_table.csv (each shift at its table level)
SHIFT_CURVES = "shift_curves"    # shift_curves.png: a panel per metric
VIEWS = (SUMMARY, PAIRED, FOREST, ABLATION, COMPARISON, STAR, STAR_PAIRED, SHIFT_SUMMARY, SHIFT_CLEAN,
         SHIFT_TABLE, SHIFT_CURVES)
DELTA_VIEWS = (PAIRED, FOREST)                    # worded by the delta label
FIGURE_VIEWS = (ABLATION, COMPARISON, SHIFT_CURVES)  # worded by the long label

Compute = Callable[[np.ndarray, np.ndarray], float]  # (probabilities (S, N, K) float64, labels (N,)) -> value
# (a run's cached arrays, predictions/<run_id>.npz, and the indices of test samples drawn) -> value
FromCache = Callable[[dict, np.ndarray], float]


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str                 # the record's and runs.csv's column (shift.csv's for a shift metric)
    label: str                # tables: 'ID acc'; '{set}' stands for the OOD set of a per-set metric
    long_label: str = ""      # figure panels: 'ID accuracy' ('' = label)
    delta_label: str = ""     # paired differences: '' = 'Δ ' + label
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)  # a view that words it otherwise
    scale: float = 1          # shown × scale: 100 shows a fraction in % (its differences in points)
    digits: int = 3
    better: str | None = None  # HIGHER, LOWER, or None where neither is (an entropy, a weight size)
    shows: Mapping[str, int] = dataclasses.field(default_factory=dict)  # view -> position in it
    compute: Compute | None = None  # from a split's predictions; None: recorded elsewhere (its registration says where)
    from_cache: FromCache | None = None  # again from a run's cached arrays, on resampled test samples (bootstrap)
    val_column: str = ""      # also computed on the validation split, as this column
    ood_metric: str = ""      # a per-OOD-set metric: its columns.OOD_METRICS name
    score: str = PRIMARY      # a per-OOD-set metric: the score it ranks by (PRIMARY: each run's own)
    first_sets: int | None = None  # a per-OOD-set metric: shown against this many of a protocol's sets (None: all)
    shift: bool = False       # a shift-suite metric: one value per run, shift and level (shift.csv)
    clean: str = ""           # a shift metric: the column of the same metric on the clean test split

    @property
    def per_ood_set(self) -> bool:
        return bool(self.ood_metric)

    def title(self, view: str, ood_set: str = "") -> str:
        """How ``view`` words this metric (against ``ood_set``)."""
        if view in self.labels:
            text = self.labels[view]
        elif view in DELTA_VIEWS:
            text = self.delta_label or f"Δ {self.label}"
        elif view in FIGURE_VIEWS:
            text = self.long_label or self.label
        else:
            text = self.label
        return text.replace("{set}", ood_set)

    def score_for(self, primary_score: str) -> str:
        """The score a per-OOD-set metric ranks a run by: the run's primary score, unless the metric
        ranks by a score of its own."""
        return primary_score if self.score == PRIMARY else self.score

    def column(self, score: str = PRIMARY, ood_set: str = "") -> str:
        """The column of a run's value: its name, or for a per-OOD-set metric the column against
        ``ood_set`` by ``score`` (a run's primary score, or PRIMARY for columns.with_primary's),
        unless the metric ranks by a score of its own."""
        if not self.per_ood_set:
            return self.name
        return ood_column(self.ood_metric, self.score_for(score), ood_set)

    def sets(self, sets: list[str]) -> list[str]:
        """The OOD sets it is shown against, of a protocol's ``sets`` ([''] for a metric of no set)."""
        return list(sets[:self.first_sets]) if self.per_ood_set else [""]


CATALOG: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add a metric to the catalog: every later evaluation computes it (with ``compute``) and the views in
    its ``shows`` show it. A name is registered once."""
    if metric.name in CATALOG:
        raise ConfigError(f"a metric named {metric.name!r} is registered already")
    unknown = [v for v in metric.shows if v not in VIEWS]
    if unknown:
        raise ConfigError(f"metric {metric.name!r}: no view named {', '.join(map(repr, unknown))} "
                          f"(views: {', '.join(VIEWS)})")
    if metric.ood_metric and metric.ood_metric not in OOD_METRICS:
        raise ConfigError(f"metric {metric.name!r}: {metric.ood_metric!r} is none of {', '.join(OOD_METRICS)}")
    if metric.better not in (HIGHER, LOWER, None):
        raise ConfigError(f"metric {metric.name!r}: better is {HIGHER!r}, {LOWER!r} or None, not {metric.better!r}")
    CATALOG[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    """Remove a registered metric (a test's, or a plugin's)."""
    CATALOG.pop(name, None)


def get(name: str) -> Metric:
    if name not in CATALOG:
        raise ConfigError(f"no metric named {name!r} in the catalog")
    return CATALOG[name]


def shown_in(view: str) -> list[Metric]:
    """The metrics ``view`` shows, in its order."""
    order = list(CATALOG)
    return sorted((m for m in CATALOG.values() if view in m.shows), key=lambda m: (m.shows[view], order.index(m.name)))


def computed(shift: bool = False) -> list[Metric]:
    """The metrics computed from a split's predictions: a run's (or, with ``shift``, a shifted test set's)."""
    return [m for m in CATALOG.values() if m.compute is not None and m.shift == shift]


def clean_columns() -> dict[str, str]:
    """Each shift metric's clean column -> its name (the clean split as level 0 of a shift)."""
    return {m.clean: m.name for m in CATALOG.values() if m.shift and m.clean}


# -- how the built-in metrics are computed: from the members' probabilities (S, N, K) and the labels --

def mean_accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return accuracy(probs.mean(axis=0), labels)


def mean_nll(probs: np.ndarray, labels: np.ndarray) -> float:
    return nll(probs.mean(axis=0), labels)


def mean_brier(probs: np.ndarray, labels: np.ndarray) -> float:
    return brier(probs.mean(axis=0), labels)


def mean_ece(probs: np.ndarray, labels: np.ndarray) -> float:
    return ece(probs.mean(axis=0), labels)


def mean_ece_10_bins(probs: np.ndarray, labels: np.ndarray) -> float:
    """The ECE with 10 equal-width bins (lo, hi] on every image. uncertainty-baselines' tables bin as
    ``mean_ece_ub`` does (bench/published/ub_lenet5.toml)."""
    return ece(probs.mean(axis=0), labels, UB_ECE_BINS)


def mean_ece_ub(probs: np.ndarray, labels: np.ndarray) -> float:
    """The ECE with 10 bins as uncertainty-baselines' utils.calibration computes it: bins [lo, hi) on the
    float32 confidence, so a confidence of exactly 1.0 falls in no bin and is left out."""
    mean = probs.mean(axis=0)
    return left_closed_ece(mean.max(axis=1), mean.argmax(axis=1) == labels, UB_ECE_BINS)


def mean_pred_entropy(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean predictive entropy (bits): the entropy of the mean prediction, averaged over samples."""
    return float(entropy_bits(probs.mean(axis=0)).mean())


def mean_mutual_info(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(uncertainty_decomposition(probs)["mutual_info"].mean())


def max_prob_augrc(probs: np.ndarray, labels: np.ndarray) -> float:
    """The AUGRC of abstaining by the maximum mean probability (bench.evaluation.selective)."""
    mean = probs.mean(axis=0)
    return selective_metrics(mean.max(axis=1), mean.argmax(axis=1) != labels)["augrc"]


# -- and again from a run's cached arrays (float32), on the test samples ``idx`` (nan without what it needs) --

def _errors(arrays: dict, idx: np.ndarray) -> np.ndarray:
    return (arrays["id_pred"] != arrays["id_label"])[idx]


def cached_accuracy(arrays: dict, idx: np.ndarray) -> float:
    return float((~_errors(arrays, idx)).mean())


def cached_nll(arrays: dict, idx: np.ndarray) -> float:
    if "id_p_true" not in arrays:  # cached before dare-bench 0.3.0
        return math.nan
    return float(-np.log(np.clip(arrays["id_p_true"][idx].astype(np.float64), NLL_CLAMP, None)).mean())


def cached_ece(arrays: dict, idx: np.ndarray) -> float:
    return binned_ece(arrays["id_conf"][idx].astype(np.float64), ~_errors(arrays, idx), ECE_BINS)


def cached_ece_10_bins(arrays: dict, idx: np.ndarray) -> float:
    return binned_ece(arrays["id_conf"][idx].astype(np.float64), ~_errors(arrays, idx), UB_ECE_BINS)


def cached_ece_ub(arrays: dict, idx: np.ndarray) -> float:
    return left_closed_ece(arrays["id_conf"][idx], ~_errors(arrays, idx), UB_ECE_BINS)


def cached_augrc(arrays: dict, idx: np.ndarray) -> float:
    return selective_metrics(-arrays[score_key(MAX_PROB)][idx].astype(np.float64),
                             _errors(arrays, idx).astype(np.float64))["augrc"]


# -- the built-in metrics -------------------------------------------------------------------------

# a run's, on the ID test split (and two of them on the validation split, which the selection walks read)
ID_ACC = register(Metric(
    "id_acc", "ID acc", "ID accuracy", labels={COMPARISON: "ID test accuracy"}, scale=100, digits=2, better=HIGHER,
    shows={SUMMARY: 1, PAIRED: 1, FOREST: 1, ABLATION: 1, COMPARISON: 1, STAR: 1, STAR_PAIRED: 2},
    compute=mean_accuracy, val_column="val_acc", from_cache=cached_accuracy))
register(Metric(
    "id_nll_nats", "NLL (nats)", "ID NLL (nats)", delta_label="Δ NLL", better=LOWER,
    shows={SUMMARY: 2, PAIRED: 2, FOREST: 2, ABLATION: 2, STAR: 2, STAR_PAIRED: 3},
    compute=mean_nll, val_column="val_nll_nats", from_cache=cached_nll))
register(Metric("id_brier", "Brier", "ID Brier score", better=LOWER, compute=mean_brier))
register(Metric(
    "id_ece", "ECE", "ID ECE (15 bins)", better=LOWER,
    shows={SUMMARY: 3, PAIRED: 3, FOREST: 3, ABLATION: 3, COMPARISON: 4, STAR: 3}, compute=mean_ece,
    from_cache=cached_ece))
register(Metric("id_ece_10_bins", "ECE (10 bins)", "ID ECE (10 bins)", better=LOWER, compute=mean_ece_10_bins,
                from_cache=cached_ece_10_bins))
register(Metric("id_ece_10_bins_ub", "ECE (UB's 10 bins)", "ID ECE (uncertainty-baselines' 10 bins)", better=LOWER,
                compute=mean_ece_ub, from_cache=cached_ece_ub))

# per OOD set: computed against each set by every score (bench.evaluation.metrics); shown by each run's own
register(Metric(
    "auroc", "AUROC vs {set}", "AUROC vs {set}\n(each method's score)", better=HIGHER, ood_metric="auroc",
    shows={SUMMARY: 4, PAIRED: 4, FOREST: 4, ABLATION: 5, COMPARISON: 2, STAR: 4, STAR_PAIRED: 1}))
register(Metric("aupr_in", "AUPR-In vs {set}", better=HIGHER, ood_metric="aupr_in"))
register(Metric("aupr_out", "AUPR-Out vs {set}", better=HIGHER, ood_metric="aupr_out"))
register(Metric("fpr95", "FPR@95 vs {set}", better=LOWER, ood_metric="fpr95", shows={SUMMARY: 5}))
# how much of the detection comes from the members' disagreement, against the first set
register(Metric(
    "auroc_mutual_info", "AUROC vs {set} by mutual information", "AUROC vs {set}\n(mutual information)",
    better=HIGHER, ood_metric="auroc", score=MUTUAL_INFO, first_sets=1, shows={COMPARISON: 3}))

# recorded elsewhere: the selective metrics from the cached arrays (bench.evaluation.selective),
# the training time and weight size by the runner
register(Metric(
    selective_column("augrc", MAX_PROB), "AUGRC", "ID AUGRC\n(max probability)", digits=4, better=LOWER,
    shows={SUMMARY: 6, PAIRED: 5, FOREST: 5, ABLATION: 4}, from_cache=cached_augrc))
register(Metric("train_seconds", "train s", "training time (s)", digits=1, better=LOWER, shows={SUMMARY: 7}))
register(Metric("param_abs_mean", "mean |θ|", "mean |θ| (kept weights)", shows={ABLATION: 6}))

# the shift suite's, per run, shift and level (``bench evaluate``; in this order in shift.csv)
register(Metric(
    "acc", "acc", "accuracy", scale=100, digits=1, better=HIGHER, shift=True, clean="id_acc", compute=mean_accuracy,
    shows={SHIFT_SUMMARY: 1, SHIFT_CLEAN: 1, SHIFT_TABLE: 1, SHIFT_CURVES: 1}))
register(Metric(
    "nll_nats", "NLL", "NLL (nats)", better=LOWER, shift=True, clean="id_nll_nats", compute=mean_nll,
    shows={SHIFT_SUMMARY: 2, SHIFT_CLEAN: 2, SHIFT_TABLE: 2, SHIFT_CURVES: 2}))
register(Metric(
    "brier", "Brier", "Brier score", better=LOWER, shift=True, clean="id_brier", compute=mean_brier,
    shows={SHIFT_CLEAN: 7, SHIFT_TABLE: 6}))
register(Metric(
    "ece", "ECE", "ECE (15 bins)", better=LOWER, shift=True, clean="id_ece", compute=mean_ece,
    shows={SHIFT_SUMMARY: 3, SHIFT_CLEAN: 3, SHIFT_TABLE: 3, SHIFT_CURVES: 3}))
register(Metric(
    "pred_entropy_bits", "entropy (bits)", "predictive entropy (bits)", shift=True,
    clean=uncertainty_column(PRED_ENTROPY), compute=mean_pred_entropy,
    shows={SHIFT_SUMMARY: 5, SHIFT_CLEAN: 5, SHIFT_TABLE: 5, SHIFT_CURVES: 5}))
register(Metric(
    "mutual_info_bits", "mutual information (bits)", shift=True, clean=uncertainty_column(MUTUAL_INFO),
    compute=mean_mutual_info, shows={SHIFT_CLEAN: 6, SHIFT_TABLE: 7, SHIFT_CURVES: 6}))
register(Metric(
    "augrc", "AUGRC", digits=4, better=LOWER, shift=True, clean=selective_column("augrc", MAX_PROB),
    compute=max_prob_augrc, shows={SHIFT_SUMMARY: 4, SHIFT_CLEAN: 4, SHIFT_TABLE: 4, SHIFT_CURVES: 4}))
# a property of the shifted images, the same for every run (bench.execution.rescoring)
register(Metric("dead_pixels_lit", "dead pixels lit (%)", scale=100, digits=0, shift=True, shows={SHIFT_TABLE: 8}))
