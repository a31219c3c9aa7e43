"""Mean-field variational inference (Blundell et al., 2015, "Weight uncertainty in neural
networks"): every weight has a Gaussian posterior N(mu, sigma^2) and a Gaussian prior; a member
minimises the negative ELBO per training example, the mean cross-entropy of a weight draw plus
KL(posterior || prior) divided by the training-set size N. At test time ``samples`` weight draws per
member are the predictive's samples (the ensemble's members, as MC dropout's passes are).

The layers are the architecture's ``variational`` kind (bench.models.variational), dense and
convolutional; ``estimator`` picks how a pass draws (reparameterization, Flipout, or the local
reparameterization of uncertainty-baselines' dense layers). ``members`` > 1 trains that many
independent variational networks (an ensemble of them). uncertainty-baselines'
``variational_inference.py`` (its LeNet-5 table's VI row): estimator=local_reparameterization,
prior=empirical_bayes, prior_std=1, mean_init=he_normal, rho_init=-7, samples=10 (presets
ub-lenet-mnist, ub-lenet-fmnist). The per-epoch validation loss reads the network of posterior means.
"""
from __future__ import annotations

import dataclasses

import torch

from bench.models.registry import ArchSpec
from bench.models.variational import ESTIMATORS, MEAN_INITS, PRIORS, VariationalNet
from bench.options import choice, option, parse_float, parse_int
from methods.base import Batch, Method
from methods.deep_ensemble import MEMBERS_OPTION


@dataclasses.dataclass(frozen=True)
class VariationalInference(Method):
    name = "vi"
    summary = "mean-field Gaussian weights trained on the ELBO (KL / N); weight draws at test time act as members"
    layers = "variational"
    # a temperature fitted on the posterior means' logits would calibrate another predictive than the
    # one every metric reads
    temperature_unsupported = "its predictions are weight draws, and the temperature is fitted on posterior-mean logits"

    members: int = option(1, **MEMBERS_OPTION)
    estimator: str = choice("flipout", ESTIMATORS,
                            help="how a pass draws: flipout (one draw per pass, random signs per row); "
                            "reparameterization (one draw per pass, shared by the rows); local_reparameterization "
                            "(dense layers draw their pre-activations, convolutions use Flipout)")
    prior: str = choice("fixed", PRIORS, help="fixed: N(0, prior_std^2); empirical_bayes: one prior sd per weight "
                        "and bias tensor, trained from prior_std")
    prior_std: float = option(1.0, parse_float, "a number > 0", check=lambda v: 0 < v < float("inf"),
                              help="the prior's standard deviation (the start of a trained one)")
    mean_init: str = choice("protocol", MEAN_INITS, help="posterior means: protocol (the protocol's init) or "
                            "he_normal (truncated He normal, zero biases: Keras')")
    rho_init: float = option(-7.0, parse_float, "a number", check=lambda v: abs(v) < float("inf"),
                             help="initial rho, sigma = softplus(rho): drawn from N(rho_init, 0.1^2)")
    samples: int = option(10, parse_int, "an integer >= 1", check=lambda v: v >= 1,
                          help="weight draws per member at test time")

    @property
    def label(self) -> str:
        return "VI" if self.members == 1 else f"VI ensemble ({self.members})"

    def build_model(self, seed: int, member_ids: list[int], arch: ArchSpec) -> VariationalNet:
        return arch.build(seed, member_ids, layers=self.layers, estimator=self.estimator, prior=self.prior,
                          prior_std=self.prior_std, mean_init=self.mean_init, rho_init=self.rho_init)

    def penalty(self, model: VariationalNet, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor:
        if batch.train_size < 1:
            raise ValueError("vi's KL term is divided by the training-set size: the batch carries none")
        return model.kl() / batch.train_size

    def predict_proba(self, model: VariationalNet, x: torch.Tensor) -> torch.Tensor:
        # ``samples`` draws of each member's weights, (samples x members, N, K)
        return torch.cat([self.logits(model, x, dropout=True) for _ in range(self.samples)]).softmax(dim=-1)
