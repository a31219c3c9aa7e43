"""Selective prediction (bench.evaluation.selective): hand-computed values with ties, agreement with a
brute-force implementation, and independence of the sample order."""
import numpy as np
import pytest

from bench.evaluation.selective import optimal_aurc, rc_curve, selective_metrics
from bench.evaluation.calibration import reliability_bins


def brute_force(confidence, errors):
    """Threshold by threshold, straight from the definitions (fd-shifts' RC points)."""
    n = len(confidence)
    points = []
    for t in sorted(set(confidence), reverse=True):
        accepted = confidence >= t
        points.append((accepted.mean(), errors[accepted].mean(), errors[accepted].sum() / n))
    points = points[::-1] + [(0.0, points[0][1], 0.0)]  # coverage 1 first; the end point at coverage 0
    cov, sel, gen = map(np.array, zip(*points))
    area = lambda risk: -np.trapezoid(risk, cov)  # noqa: E731 - coverage descends
    r = errors.mean()
    at = {c: sel[np.flatnonzero(cov[:-1] >= c)[-1]] for c in (0.8, 0.9, 0.95)}
    return {"aurc": area(sel), "eaurc": area(sel) - (r + (1 - r) * np.log(1 - r)), "augrc": area(gen),
            "risk_at_80": at[0.8], "risk_at_90": at[0.9], "risk_at_95": at[0.95]}


def test_hand_computed_case_with_ties():
    confidence = np.array([0.9, 0.9, 0.5, 0.5, 0.1])
    errors = np.array([0, 1, 0, 0, 1])
    curve = rc_curve(confidence, errors)
    # thresholds 0.9 (2 accepted, 1 error), 0.5 (4, 1), 0.1 (5, 2), then the end point
    assert curve["coverage"].tolist() == pytest.approx([1.0, 0.8, 0.4, 0.0])
    assert curve["selective_risk"].tolist() == pytest.approx([0.4, 0.25, 0.5, 0.5])
    assert curve["generalized_risk"].tolist() == pytest.approx([0.4, 0.2, 0.2, 0.0])
    m = selective_metrics(confidence, errors)
    assert m["aurc"] == pytest.approx(0.2 * 0.325 + 0.4 * 0.375 + 0.4 * 0.5)     # 0.415
    assert m["augrc"] == pytest.approx(0.2 * 0.3 + 0.4 * 0.2 + 0.4 * 0.1)        # 0.18
    assert m["eaurc"] == pytest.approx(0.415 - (0.4 + 0.6 * np.log(0.6)))
    assert (m["risk_at_80"], m["risk_at_90"], m["risk_at_95"]) == pytest.approx((0.25, 0.4, 0.4))


def test_ideal_and_worst_confidence():
    errors = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0])
    ideal = selective_metrics(-errors + np.linspace(0, 0.1, 10), errors)  # every error below every correct one
    worst = selective_metrics(errors + np.linspace(0, 0.1, 10), errors)
    assert ideal["augrc"] < worst["augrc"] and ideal["aurc"] < worst["aurc"]
    assert ideal["risk_at_80"] == 0.0 and worst["risk_at_80"] == pytest.approx(2 / 8)
    # the finite-sample ideal is close to the continuous one that E-AURC subtracts
    assert ideal["eaurc"] == pytest.approx(0.0, abs=0.02)
    assert optimal_aurc(0.0) == 0.0 and optimal_aurc(1.0) == 1.0


@pytest.mark.parametrize("levels", [None, 7])  # continuous confidences; confidences on 7 levels (many ties)
def test_agrees_with_brute_force_and_ignores_sample_order(levels):
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 300))
        confidence = rng.random(n) if levels is None else rng.integers(0, levels, n) / levels
        errors = (rng.random(n) < rng.uniform(0.05, 0.6)).astype(int)
        if errors.all() or not errors.any():
            errors[0] = 1 - errors[0]
        expected = brute_force(confidence, errors)
        assert selective_metrics(confidence, errors) == pytest.approx(expected, abs=1e-12)
        order = rng.permutation(n)
        assert selective_metrics(confidence[order], errors[order]) == pytest.approx(expected, abs=1e-12)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="two \\(N,\\) arrays"):
        rc_curve(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="non-finite"):
        rc_curve(np.array([0.1, np.nan]), np.array([0, 1]))


def test_reliability_bins_are_the_ece_bins():
    from bench.evaluation.calibration import ece
    confidence = np.array([0.05, 0.5, 0.55, 0.95, 1.0, 1.0])
    correct = np.array([0, 1, 0, 1, 1, 0])
    bins = reliability_bins(confidence, correct, 10)
    assert bins["count"].tolist() == [1, 0, 0, 0, 1, 1, 0, 0, 0, 3]  # (lo, hi]: 0.5 falls in (0.4, 0.5]
    assert bins["accuracy"][9] == pytest.approx(2 / 3) and np.isnan(bins["accuracy"][1])
    assert bins["confidence"][9] == pytest.approx((0.95 + 1.0 + 1.0) / 3)
    # the ECE is the count-weighted gap of these bins (two classes, class 0 predicted with these confidences)
    confidence, correct = confidence[1:], correct[1:]
    probs = np.stack([confidence, 1 - confidence], axis=1)
    labels = np.where(correct == 1, 0, 1)
    bins = reliability_bins(confidence, correct, 15)
    gaps = np.nansum(bins["count"] / len(correct) * np.abs(bins["accuracy"] - bins["confidence"]))
    assert gaps == pytest.approx(ece(probs, labels, 15))
