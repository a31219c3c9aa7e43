"""Deep ensemble (Lakshminarayanan et al., 2017): independently initialised members.

``loss=ce`` is the usual cross-entropy ensemble, "DE (NLL)" in the DARE paper's tables;
``loss=mse`` is its "DE (MSE)": the paper's scaled MSE (target K * onehot on the raw outputs),
scored for OOD by the paper's Eq. 35 distance.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from bench.models.stacked import StackedNetwork
from bench.options import choice, option, parse_int
from bench.evaluation.scores import DEFAULT_SCORE, EQ35_DISTANCE
from methods.base import TASK_LOSSES, Method

MEMBERS_OPTION = dict(parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                      help="number of ensemble members")
LOSS_HELP = "task loss: ce (cross-entropy) or mse (the DARE paper's MSE to K * onehot on the raw outputs)"


def eq35_distance(outputs: np.ndarray) -> np.ndarray:
    """The DARE paper's Eq. 35 OOD score from member outputs (M, N, K) -> (N,), float64.

    y_m = K * onehot(the class whose output of member m is closest to K); score = mean over
    members of ||h_m - y_m||^2 + mean over members of ||h_m - mean_i h_i||^2. (The paper's code
    also divides by K, which changes no ranking metric.)
    """
    h = np.asarray(outputs, dtype=np.float64)
    classes = h.shape[-1]
    nearest = np.abs(h - classes).argmin(axis=-1)                  # (M, N)
    y = np.eye(classes)[nearest] * classes                          # (M, N, K)
    fit = ((h - y) ** 2).sum(axis=-1).mean(axis=0)
    spread = ((h - h.mean(axis=0)) ** 2).sum(axis=-1).mean(axis=0)
    return fit + spread


@dataclasses.dataclass(frozen=True)
class DeepEnsemble(Method):
    name = "deep_ensemble"
    summary = "independently initialised members trained on the task loss (ce or the paper's mse)"
    packable = True
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)

    members: int = option(3, **MEMBERS_OPTION)
    loss: str = choice("ce", tuple(TASK_LOSSES), help=LOSS_HELP)

    @property
    def label(self) -> str:
        return "DE (MSE)" if self.loss == "mse" else "DE (NLL)"

    @property
    def primary_score(self) -> str:
        return EQ35_DISTANCE if self.loss == "mse" else DEFAULT_SCORE

    def task_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return TASK_LOSSES[self.loss](logits, targets)

    def own_scores(self, model: StackedNetwork, x: torch.Tensor) -> dict[str, np.ndarray]:
        # the distance to K * onehot only means something for outputs trained towards it
        if self.loss != "mse":
            return {}
        return {EQ35_DISTANCE: eq35_distance(self.logits(model, x).cpu().numpy())}
