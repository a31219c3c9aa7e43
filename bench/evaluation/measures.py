"""Measures of one set of predictions: entropy in bits, the uncertainty decomposition, and the
accuracy, NLL and Brier score of a mean prediction. Pure numpy, float64; the metrics of the
catalog (bench.evaluation.catalog) and the OOD scores (bench.evaluation.metrics) are built on them."""
from __future__ import annotations

import numpy as np

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
