"""Calibration: the binned ECE, its bins (the reliability diagram reads the same bins) and the
smooth ECE. Pure numpy, float64."""
from __future__ import annotations

import numpy as np


ECE_BINS = 15


def ece(mean_probs: np.ndarray, labels: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """Expected calibration error, equal-width bins (lo, hi] on the max mean-probability."""
    return binned_ece(mean_probs.max(axis=1), mean_probs.argmax(axis=1) == labels, n_bins)


def confidence_bins(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Each confidence's bin among ``n_bins`` equal-width bins (lo, hi] of [0, 1]."""
    return np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)


def binned_ece(conf: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    """The ECE of confidences and their 0/1 correctness (``ece`` from cached per-sample values)."""
    return _ece_of_bins(conf, correct, confidence_bins(conf, n_bins), n_bins)


def left_closed_ece(conf: np.ndarray, correct: np.ndarray, n_bins: int) -> float:
    """The ECE as uncertainty-baselines' utils.calibration computes it: bins [lo, hi) on the float32
    confidence, so a confidence of exactly 1.0 falls in no bin and is left out; each bin weighted by its
    share of the binned predictions."""
    conf = np.asarray(conf, dtype=np.float32).astype(np.float64)
    kept = conf < 1.0
    if not kept.any():
        return 0.0
    conf, correct = conf[kept], np.asarray(correct)[kept]
    return _ece_of_bins(conf, correct, np.floor(conf * n_bins).astype(int), n_bins)


def _ece_of_bins(conf: np.ndarray, correct: np.ndarray, bins: np.ndarray, n_bins: int) -> float:
    """Sum over the non-empty bins of the bin's share times |accuracy - mean confidence|."""
    total = 0.0
    for b in range(n_bins):
        in_bin = bins == b
        if in_bin.any():
            total += in_bin.mean() * abs(correct[in_bin].mean() - conf[in_bin].mean())
    return float(total)


def reliability_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int) -> dict[str, np.ndarray]:
    """Per equal-width bin (lo, hi] of the confidence (the ECE's bins, bench.evaluation.metrics.ece): the count,
    the mean confidence and the accuracy (nan in an empty bin)."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    bins = confidence_bins(confidence, n_bins)
    count = np.bincount(bins, minlength=n_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"count": count, "confidence": np.bincount(bins, confidence, n_bins) / count,
                "accuracy": np.bincount(bins, correct, n_bins) / count}


def smooth_ece(confidence: np.ndarray, correct: np.ndarray) -> float:
    """The smooth ECE of a confidence in [0, 1] against correctness (relplot, Błasiok & Nakkiran
    2023, "Smooth ECE: principled reliability diagrams via kernel smoothing"): no bins; the
    kernel's bandwidth is chosen by the data."""
    import relplot  # 2 s to import (it pulls in matplotlib and scikit-learn): only when asked for
    return float(relplot.smECE(np.asarray(confidence, dtype=np.float64), np.asarray(correct, dtype=np.int64)))


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """Temperature scaling (Guo et al. 2017): the T in [0.01, 100] minimising the NLL of the
    mean over samples of softmax(logits / T); logits (samples, N, K), labels (N,). One T for all
    samples: for an ensemble's members, its averaged predictive is what is calibrated. A bounded
    scalar search on log T, in float64, to 1e-10."""
    from scipy.optimize import minimize_scalar  # imported when a temperature is fitted
    z = np.asarray(logits, dtype=np.float64)
    rows = np.arange(z.shape[1])

    def nll(log_t: float) -> float:
        scaled = z / np.exp(log_t)
        scaled -= scaled.max(axis=-1, keepdims=True)
        p = np.exp(scaled)
        mean = (p / p.sum(axis=-1, keepdims=True)).mean(axis=0)
        return float(-np.log(np.maximum(mean[rows, labels], 1e-300)).mean())

    found = minimize_scalar(nll, bounds=(np.log(1e-2), np.log(1e2)), method="bounded", options={"xatol": 1e-10})
    return float(np.exp(found.x))
