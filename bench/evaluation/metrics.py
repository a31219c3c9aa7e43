"""Evaluators: (samples, N, classes) probabilities -> metrics. Pure numpy, float64.

Conventions (README "Metric conventions"): member *probabilities* are averaged (never logits);
entropies are in bits; NLL in nats; OOD is the positive class and a higher score means more OOD.
"""
from __future__ import annotations

import numpy as np

from bench.evaluation import catalog
from bench.evaluation.columns import ood_column, uncertainty_column
from bench.evaluation import scores
from bench.evaluation.measures import uncertainty_decomposition


def ood_metrics(score_id: np.ndarray, score_ood: np.ndarray) -> dict[str, float]:
    """AUROC, AUPR-In, AUPR-Out and FPR at 95% TPR, with OOD as the positive class."""
    # imported here: scikit-learn (and the scipy it loads) is about a second of every command's start
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
    y = np.r_[np.zeros(len(score_id)), np.ones(len(score_ood))]
    s = np.r_[score_id, score_ood].astype(np.float64)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return {
        "auroc": float(roc_auc_score(y, s)),
        "aupr_in": float(average_precision_score(1 - y, -s)),   # ID positive, low score = ID
        "aupr_out": float(average_precision_score(y, s)),
        # fraction of ID flagged at the first threshold that catches >= 95% of OOD
        "fpr95": float(fpr[np.searchsorted(tpr, 0.95, side="left")]),
    }


def ood_scores(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Every shared OOD score (bench.evaluation.scores; higher = more OOD) of (S, N, K) probabilities, per sample."""
    probs = np.asarray(probs, dtype=np.float64)
    return {name: scores.SCORES[name].compute(probs) for name in scores.shared()}


def prediction_metrics(probs: np.ndarray, labels: np.ndarray, validation: bool = False) -> dict[str, float]:
    """Every registered run-level metric with a ``compute`` (bench.evaluation.catalog) of one split's
    (S, N, K) probabilities: the test split's under their names; with ``validation``, those that
    declare a validation column, under it."""
    probs = np.asarray(probs, dtype=np.float64)
    if validation:
        return {m.val_column: m.compute(probs, labels) for m in catalog.computed() if m.val_column}
    return {m.name: m.compute(probs, labels) for m in catalog.computed()}


def shift_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """One shifted test set's registered shift metrics (bench.evaluation.catalog, ``shift``): accuracy,
    NLL, Brier and ECE of the mean prediction, mean predictive entropy and mutual information (bits),
    and the AUGRC of abstaining by the maximum mean probability."""
    probs = np.asarray(probs, dtype=np.float64)
    return {m.name: m.compute(probs, labels) for m in catalog.computed(shift=True)}


def run_metrics(probs_id: np.ndarray, labels_id: np.ndarray, probs_ood: dict[str, np.ndarray],
                probs_val: np.ndarray | None = None, labels_val: np.ndarray | None = None,
                own_id: dict[str, np.ndarray] | None = None,
                own_ood: dict[str, dict[str, np.ndarray]] | None = None):
    """One run's metrics as a flat dict, plus the per-sample scores for plots.

    probs_ood maps each OOD set's name to its (S, N, K) probabilities. own_id / own_ood[set] are a
    method's own per-sample scores (name -> (N,)), ranked like the shared ones. Columns:
    ``id_acc`` ..., ``ood_<set>_<uncertainty>_bits``, ``<auroc|aupr_in|aupr_out|fpr95>_<score>_vs_<set>``.
    Returns (metrics, scores) with scores[score] = (id_scores, {set: ood_scores}).
    """
    metrics = prediction_metrics(probs_id, labels_id)
    if probs_val is not None and len(labels_val):
        metrics.update(prediction_metrics(probs_val, labels_val, validation=True))
    for name, values in uncertainty_decomposition(probs_id).items():
        metrics[uncertainty_column(name)] = float(values.mean())
    for ood_set, probs in probs_ood.items():
        for name, values in uncertainty_decomposition(probs).items():
            metrics[uncertainty_column(name, ood_set)] = float(values.mean())
    id_scores = {**ood_scores(probs_id), **(own_id or {})}
    set_scores = {ood_set: {**ood_scores(probs), **(own_ood or {}).get(ood_set, {})}
                  for ood_set, probs in probs_ood.items()}
    for score, s_id in id_scores.items():
        for ood_set, s_ood in set_scores.items():
            for metric, value in ood_metrics(s_id, s_ood[score]).items():
                metrics[ood_column(metric, score, ood_set)] = value
    scores = {score: (s_id, {ood_set: s[score] for ood_set, s in set_scores.items()})
              for score, s_id in id_scores.items()}
    return metrics, scores
