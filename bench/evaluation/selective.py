"""Selective prediction: how much risk remains when the model may abstain on its least confident
test samples. Pure numpy, float64; every function takes per-sample confidences (higher = more
confident) and 0/1 errors.

The risk-coverage (RC) curve follows fd-shifts (Traub et al., 2024, "Overcoming common flaws in
the evaluation of selective classification systems"; its ``rc_stats``):

* one point per distinct confidence threshold t (samples with confidence >= t are accepted), so
  tied confidences enter or leave together and no result depends on the order of the samples;
* coverage = accepted / N; selective risk = errors among the accepted / accepted; generalized
  risk = errors among the accepted / N;
* the curve starts at coverage 1 and ends at coverage 0 with the last selective risk (selective)
  or 0 (generalized); the areas are trapezoids over these points.

AURC is the area under the selective-risk curve, AUGRC under the generalized-risk curve. E-AURC is
AURC minus the AURC of an ideal confidence with the same error rate r, r + (1 - r) ln(1 - r)
(Geifman et al., 2019, "Bias-reduced uncertainty estimation for deep neural classifiers"; the
formula fd-shifts uses for 0/1 errors). The selective risk at coverage c is the risk of the RC
point with the smallest coverage >= c (ties cannot be split, so the point may cover a little more).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from bench.evaluation.calibration import smooth_ece
from bench.evaluation.columns import score_key, selective_column
from bench.evaluation.scores import MAX_PROB

COVERAGES = (0.8, 0.9, 0.95)  # the selective-risk-at-coverage columns


def rc_curve(confidence: np.ndarray, errors: np.ndarray) -> dict[str, np.ndarray]:
    """The RC points, coverage descending from 1 to 0: coverage, selective_risk, generalized_risk."""
    confidence = np.asarray(confidence, dtype=np.float64)
    errors = np.asarray(errors, dtype=np.float64)
    if confidence.shape != errors.shape or confidence.ndim != 1 or not len(confidence):
        raise ValueError(f"confidence {confidence.shape} and errors {errors.shape}: two (N,) arrays, N >= 1")
    if not np.isfinite(confidence).all():
        raise ValueError("confidence has non-finite values")
    order = np.argsort(-confidence, kind="stable")
    conf, err = confidence[order], np.cumsum(errors[order])
    ends = np.r_[np.flatnonzero(conf[1:] != conf[:-1]), len(conf) - 1]  # last sample of each tie group
    accepted = (ends + 1).astype(np.float64)
    coverage, selective, generalized = accepted / len(conf), err[ends] / accepted, err[ends] / len(conf)
    return {"coverage": np.r_[coverage[::-1], 0.0], "selective_risk": np.r_[selective[::-1], selective[0]],
            "generalized_risk": np.r_[generalized[::-1], 0.0]}


def _area(coverage: np.ndarray, risk: np.ndarray) -> float:
    """Trapezoids over points of descending coverage."""
    return float(np.sum((coverage[:-1] - coverage[1:]) * (risk[:-1] + risk[1:]) / 2))


def optimal_aurc(error_rate: float) -> float:
    """The AURC of an ideal confidence (every error below every correct sample) at this error rate."""
    r = float(error_rate)
    return r if r >= 1 else r + (1 - r) * np.log(1 - r)


def selective_metrics(confidence: np.ndarray, errors: np.ndarray) -> dict[str, float]:
    """AURC, E-AURC, AUGRC and the selective risk at each of COVERAGES."""
    curve = rc_curve(confidence, errors)
    aurc = _area(curve["coverage"], curve["selective_risk"])
    out = {"aurc": aurc, "eaurc": aurc - optimal_aurc(np.mean(errors)),
           "augrc": _area(curve["coverage"], curve["generalized_risk"])}
    for c in COVERAGES:
        out[risk_at_name(c)] = risk_at_coverage(curve, c)
    return out


def risk_at_name(coverage: float) -> str:
    """0.9 -> 'risk_at_90': the selective risk at 90 % coverage."""
    return f"risk_at_{round(coverage * 100)}"


def risk_at_coverage(curve: dict[str, np.ndarray], coverage: float) -> float:
    """The selective risk of the RC point with the smallest coverage >= ``coverage``."""
    reaching = np.flatnonzero(curve["coverage"][:-1] >= coverage - 1e-12)  # the end point is not a threshold
    return float(curve["selective_risk"][reaching[-1]])


def run_selective(arrays: dict[str, np.ndarray]) -> list[dict]:
    """One row per confidence score of a run's cached arrays (predictions/<run_id>.npz): the
    confidence is minus each per-sample ID score (max mean probability, -predictive entropy,
    -mutual information, -the method's own score), the errors are the mean prediction's mistakes."""
    errors = (arrays["id_pred"] != arrays["id_label"]).astype(np.float64)
    scores = [key[len("id_"):] for key in arrays if key.startswith("id_") and key not in NOT_SCORES]
    rows = []
    for score in sorted(scores):
        confidence = -arrays[score_key(score)].astype(np.float64)
        if not np.isfinite(confidence).all():  # e.g. a float64 score beyond float32's range in the cache
            rows.append({"score": score, **{m: np.nan for m in METRICS}})
            continue
        rows.append({"score": score, **selective_metrics(confidence, errors)})
    for row in rows:  # the one confidence that is a probability: its smooth ECE
        row["smece"] = smooth_ece(arrays["id_conf"], 1 - errors) if row["score"] == MAX_PROB else np.nan
    return rows


NOT_SCORES = ("id_pred", "id_label", "id_conf", "id_p_true")  # the other id_ arrays are per-sample OOD scores
METRICS = ("aurc", "eaurc", "augrc", *(risk_at_name(c) for c in COVERAGES), "smece")


def selective_table(runs, load_arrays) -> pd.DataFrame:
    """The selective-prediction metrics of every finished run, from its cached arrays, in long
    form: run_id, method, variant, seed, score and one column per metric."""
    rows = []
    for _, run in runs.iterrows():
        if run.get("status") != "ok":
            continue
        try:
            arrays = load_arrays(run["run_id"])
        except (FileNotFoundError, OSError, ValueError):
            continue  # no cache: nothing to compute from (the report notes missing arrays elsewhere)
        for row in run_selective(arrays):
            rows.append({"run_id": run["run_id"], "method": run["method"], "variant": run["variant"],
                         "seed": run["seed"], **row})
    return pd.DataFrame(rows, columns=["run_id", "method", "variant", "seed", "score", *METRICS])


def with_selective(runs, table) -> pd.DataFrame:
    """The runs with one column per (metric, score) of the long selective table."""
    if table.empty:
        return runs
    wide = table.pivot_table(index="run_id", columns="score", values=list(METRICS), sort=False)
    wide.columns = [selective_column(metric, score) for metric, score in wide.columns]
    return runs.merge(wide, left_on="run_id", right_index=True, how="left")
