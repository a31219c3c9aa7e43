"""The OOD scores, declared once: every per-sample score a run is ranked by (higher = more OOD), its
label, how it is computed from the members' probabilities, and whether it reads their disagreement.

A *shared* score has ``compute`` ((S, N, K) probabilities, float64 -> (N,)): every run has it
(bench.evaluation.metrics). A method's *own* score (``compute`` None) is computed by the method
(``Method.own_scores``: the DARE paper's Eq. 35 distance) and registered here for its label. A
method's ``primary_score`` (the score its rows are reported by) is one of these names.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from bench.errors import ConfigError
from bench.evaluation.measures import entropy_bits, uncertainty_decomposition

LOG_CLAMP = 1e-300  # a float32 probability that underflowed to 0 keeps a finite log in float64


@dataclasses.dataclass(frozen=True)
class Score:
    name: str
    label: str                                            # axes and legends
    compute: Callable[[np.ndarray], np.ndarray] | None = None  # shared: (S, N, K) -> (N,); None: a method's own
    members: bool = False  # it reads the members' disagreement (0 for a single network)
    collapsed: bool = False  # it discards the members' disagreement on purpose (how a collapsed ensemble scores)


SCORES: dict[str, Score] = {}


def register(score: Score) -> Score:
    if score.name in SCORES:
        raise ConfigError(f"a score named {score.name!r} is registered already")
    SCORES[score.name] = score
    return score


def get(name: str) -> Score:
    if name not in SCORES:
        raise ConfigError(f"no score named {name!r} (registered: {', '.join(SCORES)})")
    return SCORES[name]


def label(name: str) -> str:
    return SCORES[name].label if name in SCORES else name


def shared() -> tuple[str, ...]:
    """The scores every run has, in registration order."""
    return tuple(name for name, s in SCORES.items() if s.compute is not None)


def geometric_mean_probs(probs: np.ndarray) -> np.ndarray:
    """(S, N, K) -> (N, K): the normalised geometric mean of the samples' probabilities. For softmax
    outputs it is the softmax of the averaged logits (each log-softmax differs from its logits by a
    per-sample constant, which the normalisation removes), exactly while no probability has
    underflowed float32 (log p > -103); an underflowed one counts as LOG_CLAMP."""
    log_p = np.log(np.clip(np.asarray(probs, dtype=np.float64), LOG_CLAMP, None)).mean(axis=0)
    log_p -= log_p.max(axis=-1, keepdims=True)
    p = np.exp(log_p)
    return p / p.sum(axis=-1, keepdims=True)


PRED_ENTROPY = register(Score("pred_entropy", "predictive entropy (bits)",
                              lambda p: uncertainty_decomposition(p)["pred_entropy"])).name
MUTUAL_INFO = register(Score("mutual_info", "mutual information (bits)",
                             lambda p: uncertainty_decomposition(p)["mutual_info"], members=True)).name
MAX_PROB = register(Score("one_minus_max_prob", "1 - max probability",  # its negative ranks like the max mean probability
                          lambda p: 1.0 - p.mean(axis=0).max(axis=1))).name
# scores that discard the members' disagreement: one member's entropy (member 0's, or MC pass 0's), and the
# entropy of the members' normalised geometric mean (their averaged logits): how a "collapsed" ensemble scores
MEMBER_ENTROPY = register(Score("member_entropy", "one member's entropy (bits)", lambda p: entropy_bits(p[0]),
                                collapsed=True)).name
GEO_MEAN_ENTROPY = register(Score("geo_mean_entropy", "entropy of the geometric mean (bits)",
                                  lambda p: entropy_bits(geometric_mean_probs(p)), collapsed=True)).name
EQ35_DISTANCE = register(Score("eq35_distance", "Eq. 35 distance", members=True)).name  # DE (MSE) and DARE's own
DEFAULT_SCORE = PRED_ENTROPY  # a method's primary score unless it says otherwise
