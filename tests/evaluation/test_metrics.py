import math

import numpy as np
import pytest

from bench.evaluation import calibration, measures, metrics
from bench.evaluation import scores as score_registry


def test_entropy_in_bits_with_zero_log_zero():
    assert measures.entropy_bits(np.full(4, 0.25)) == pytest.approx(2.0)
    assert measures.entropy_bits(np.array([1.0, 0.0, 0.0])) == pytest.approx(0.0)
    assert measures.entropy_bits(np.array([0.5, 0.5, 0.0])) == pytest.approx(1.0)


def test_decomposition_of_two_confident_disagreeing_members():
    probs = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])  # (S=2, N=1, K=2)
    d = measures.uncertainty_decomposition(probs)
    assert d["pred_entropy"][0] == pytest.approx(1.0)      # mean is (0.5, 0.5)
    assert d["expected_entropy"][0] == pytest.approx(0.0)  # each member is certain
    assert d["mutual_info"][0] == pytest.approx(1.0)


def test_decomposition_of_agreeing_members_has_no_mutual_information():
    probs = np.array([[[0.5, 0.5]], [[0.5, 0.5]]])
    d = measures.uncertainty_decomposition(probs)
    assert d["expected_entropy"][0] == pytest.approx(1.0)
    assert d["mutual_info"][0] == pytest.approx(0.0)


def test_probabilities_are_averaged_not_logits():
    # member means (0.5, 0.5) -> the argmax tie goes to class 0; accuracy uses the mean
    probs = np.array([[[0.9, 0.1]], [[0.2, 0.8]]])
    out = metrics.prediction_metrics(probs, np.array([0]))
    assert out["id_acc"] == 1.0  # mean (0.55, 0.45)
    assert out["id_nll_nats"] == pytest.approx(-math.log(0.55))


def test_nll_brier_accuracy_by_hand():
    p = np.array([[0.5, 0.5], [0.9, 0.1]])
    y = np.array([0, 1])
    assert measures.accuracy(p, y) == 0.5
    assert measures.nll(p, y) == pytest.approx(-(math.log(0.5) + math.log(0.1)) / 2)
    # (0.25 + 0.25) and (0.81 + 0.81), averaged
    assert measures.brier(p, y) == pytest.approx((0.5 + 1.62) / 2)


def test_nll_is_clamped_for_a_zero_probability():
    assert measures.nll(np.array([[1.0, 0.0]]), np.array([1])) == pytest.approx(-math.log(1e-12))


def test_ece_by_hand_with_15_bins():
    # two samples at confidence 0.9 (one right, one wrong) and one at 0.7 (right)
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.7, 0.3]])
    y = np.array([0, 1, 0])
    expected = (2 / 3) * abs(0.5 - 0.9) + (1 / 3) * abs(1.0 - 0.7)
    assert calibration.ece(p, y) == pytest.approx(expected)


def test_ece_is_zero_when_confidence_matches_accuracy():
    p = np.array([[1.0, 0.0]] * 4)
    assert calibration.ece(p, np.zeros(4, dtype=int)) == pytest.approx(0.0)


def test_ood_metrics_by_hand():
    score_id = np.array([0.1, 0.2, 0.3, 0.4])
    score_ood = np.array([0.35, 0.5, 0.6, 0.7])
    m = metrics.ood_metrics(score_id, score_ood)
    assert m["auroc"] == pytest.approx(15 / 16)  # only (0.35 OOD, 0.4 ID) is mis-ordered
    # OOD ranked first: precisions 1, 1, 1 and 4/5 at the four OOD hits
    assert m["aupr_out"] == pytest.approx((1 + 1 + 1 + 0.8) / 4)
    assert m["aupr_in"] == pytest.approx((1 + 1 + 1 + 0.8) / 4)
    # catching all 4 OOD (>= 95 %) needs threshold 0.35, which flags ID 0.4: 1 of 4
    assert m["fpr95"] == pytest.approx(0.25)


