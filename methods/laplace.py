"""Last-layer Laplace ensemble (Daxberger et al., "Laplace Redux", NeurIPS 2021; Eschenhagen et al. 2021
for the ensemble): members trained exactly as a deep ensemble's, then each member's last layer gets
a Gaussian posterior around its trained weights, fitted with laplace-torch (the field's library):

* the Hessian of the training loss on the training split: laplace-torch's Kronecker-factored
  (``kron``) or diagonal (``diag``) generalised Gauss-Newton of the last layer;
* one scalar prior precision per member, chosen on the validation split by the NLL of the predictive
  below over laplace-torch's default grid (10^-4 .. 10^4, 100 points; the first minimum wins);
* the linearised (GLM) predictive: logits ~ N(f(x), J Sigma J^T), with the probit approximation
  (``probit``: softmax(f / sqrt(1 + pi/8 diag var)), deterministic) or ``mc_samples`` Monte-Carlo
  samples of the logits (``mc``).

The last layer's Jacobian is (features x identity), so the functional variance J Sigma J^T is
computed from the posterior precision's eigendecomposition (laplace-torch's) in O(features^2) per
image instead of laplace-torch's generic product with the dense Jacobian: measured on the seed MLP
(Kronecker, 2048 images, 2 threads), 1.31 s through ``posterior(x)`` and 0.021 s here, probabilities
within 2.3e-8 of each other (tests/methods/test_field_methods.py and results/peer_check check the agreement).

Each member's predictive is one member of the prediction, (M, N, K). The posterior is fitted after
training (``post_fit``) and again, identically, when stored weights are scored (``bench evaluate``).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import torch

from bench.errors import ConfigError
from bench.models.stacked import StackedNetwork
from bench.options import choice, option, parse_int
from methods.base import PREDICT_CHUNK, Method
from methods.deep_ensemble import MEMBERS_OPTION

FIT_BATCH = 1024  # rows per batch when laplace-torch reads the training split
PRIOR_GRID = (-4, 4, 100)  # log10 of the smallest and largest prior precision, grid points (laplace-torch's)
POSTERIORS = "laplace_posteriors"  # the model attribute holding the fitted posteriors


def loader(x: torch.Tensor, y: torch.Tensor) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y.to(x.device)), batch_size=FIT_BATCH)


def functional_variance(posterior, features: torch.Tensor) -> torch.Tensor:
    """J Sigma J^T of a last-layer posterior for penultimate features (N, H): (N, K, K).

    The last layer's parameters are [W (K x H) row by row, b (K)] and its Jacobian for output k is
    e_k phi^T on W and e_k on b. kron: the precision of W is Q1 Q2 (l1 l2^T + delta) (Q1 Q2)^T
    (Q1: K x K, Q2: H x H), so [J Sigma J^T]_kl = sum_i Q1_ki Q1_li sum_j (Q2^T phi)_j^2 / (l1_i l2_j + delta),
    and b's block adds Qb diag(1 / (lb + delta_b)) Qb^T; diag: the same with the precisions' diagonal."""
    precision = posterior.posterior_precision
    classes = posterior.n_outputs
    if isinstance(precision, torch.Tensor):  # diag: [vec W, b]
        inverse = 1.0 / precision
        weight = inverse[:-classes].view(classes, -1)
        return torch.diag_embed(features.square() @ weight.T + inverse[-classes:])
    (l1, l2), (lb,) = precision.eigenvalues
    (q1, q2), (qb,) = precision.eigenvectors
    if precision.damping or len(l1) != classes or len(l2) != features.shape[1]:
        raise RuntimeError("laplace-torch's Kronecker factors are not laid out as expected (K x K, H x H)")
    delta_w, delta_b = precision.deltas.expand(2)
    per_direction = (features @ q2).square() @ (1.0 / (torch.outer(l1, l2) + delta_w)).T  # (N, K)
    bias = (qb / (lb + delta_b)) @ qb.T
    return (q1 * per_direction.unsqueeze(1)) @ q1.T + bias


def glm_predictive(posterior, features: torch.Tensor, logits: torch.Tensor, link: str, samples: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The GLM predictive's probabilities (N, K) from the MAP logits (N, K) and features (N, H)."""
    variance = functional_variance(posterior, features)
    if link == "probit":
        kappa = 1.0 / torch.sqrt(1.0 + math.pi / 8 * variance.diagonal(dim1=1, dim2=2))
        return torch.softmax(kappa * logits, dim=-1)
    # a square root by eigendecomposition, not Cholesky: the softmax GGN has a null direction (all
    # logits shifted alike), so at a small prior precision the covariance is near-singular there
    values, vectors = torch.linalg.eigh(variance)
    root = vectors * values.clamp(min=0).sqrt().unsqueeze(1)
    noise = torch.randn(samples, *logits.shape, generator=generator).to(logits.device)
    draws = logits + (root @ noise.unsqueeze(-1)).squeeze(-1)
    return draws.softmax(dim=-1).mean(dim=0)


