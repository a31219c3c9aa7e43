"""Evaluators: (samples, N, classes) probabilities -> metrics. Pure numpy, float64.

Conventions (README "Metric conventions"): member *probabilities* are averaged (never logits);
entropies are in bits; NLL in nats; OOD is the positive class and a higher score means more OOD.
"""
from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from bench.evaluation.calibration import ece
from bench.evaluation.columns import ood_column, uncertainty_column
from bench.evaluation.selective import selective_metrics

NLL_CLAMP = 1e-12  # probabilities are clamped before the log so one confident mistake stays finite


# -- the contract a method's predictions must meet before any metric is computed -------------


def entropy_bits(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in bits, with 0 log 0 = 0."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(p), 0.0)
    return -terms.sum(axis=axis)


def uncertainty_decomposition(probs: np.ndarray) -> dict[str, np.ndarray]:
    """probs (S, N, K) -> per-sample total, expected (aleatoric) and mutual information (bits)."""
    probs = np.asarray(probs, dtype=np.float64)
    total = entropy_bits(probs.mean(axis=0))
    expected = entropy_bits(probs).mean(axis=0)
    # total >= expected by concavity; clip the float rounding that can make it -1e-16
    return {"pred_entropy": total, "expected_entropy": expected,
            "mutual_info": np.clip(total - expected, 0.0, None)}


def accuracy(mean_probs: np.ndarray, labels: np.ndarray) -> float:
    return float((mean_probs.argmax(axis=-1) == labels).mean())


def nll(mean_probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean negative log-likelihood (nats) of the mean prediction."""
    p_true = mean_probs[np.arange(len(labels)), labels]
    return float(-np.log(np.clip(p_true, NLL_CLAMP, None)).mean())


def brier(mean_probs: np.ndarray, labels: np.ndarray) -> float:
    """Brier score summed over classes, averaged over samples (range [0, 2])."""
    onehot = np.eye(mean_probs.shape[1])[labels]
    return float(((mean_probs - onehot) ** 2).sum(axis=1).mean())


def ood_metrics(score_id: np.ndarray, score_ood: np.ndarray) -> dict[str, float]:
    """AUROC, AUPR-In, AUPR-Out and FPR at 95% TPR, with OOD as the positive class."""
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


LOG_CLAMP = 1e-300  # a float32 probability that underflowed to 0 keeps a finite log in float64


def geometric_mean_probs(probs: np.ndarray) -> np.ndarray:
    """(S, N, K) -> (N, K): the normalised geometric mean of the samples' probabilities. For softmax
    outputs it is the softmax of the averaged logits (each log-softmax differs from its logits by a
    per-sample constant, which the normalisation removes), exactly while no probability has
    underflowed float32 (log p > -103); an underflowed one counts as LOG_CLAMP."""
    log_p = np.log(np.clip(np.asarray(probs, dtype=np.float64), LOG_CLAMP, None)).mean(axis=0)
    log_p -= log_p.max(axis=-1, keepdims=True)
    p = np.exp(log_p)
    return p / p.sum(axis=-1, keepdims=True)


# Scores that discard the members' disagreement: one member's entropy, and the entropy of the
# members' normalised geometric mean (their averaged logits). They show how much of an ensemble's
# OOD detection comes from the members disagreeing, and how a "collapsed" ensemble would score.
COLLAPSED_SCORES = ("member_entropy", "geo_mean_entropy")
SHARED_SCORES = ("pred_entropy", "mutual_info", "one_minus_max_prob", *COLLAPSED_SCORES)  # every run has these


def ood_scores(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample OOD scores (higher = more OOD) from (S, N, K) probabilities: predictive entropy,
    mutual information, 1 - max mean probability, and the COLLAPSED_SCORES (member_entropy: the
    first sample's, i.e. member 0's or MC pass 0's, entropy)."""
    probs = np.asarray(probs, dtype=np.float64)
    decomposition = uncertainty_decomposition(probs)
    return {"pred_entropy": decomposition["pred_entropy"],
            "mutual_info": decomposition["mutual_info"],
            "one_minus_max_prob": 1.0 - probs.mean(axis=0).max(axis=1),
            "member_entropy": entropy_bits(probs[0]),
            "geo_mean_entropy": entropy_bits(geometric_mean_probs(probs))}


def classification_metrics(probs: np.ndarray, labels: np.ndarray, prefix: str) -> dict[str, float]:
    mean = np.asarray(probs, dtype=np.float64).mean(axis=0)
    return {f"{prefix}_acc": accuracy(mean, labels), f"{prefix}_nll_nats": nll(mean, labels),
            f"{prefix}_brier": brier(mean, labels), f"{prefix}_ece": ece(mean, labels)}


SHIFT_METRICS = ("acc", "nll_nats", "brier", "ece", "pred_entropy_bits", "mutual_info_bits", "augrc")


def shift_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """One shifted test set's SHIFT_METRICS: accuracy, NLL, Brier and ECE of the mean prediction,
    mean predictive entropy and mutual information (bits), and the AUGRC of abstaining by the
    maximum mean probability (bench.evaluation.selective)."""
    mean = np.asarray(probs, dtype=np.float64).mean(axis=0)
    decomposition = uncertainty_decomposition(probs)
    return {"acc": accuracy(mean, labels), "nll_nats": nll(mean, labels), "brier": brier(mean, labels),
            "ece": ece(mean, labels), "pred_entropy_bits": float(decomposition["pred_entropy"].mean()),
            "mutual_info_bits": float(decomposition["mutual_info"].mean()),
            "augrc": selective_metrics(mean.max(axis=1), mean.argmax(axis=1) != labels)["augrc"]}


def evaluate(probs_id: np.ndarray, labels_id: np.ndarray, probs_ood: dict[str, np.ndarray],
             probs_val: np.ndarray | None = None, labels_val: np.ndarray | None = None,
             own_id: dict[str, np.ndarray] | None = None,
             own_ood: dict[str, dict[str, np.ndarray]] | None = None):
    """One run's metrics as a flat dict, plus the per-sample scores for plots.

    probs_ood maps each OOD set's name to its (S, N, K) probabilities. own_id / own_ood[set] are a
    method's own per-sample scores (name -> (N,)), ranked like the shared ones. Columns:
    ``id_acc`` ..., ``ood_<set>_<uncertainty>_bits``, ``<auroc|aupr_in|aupr_out|fpr95>_<score>_vs_<set>``.
    Returns (metrics, scores) with scores[score] = (id_scores, {set: ood_scores}).
    """
    metrics = classification_metrics(probs_id, labels_id, "id")
    if probs_val is not None and len(labels_val):
        metrics.update({k: v for k, v in classification_metrics(probs_val, labels_val, "val").items()
                        if k in ("val_acc", "val_nll_nats")})
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
