"""Mean-field Gaussian layers for variational inference (Blundell et al., 2015), dense and
convolutional (bayesian-torch's ``LinearFlipout`` / ``Conv2dFlipout``, torch-uncertainty's
``BayesLinear`` / ``BayesConv2d``): every weight and bias w has a posterior N(mu, sigma^2),
sigma = softplus(rho), and a prior N(0, s^2).

How a forward pass draws (``estimator``):

* ``reparameterization``: one weight draw per member and pass, shared by the batch's rows;
* ``flipout`` (Wen et al., 2018): one draw per pass, decorrelated across rows by random signs:
  ``h @ mu + ((h * s_in) @ (sigma * eps) + sigma_b * eps_b) * s_out``, convolutions per channel;
* ``local_reparameterization`` (Kingma et al., 2015): a dense layer draws its pre-activations,
  N(h @ mu, h^2 @ sigma^2), and its bias once per pass; a convolution, whose weights every
  position shares, uses Flipout (uncertainty-baselines' ``DenseLocalReparameterization`` and
  ``Convolution2DFlipout``).

Flipout's bias draw sits inside the sign-flipped term, as in bayesian-torch; TFP's Flipout layers
(uncertainty-baselines') add one bias draw per pass outside the signs. Each row's output has the same
distribution; the rows of a batch are correlated differently (results/peer_check/README.md).

``forward(x, dropout)``: ``dropout`` False gives the network of posterior means (the per-epoch
validation loss reads it); True draws from torch's generator (the training loop seeds it per run,
the runner before predicting). ``prior``: ``fixed`` keeps s; ``empirical_bayes`` trains one s per
weight and bias tensor, from s (uncertainty-baselines' choice). ``kl()``: each member's KL(q || p),
exact for Gaussians, summed over its weights.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.stacked import ConvLayer, init_bounds
from bench.seeding import member_generator

ESTIMATORS = ("flipout", "reparameterization", "local_reparameterization")
PRIORS = ("fixed", "empirical_bayes")
MEAN_INITS = ("protocol", "he_normal")
RHO_SPREAD = 0.1  # the sd of the initial rho around rho_init (uncertainty-baselines and torch-uncertainty)
VARIANCE_FLOOR = 1e-16
TRUNCATED_NORMAL_SD = 0.87962566103423978  # sd of N(0, 1) truncated to [-2, 2] (Keras' he_normal divides by it)


def inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


def signs(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.randint(0, 2, shape, device=like.device).to(like.dtype) * 2 - 1


def dense_draw(h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, bias_mu: torch.Tensor, bias_sigma: torch.Tensor,
               estimator: str, noise: dict[str, torch.Tensor]) -> torch.Tensor:
    """One dense layer's stochastic outputs (M, B, O) for inputs h (M, B, I), weights (M, I, O), biases (M, O),
    given its standard-normal and sign draws ``noise`` (a peer check passes the same draws to both sides)."""
    bias_draw = (bias_sigma * noise["bias"]).unsqueeze(1)
    if estimator == "reparameterization":
        return torch.baddbmm(bias_mu.unsqueeze(1) + bias_draw, h, mu + sigma * noise["weight"])
    mean = torch.baddbmm(bias_mu.unsqueeze(1), h, mu)
    if estimator == "local_reparameterization":
        # the floor keeps sqrt's gradient finite where a row's inputs are all zero (ReLU)
        variance = torch.bmm(h * h, sigma * sigma).clamp_min(VARIANCE_FLOOR)
        return mean + torch.sqrt(variance) * noise["outputs"] + bias_draw
    return mean + (torch.bmm(h * noise["sign_in"], sigma * noise["weight"]) + bias_draw) * noise["sign_out"]


def conv_draw(h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, bias_mu: torch.Tensor, bias_sigma: torch.Tensor,
              padding: int, estimator: str, noise: dict[str, torch.Tensor]) -> torch.Tensor:
    """One member's convolution (B, C_out, H, W) of images h (B, C_in, H, W), weights (C_out, C_in, k, k):
    reparameterization, else Flipout with a sign per row and channel."""
    if estimator == "reparameterization":
        return F.conv2d(h, mu + sigma * noise["weight"], bias_mu + bias_sigma * noise["bias"], padding=padding)
    perturbation = F.conv2d(h * noise["sign_in"], sigma * noise["weight"], bias_sigma * noise["bias"], padding=padding)
    return F.conv2d(h, mu, bias_mu, padding=padding) + perturbation * noise["sign_out"]


def dense_noise(h: torch.Tensor, weight: torch.Tensor, estimator: str) -> dict[str, torch.Tensor]:
    members, rows, out = h.shape[0], h.shape[1], weight.shape[-1]
    noise = {"bias": torch.randn(members, out, device=h.device)}
    if estimator == "local_reparameterization":
        return noise | {"outputs": torch.randn(members, rows, out, device=h.device)}
    noise["weight"] = torch.randn_like(weight)
    if estimator == "flipout":
        noise |= {"sign_in": signs(h.shape, h), "sign_out": signs((members, rows, out), h)}
    return noise


def conv_noise(h: torch.Tensor, weight: torch.Tensor, estimator: str) -> dict[str, torch.Tensor]:
    noise = {"weight": torch.randn_like(weight), "bias": torch.randn(weight.shape[0], device=h.device)}
    if estimator != "reparameterization":
        noise |= {"sign_in": signs((h.shape[0], h.shape[1], 1, 1), h),
                  "sign_out": signs((h.shape[0], weight.shape[0], 1, 1), h)}
    return noise


class VariationalNet(nn.Module):
    """``members`` mean-field Gaussian networks: optional convolutions ``convs`` on images ``input_shape``
    (ReLU, then the 2x2 max-pool where the layer has one), then ReLU dense layers of widths ``sizes``
    (sizes[0]: the flattened convolutional features, or the input). Each weight tensor's mu and rho,
    and each bias's, hold the members on their leading axis; convolutions first, then dense layers."""

    def __init__(self, members: int, sizes: list[int], convs: tuple[ConvLayer, ...] = (), input_shape: tuple[int, ...] = (),
                 kernel: int = 5, estimator: str = "flipout", prior: str = "fixed", prior_std: float = 1.0):
        super().__init__()
        if estimator not in ESTIMATORS or prior not in PRIORS:
            raise ValueError(f"estimator {estimator!r} or prior {prior!r} unknown (known: {ESTIMATORS}, {PRIORS})")
        self.members, self.sizes, self.convs, self.input_shape, self.kernel = members, list(sizes), tuple(convs), tuple(input_shape), kernel
        self.estimator, self.prior, self.prior_std = estimator, prior, prior_std
        shapes = [(c.c_out, c.c_in, kernel, kernel) for c in self.convs] + list(zip(self.sizes[:-1], self.sizes[1:]))
        outs = [c.c_out for c in self.convs] + self.sizes[1:]
        self.mu = nn.ParameterList(nn.Parameter(torch.empty(members, *s)) for s in shapes)
        self.rho = nn.ParameterList(nn.Parameter(torch.empty(members, *s)) for s in shapes)
        self.bias_mu = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for o in outs)
        self.bias_rho = nn.ParameterList(nn.Parameter(torch.empty(members, o)) for o in outs)
        prior_rho = torch.full((members, 2 * len(shapes)), inverse_softplus(prior_std))  # a weight's, then its bias's
        if prior == "empirical_bayes":
            self.prior_rho = nn.Parameter(prior_rho)
        else:
            self.register_buffer("prior_rho", prior_rho)

    @torch.no_grad()
    def reset(self, seed: int, member_ids: list[int], init: str, mean_init: str = "protocol", rho_init: float = -7.0) -> None:
        """Member i's means and rhos from the (seed, member_ids[i]) init stream, layer by layer. Means:
        ``protocol``, the protocol's init (bench.models.stacked.init_bounds); ``he_normal``, TF's truncated
        He normal for weights and biases alike, a bias's fan-in its own length (uncertainty-baselines'
        posterior means, tf1 he_normal on each variable). rho ~ N(rho_init, 0.1^2)."""
        if mean_init not in MEAN_INITS:
            raise ValueError(f"mean_init {mean_init!r} unknown (known: {', '.join(MEAN_INITS)})")
        area = self.kernel ** 2
        fans = [(c.c_in * area, c.c_out * area) for c in self.convs] + list(zip(self.sizes[:-1], self.sizes[1:]))
        for i, member in enumerate(member_ids):
            generator = member_generator(seed, member, "init")
            for mu, rho, bias_mu, bias_rho, (fan_in, fan_out) in zip(self.mu, self.rho, self.bias_mu, self.bias_rho, fans):
                if mean_init == "he_normal":
                    for mean, fan in ((mu[i], fan_in), (bias_mu[i], bias_mu.shape[1])):
                        sd = math.sqrt(2 / fan) / TRUNCATED_NORMAL_SD
                        nn.init.trunc_normal_(mean, 0.0, sd, -2 * sd, 2 * sd, generator=generator)
                else:
                    weight_bound, bias_bound = init_bounds(init, fan_in, fan_out)
                    mu[i].uniform_(-weight_bound, weight_bound, generator=generator)
                    bias_mu[i].zero_() if bias_bound is None else bias_mu[i].uniform_(-bias_bound, bias_bound, generator=generator)
                for r in (rho[i], bias_rho[i]):
                    r.normal_(rho_init, RHO_SPREAD, generator=generator)

    def shaped_like(self, members: int) -> "VariationalNet":
        return VariationalNet(members, self.sizes, self.convs, self.input_shape, self.kernel, self.estimator,
                              self.prior, self.prior_std).to(self.mu[0].device)

    @torch.no_grad()
    def select(self, members: list[int]) -> "VariationalNet":
        """A model of copies of the given members."""
        out = self.shaped_like(len(members))
        index = torch.tensor(members, device=self.mu[0].device)
        for (name, target), source in zip(out.state_dict().items(), self.state_dict().values()):
            target.copy_(source.index_select(0, index))
        return out

    def forward(self, x: torch.Tensor, dropout: bool = False) -> torch.Tensor:
        """x: (N, in) shared by all members, or (members, N, in). Returns (members, N, out): posterior
        means with ``dropout`` False, one draw of every layer's weights with True."""
        h = x.expand(self.members, *x.shape) if x.dim() == 2 else x
        sample = bool(dropout)
        layers = list(zip(self.mu, self.rho, self.bias_mu, self.bias_rho))
        if self.convs:
            h = self.features(h, layers[:len(self.convs)], sample)
        for layer, (mu, rho, bias_mu, bias_rho) in enumerate(layers[len(self.convs):]):
            if layer > 0:
                h = torch.relu(h)
            if not sample:
                h = torch.baddbmm(bias_mu.unsqueeze(1), h, mu)
                continue
            h = dense_draw(h, mu, F.softplus(rho), bias_mu, F.softplus(bias_rho), self.estimator,
                           dense_noise(h, mu, self.estimator))
        return h

    def features(self, h: torch.Tensor, layers: list, sample: bool) -> torch.Tensor:
        """The convolutional features (members, N, F) of rows (members, N, C*H*W), member by member."""
        estimator = "flipout" if self.estimator == "local_reparameterization" else self.estimator
        out = []
        for m in range(self.members):
            image = h[m].reshape(-1, *self.input_shape)
            for conv, (mu, rho, bias_mu, bias_rho) in zip(self.convs, layers):
                if sample:
                    image = conv_draw(image, mu[m], F.softplus(rho[m]), bias_mu[m], F.softplus(bias_rho[m]),
                                      conv.padding, estimator, conv_noise(image, mu[m], estimator))
                else:
                    image = F.conv2d(image, mu[m], bias_mu[m], padding=conv.padding)
                image = torch.relu(image)
                if conv.pool:
                    image = F.max_pool2d(image, 2)
            out.append(image.flatten(1))
        return torch.stack(out)

    def prior_stds(self) -> torch.Tensor:
        """(members, 2 x layers): each weight tensor's prior sd, then its bias's."""
        return F.softplus(self.prior_rho)

    def kl(self) -> torch.Tensor:
        """Each member's KL(posterior || prior), summed over all its weights and biases: shape (members,)."""
        stds = self.prior_stds()
        total = torch.zeros(self.members, device=stds.device)
        tensors = [t for layer in zip(self.mu, self.rho, self.bias_mu, self.bias_rho) for t in (layer[:2], layer[2:])]
        for i, (mu, rho) in enumerate(tensors):
            total = total + gaussian_kl(mu.flatten(1), F.softplus(rho).flatten(1), stds[:, i:i + 1]).sum(dim=1)
        return total


def gaussian_kl(mu: torch.Tensor, sigma: torch.Tensor, prior_std: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, sigma^2) || N(0, prior_std^2)), elementwise."""
    return torch.log(prior_std / sigma) + (sigma * sigma + mu * mu) / (2 * prior_std * prior_std) - 0.5