@dataclasses.dataclass(frozen=True)
class LaplaceEnsemble(Method):
    name = "laplace"
    summary = "a deep ensemble whose members' last layers get a Laplace posterior (laplace-torch), GLM predictive"
    packable = True  # trains exactly as a deep ensemble; the posterior comes after, run by run
    capturable = True  # its step reads nothing back and draws nothing on the host (bench.training.graphs)
    post_fit_uses_train = True
    temperature_unsupported = ("the Laplace predictive is not a softmax of logits, and its prior precision is "
                               "already fitted on the validation split")

    members: int = option(3, **MEMBERS_OPTION)
    hessian: str = choice("kron", ("kron", "diag"), help="last-layer GGN: kron (Kronecker-factored) or diag")
    link: str = choice("probit", ("probit", "mc"), help="the GLM predictive's softmax: probit approximation or "
                       "Monte-Carlo samples of the logits")
    mc_samples: int = option(100, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                             help="logit samples per prediction with link=mc")

    def check_protocol(self, protocol: Any, what: str) -> None:
        super().check_protocol(protocol, what)
        if protocol.val_size == 0:
            raise ConfigError(f"{what}: the prior precision is fitted on the validation split; set val_size > 0")

    @property
    def label(self) -> str:
        return "Laplace ensemble" if self.members > 1 else "Laplace"

    def post_fit(self, model: StackedNetwork, x_val, y_val, train=None) -> dict[str, Any]:
        values = super().post_fit(model, x_val, y_val, train)
        with warnings.catch_warnings():  # laplace-torch's imports warn about its own dependencies
            warnings.simplefilter("ignore")
            from laplace import Laplace  # imported when used: commands that train no Laplace start faster
        grid = torch.logspace(*PRIOR_GRID)
        fitted = []
        for m in range(model.members):
            network = model.as_module(m)  # ordinary torch layers, the last one the output Linear
            posterior = Laplace(network, "classification", subset_of_weights="last_layer",
                                hessian_structure=self.hessian)
            posterior.fit(loader(*train))
            with torch.no_grad():
                features = network[:-1](x_val)
                logits = network[-1](features)
            nll = []
            for precision in grid:
                posterior.prior_precision = precision
                p = glm_predictive(posterior, features, logits, self.link, self.mc_samples,
                                   torch.Generator().manual_seed(m))  # link=mc: the same draws for every point
                value = float(-p[torch.arange(len(y_val)), y_val.to(p.device)].log().mean())
                nll.append(value if math.isfinite(value) else math.inf)  # as laplace-torch scores a failed point
            posterior.prior_precision = grid[int(np.argmin(nll))]
            fitted.append((network, posterior))
        setattr(model, POSTERIORS, fitted)
        values["laplace_prior_precision"] = " ".join(f"{float(p.prior_precision):.6g}" for _, p in fitted)
        return values

    @torch.no_grad()
    def predict_proba(self, model: StackedNetwork, x: torch.Tensor) -> torch.Tensor:
        fitted = getattr(model, POSTERIORS, None)
        if fitted is None:
            raise RuntimeError("the Laplace posterior is not fitted (post_fit was not called)")
        out = []
        for network, posterior in fitted:
            parts = []
            for chunk in x.split(PREDICT_CHUNK):
                features = network[:-1](chunk)
                parts.append(glm_predictive(posterior, features, network[-1](features), self.link, self.mc_samples))
            out.append(torch.cat(parts))
        return torch.stack(out)