def test_ood_metrics_perfect_and_reversed():
    perfect = metrics.ood_metrics(np.zeros(5), np.ones(5))
    assert perfect["auroc"] == 1.0 and perfect["fpr95"] == 0.0
    reversed_ = metrics.ood_metrics(np.ones(5), np.zeros(5))
    assert reversed_["auroc"] == 0.0 and reversed_["fpr95"] == 1.0


def test_evaluate_names_units_and_scores():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=(4, 20))
    out, scores = metrics.run_metrics(probs, rng.integers(0, 3, 20), {"a": probs[:, ::-1], "b": probs[:, :5]})
    for col in ("id_pred_entropy_bits", "ood_a_mutual_info_bits", "ood_b_pred_entropy_bits", "id_nll_nats",
                "auroc_pred_entropy_vs_a", "auroc_pred_entropy_vs_b", "fpr95_mutual_info_vs_a",
                "aupr_in_one_minus_max_prob_vs_b", "id_ece", "id_brier"):
        assert col in out
    assert set(scores) == set(score_registry.shared())
    assert np.all(scores["mutual_info"][0] >= 0) and set(scores["mutual_info"][1]) == {"a", "b"}


def test_a_methods_own_score_is_ranked_like_the_shared_ones():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=(2, 4))
    own_id = {"mine": np.array([0.0, 1.0, 2.0, 3.0])}
    own_ood = {"x": {"mine": np.array([2.5, 4.0, 5.0])}}   # 2.5 beats 3 of 4 ID scores
    out, scores = metrics.run_metrics(probs, np.zeros(4, int), {"x": probs[:, :3]}, own_id=own_id, own_ood=own_ood)
    assert out["auroc_mine_vs_x"] == pytest.approx((3 + 4 + 4) / 12)
    np.testing.assert_array_equal(scores["mine"][1]["x"], own_ood["x"]["mine"])


def test_collapsed_scores_by_hand():
    # two members, each confident, that disagree: the mean is uniform (1 bit); one member's entropy
    # sees none of the disagreement; their geometric mean is uniform here too
    probs = np.array([[[0.9, 0.1]], [[0.1, 0.9]]])
    scores = metrics.ood_scores(probs)
    h = -(0.9 * np.log2(0.9) + 0.1 * np.log2(0.1))
    assert np.isclose(scores["pred_entropy"][0], 1.0)
    assert np.isclose(scores["member_entropy"][0], h)
    assert np.isclose(scores["geo_mean_entropy"][0], 1.0)  # sqrt(.09) on both classes: uniform
    probs = np.array([[[0.5, 0.5]], [[0.9, 0.1]]])
    g = np.sqrt([0.45, 0.05])
    g /= g.sum()
    assert np.isclose(metrics.ood_scores(probs)["member_entropy"][0], 1.0)
    assert np.isclose(metrics.ood_scores(probs)["geo_mean_entropy"][0], -(g * np.log2(g)).sum())


def test_geometric_mean_is_the_softmax_of_averaged_logits():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(5, 7, 4)) * 3
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    mean_logits = logits.mean(0)
    expected = np.exp(mean_logits) / np.exp(mean_logits).sum(-1, keepdims=True)
    assert np.allclose(score_registry.geometric_mean_probs(softmax), expected, atol=1e-12)
    underflow = np.array([[[1.0, 0.0]], [[0.5, 0.5]]])  # a zero probability stays finite
    assert np.isfinite(score_registry.geometric_mean_probs(underflow)).all()


def test_every_score_is_declared_once_with_its_label_and_a_duplicate_is_refused():
    from bench.errors import ConfigError
    assert score_registry.shared() == ("pred_entropy", "mutual_info", "one_minus_max_prob", "member_entropy",
                                       "geo_mean_entropy")  # the order every record's columns come in
    assert score_registry.get("eq35_distance").compute is None  # a method's own: DE (MSE) and DARE compute it
    assert score_registry.label("mutual_info") == "mutual information (bits)"
    assert score_registry.label("a_plugins_score") == "a_plugins_score"  # unregistered: its name
    with pytest.raises(ConfigError, match="a score named 'pred_entropy' is registered already"):
        score_registry.register(score_registry.Score("pred_entropy", "again"))
    with pytest.raises(ConfigError, match="no score named 'nope'"):
        score_registry.get("nope")
