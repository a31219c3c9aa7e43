"""The prediction contract: what a method's predictions and own scores must be before any metric
reads them (shape, range, rows summing to 1)."""
from __future__ import annotations

import numpy as np


SUM_TOLERANCE = 1e-4  # predicted probabilities must sum to 1 over classes within this


class InvalidPredictions(ValueError):
    """A method's predictions or own scores break the contract (one line: what and where).
    ``nonfinite``: the values are not finite, i.e. the numbers diverged (a result, not a bug)."""

    def __init__(self, reason: str, nonfinite: bool = False):
        super().__init__(reason)
        self.nonfinite = nonfinite


def check_probabilities(probs, n: int, classes: int, what: str = "predictions") -> None:
    """(samples, n, classes) array, finite, in [0, 1], each row summing to 1 within SUM_TOLERANCE."""
    if not isinstance(probs, np.ndarray):
        raise InvalidPredictions(f"{what}: a {type(probs).__name__}, not a numpy array")
    if probs.ndim != 3 or probs.shape[0] < 1 or probs.shape[1:] != (n, classes):
        raise InvalidPredictions(f"{what}: shape {probs.shape}, expected (samples, {n}, {classes})")
    if probs.size == 0:  # e.g. no validation split
        return
    bad = ~np.isfinite(probs)
    if bad.any():
        raise InvalidPredictions(f"{what}: {int(bad.sum())} non-finite values", nonfinite=True)
    if probs.min() < 0 or probs.max() > 1:
        raise InvalidPredictions(f"{what}: values outside [0, 1] (min {probs.min():.4g}, max {probs.max():.4g}); "
                                 "probabilities expected, not logits")
    off = np.abs(probs.astype(np.float64).sum(axis=-1) - 1.0)
    if off.max() > SUM_TOLERANCE:
        raise InvalidPredictions(f"{what}: rows do not sum to 1 over classes (off by up to {off.max():.3g}, "
                                 f"tolerance {SUM_TOLERANCE:g})")


def check_own_scores(scores, n: int, what: str = "own scores") -> None:
    """Every own score a finite (n,) array."""
    if not isinstance(scores, dict):
        raise InvalidPredictions(f"{what}: a {type(scores).__name__}, not a dict of name -> (N,) array")
    for name, values in scores.items():
        if not isinstance(values, np.ndarray) or values.shape != (n,):
            raise InvalidPredictions(f"{what}: {name} has shape {getattr(values, 'shape', None)}, expected ({n},)")
        if not np.isfinite(values).all():
            raise InvalidPredictions(f"{what}: {name} has {int((~np.isfinite(values)).sum())} non-finite values",
                                     nonfinite=True)
