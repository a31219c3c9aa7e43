"""Evaluators: (samples, N, classes) probabilities -> metrics. Pure numpy, float64.

Conventions (README "Metric conventions"): member *probabilities* are averaged (never logits);
entropies are in bits; NLL in nats; OOD is the positive class and a higher score means more OOD.
"""
from __future__ import annotations

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

ECE_BINS = 15
NLL_CLAMP = 1e-12  # probabilities are clamped before the log so one confident mistake stays finite


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


def ece(mean_probs: np.ndarray, labels: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error, equal-width bins (lo, hi] on the max mean-probability."""
    conf = mean_probs.max(axis=1)
    correct = mean_probs.argmax(axis=1) == labels
    bins = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        in_bin = bins == b
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return float(total)


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


def ood_scores(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-sample OOD scores (higher = more OOD) from (S, N, K) probabilities."""
    decomposition = uncertainty_decomposition(probs)
    return {"pred_entropy": decomposition["pred_entropy"],
            "mutual_info": decomposition["mutual_info"],
            "one_minus_max_prob": 1.0 - np.asarray(probs, dtype=np.float64).mean(axis=0).max(axis=1)}


def classification_metrics(probs: np.ndarray, labels: np.ndarray, prefix: str) -> dict[str, float]:
    mean = np.asarray(probs, dtype=np.float64).mean(axis=0)
    return {f"{prefix}_acc": accuracy(mean, labels), f"{prefix}_nll_nats": nll(mean, labels),
            f"{prefix}_brier": brier(mean, labels), f"{prefix}_ece": ece(mean, labels)}


def evaluate(probs_id: np.ndarray, labels_id: np.ndarray, probs_ood: np.ndarray,
             probs_val: np.ndarray | None = None, labels_val: np.ndarray | None = None):
    """One run's metrics as a flat dict, plus the per-sample scores for plots.

    Returns (metrics, scores) with scores[name] = (id_scores, ood_scores).
    """
    metrics = classification_metrics(probs_id, labels_id, "id")
    if probs_val is not None and len(labels_val):
        metrics.update({k: v for k, v in classification_metrics(probs_val, labels_val, "val").items()
                        if k in ("val_acc", "val_nll_nats")})
    for split, probs in (("id", probs_id), ("ood", probs_ood)):
        for name, values in uncertainty_decomposition(probs).items():
            metrics[f"{split}_{name}_bits"] = float(values.mean())
    id_scores, ood_scores_ = ood_scores(probs_id), ood_scores(probs_ood)
    scores = {}
    for name in id_scores:
        for metric, value in ood_metrics(id_scores[name], ood_scores_[name]).items():
            metrics[f"{metric}_{name}"] = value
        scores[name] = (id_scores[name], ood_scores_[name])
    return metrics, scores
