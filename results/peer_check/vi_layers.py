"""Peer check of the harness's mean-field variational layers (bench/models/variational.py) against
bayesian-torch 0.5.0's LinearFlipout, LinearReparameterization, Conv2dFlipout and
Conv2dReparameterization, on the same weights and the same noise. It takes a few seconds on a CPU.

    pip install bayesian-torch==0.5.0
    python results/peer_check/vi_layers.py       # writes results/peer_check/vi_layers.csv

For each of (dense, conv) x (flipout, reparameterization):

* ``same_noise``: the peer layer (prior N(0, s^2), mu and rho set to seeded random values) runs its
  forward under ``torch.manual_seed(k)``. The script then re-seeds ``torch.manual_seed(k)`` and draws
  what the peer's forward drew, in its order and shapes (read from its source: the dense layers draw
  eps_weight, eps_bias, then the Flipout signs of x and of the outputs; Conv2dFlipout draws the two
  signs first, then eps_kernel, eps_bias), and passes those draws to bench's ``dense_draw`` /
  ``conv_draw`` with the same mu and rho (dense weights transposed to (in, out), member axis M=1).
  The outputs must agree to 1e-5 (largest absolute difference).
* ``flipout_bias`` (Flipout only): the same with the weights' sigma ~ 0 (rho = -50), so the
  perturbation is the bias's alone: both put it inside the sign-flipped term.
* ``kl``: bench's ``VariationalNet.kl()`` (gaussian_kl summed over weights and biases) against the
  peer's KL. bayesian-torch's ``kl_div`` returns the mean over a tensor's elements, and a layer
  returns kl_div(weight) + kl_div(bias); the ``kl_sum`` row compares bench's sum with the peer's
  per-tensor means times each tensor's element count, the ``kl_peer_convention`` row bench's
  per-tensor means with the peer's raw value. bayesian-torch's ``prior_variance`` fills
  ``prior_weight_sigma`` and is used as the sd in kl_div, so the peer is given s, not s^2.

``local_reparameterization`` (bayesian-torch has no such layer): bench's dense draw over 2000 passes
(noise from bench's ``dense_noise``) against the analytic N(h @ mu + b_mu, h^2 @ sigma^2 +
sigma_b^2): each output's mean and variance, and the covariance of two rows' outputs in a pass
(sigma_b^2: the bias is drawn once per pass), in standard errors.
"""
from __future__ import annotations

import importlib.metadata
import math
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from bayesian_torch.layers import Conv2dFlipout, Conv2dReparameterization, LinearFlipout, LinearReparameterization
from bench.models.stacked import ConvLayer
from bench.models.variational import VariationalNet, conv_draw, dense_draw, dense_noise, gaussian_kl
from bench.store import write_csv

HERE = Path(__file__).parent
PEER = f"bayesian-torch {importlib.metadata.version('bayesian-torch')}"
PRIOR_SD = 0.5           # s: not 1, so that an sd read as a variance would show in the KL
OUTPUT_TOLERANCE = 1e-5  # largest absolute difference of the outputs (float32)
KL_TOLERANCE = 1e-5      # relative: the sums run over up to 108 float32 terms of size ~3
Z_TOLERANCE = 5.0        # largest |z| over the elements of a statistical row
DENSE = dict(inputs=7, outputs=5, rows=4)
CONV = dict(c_in=3, c_out=4, kernel=3, padding=1, rows=2, size=6)
PEER_CLASSES = {("dense", "flipout"): LinearFlipout, ("dense", "reparameterization"): LinearReparameterization,
                ("conv", "flipout"): Conv2dFlipout, ("conv", "reparameterization"): Conv2dReparameterization}
COLUMNS = ["check", "layer", "estimator", "quantity", "bench", "peer", "difference", "tolerance", "pass", "note",
           "peer_implementation"]


def build_peer(layer: str, estimator: str, seed: int, prior_variance: float = PRIOR_SD):
    """The peer layer with prior N(0, s^2) and seeded random mu and rho (the weights' sigma about 0.03 to 0.2)."""
    cls = PEER_CLASSES[layer, estimator]
    if layer == "dense":
        peer = cls(DENSE["inputs"], DENSE["outputs"], prior_mean=0.0, prior_variance=prior_variance)
    else:
        peer = cls(CONV["c_in"], CONV["c_out"], CONV["kernel"], padding=CONV["padding"], prior_mean=0.0,
                   prior_variance=prior_variance)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in peer.named_parameters():
            if name.startswith("mu"):
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
            else:
                parameter.copy_(-2.5 + 0.5 * torch.randn(parameter.shape, generator=generator))
    return peer


def weights(peer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The peer's (mu, rho, bias mu, bias rho) in torch's layout."""
    mu = peer.mu_weight if hasattr(peer, "mu_weight") else peer.mu_kernel
    rho = peer.rho_weight if hasattr(peer, "rho_weight") else peer.rho_kernel
    return mu.detach(), rho.detach(), peer.mu_bias.detach(), peer.rho_bias.detach()


def replay_noise(layer: str, estimator: str, x: torch.Tensor, peer, seed: int) -> dict[str, torch.Tensor]:
    """The draws the peer's forward made under torch.manual_seed(seed), in its order and shapes."""
    mu, _, bias_mu, _ = weights(peer)
    torch.manual_seed(seed)
    noise: dict[str, torch.Tensor] = {}
    if layer == "conv" and estimator == "flipout":
        # Conv2dFlipout.forward: sign_input, sign_output (outputs = conv2d(x, mu_kernel)), eps_kernel, eps_bias
        outputs_shape = F.conv2d(x, mu, bias_mu, padding=CONV["padding"]).shape
        noise["sign_in"] = x.clone().uniform_(-1, 1).sign()
        noise["sign_out"] = torch.empty(outputs_shape).uniform_(-1, 1).sign()
        noise["weight"] = torch.empty(mu.shape).normal_()
        noise["bias"] = torch.empty(bias_mu.shape).normal_()
        return noise
    # LinearFlipout, LinearReparameterization, Conv2dReparameterization: eps_weight, eps_bias first
    noise["weight"] = torch.empty(mu.shape).normal_()
    noise["bias"] = torch.empty(bias_mu.shape).normal_()
    if estimator == "flipout":  # LinearFlipout then: sign_input, sign_output (outputs = linear(x, mu_weight))
        noise["sign_in"] = x.clone().uniform_(-1, 1).sign()
        noise["sign_out"] = torch.empty(x.shape[0], mu.shape[0]).uniform_(-1, 1).sign()
    return noise


def bench_forward(layer: str, estimator: str, x: torch.Tensor, peer, noise: dict[str, torch.Tensor]) -> torch.Tensor:
    """bench's dense_draw / conv_draw on the peer's mu and rho and the replayed noise."""
    mu, rho, bias_mu, bias_rho = weights(peer)
    sigma, bias_sigma = F.softplus(rho), F.softplus(bias_rho)
    if layer == "conv":
        return conv_draw(x, mu, sigma, bias_mu, bias_sigma, CONV["padding"], estimator, noise)
    member = {"weight": noise["weight"].T.unsqueeze(0), "bias": noise["bias"].unsqueeze(0)}  # (1, I, O), (1, O)
    if estimator == "flipout":
        member |= {"sign_in": noise["sign_in"].unsqueeze(0), "sign_out": noise["sign_out"].unsqueeze(0)}
    out = dense_draw(x.unsqueeze(0), mu.T.unsqueeze(0), sigma.T.unsqueeze(0), bias_mu.unsqueeze(0),
                     bias_sigma.unsqueeze(0), estimator, member)
    return out[0]


def bench_net(layer: str, peer) -> VariationalNet:
    """A one-member VariationalNet holding the peer's layer (prior sd s, fixed), for its kl()."""
    mu, rho, bias_mu, bias_rho = weights(peer)
    if layer == "dense":
        net = VariationalNet(1, [DENSE["inputs"], DENSE["outputs"]], prior_std=PRIOR_SD)
        mu, rho = mu.T, rho.T
    else:
        size = (CONV["size"], CONV["size"])
        conv = ConvLayer(CONV["c_in"], CONV["c_out"], CONV["padding"], 1, False, size, size)
        net = VariationalNet(1, [CONV["c_out"] * CONV["size"] ** 2], convs=(conv,),
                             input_shape=(CONV["c_in"], *size), kernel=CONV["kernel"], prior_std=PRIOR_SD)
    with torch.no_grad():
        for target, source in zip((net.mu[0], net.rho[0], net.bias_mu[0], net.bias_rho[0]), (mu, rho, bias_mu, bias_rho)):
            target.copy_(source.unsqueeze(0))
    return net


def row(check, layer, estimator, quantity, bench, peer, tolerance, note, peer_implementation, relative=False,
        difference=None, passed=None) -> dict:
    difference = bench - peer if difference is None else difference
    if passed is None and tolerance is not None:
        measure = abs(difference) / abs(peer) if relative else abs(difference)
        passed = bool(measure <= tolerance)
    return dict(check=check, layer=layer, estimator=estimator, quantity=quantity, bench=bench, peer=peer,
                difference=difference, tolerance=tolerance, pass_=passed, note=note,
                peer_implementation=peer_implementation)


def layer_rows(layer: str, estimator: str, seed: int) -> list[dict]:
    cls = PEER_CLASSES[layer, estimator].__name__
    implementation = f"{PEER} {cls}"
    peer = build_peer(layer, estimator, seed)
    data = torch.Generator().manual_seed(1000 + seed)
    if layer == "dense":
        x = torch.randn(DENSE["rows"], DENSE["inputs"], generator=data)
    else:
        x = torch.randn(CONV["rows"], CONV["c_in"], CONV["size"], CONV["size"], generator=data)
    rows = []

    # same weights, same noise
    with torch.no_grad():
        torch.manual_seed(seed)
        peer_out, peer_kl = peer(x)
        noise = replay_noise(layer, estimator, x, peer, seed)
        bench_out = bench_forward(layer, estimator, x, peer, noise)
        control = bench_forward(layer, estimator, x, peer, replay_noise(layer, estimator, x, peer, seed + 1))
    difference = float((bench_out - peer_out).abs().max())
    control_difference = float((control - peer_out).abs().max())
    note = (f"largest |bench - peer| over the {peer_out.numel()} outputs; bench and peer: the largest |output| of each; "
            f"control: bench on the draws of seed {seed + 1} differs by {control_difference:.3g}")
    if layer == "conv" and estimator == "flipout":
        note = ("differs by design in the noise's structure, compared on the peer's: bayesian-torch's Conv2dFlipout "
                "draws a sign per element of the input (B, C_in, H, W) and of the output (B, C_out, H, W); bench's "
                "conv_noise draws one per row and channel, (B, C, 1, 1), broadcast over positions (Wen et al. 2018, "
                "TFP's Conv2DFlipout), which keeps the one weight draw shared across an image's positions; per-element "
                "signs leave each output's marginal the same but decorrelate the positions. conv_draw broadcasts, so "
                "it is fed the peer's full-shape signs here; " + note)
    if estimator == "flipout":
        note += "; the bias perturbation sits inside the sign-flipped term on both sides (the flipout_bias row isolates it)"
    rows.append(row("same_noise", layer, estimator, "output_max_abs_difference", float(bench_out.abs().max()),
                    float(peer_out.abs().max()), OUTPUT_TOLERANCE, note, implementation, difference=difference))

    # Flipout's bias alone: weights' sigma ~ 0
    if estimator == "flipout":
        with torch.no_grad():
            (peer.rho_weight if layer == "dense" else peer.rho_kernel).fill_(-50.0)
            torch.manual_seed(seed)
            peer_out, _ = peer(x)
            noise = replay_noise(layer, estimator, x, peer, seed)
            bench_out = bench_forward(layer, estimator, x, peer, noise)
            mu, _, bias_mu, bias_rho = weights(peer)
            if layer == "dense":
                mean, bias_draw = F.linear(x, mu, bias_mu), F.softplus(bias_rho) * noise["bias"]
            else:
                mean = F.conv2d(x, mu, bias_mu, padding=CONV["padding"])
                bias_draw = (F.softplus(bias_rho) * noise["bias"]).view(1, -1, 1, 1)
            outside = mean + bias_draw
        note = (f"weights' rho = -50 (sigma ~ 2e-22): the perturbation is sigma_b * eps_b * sign_out on both sides; "
                f"the bias perturbation outside the sign (mean + sigma_b * eps_b) would differ from the peer by "
                f"{float((outside - peer_out).abs().max()):.3g}")
        rows.append(row("flipout_bias", layer, estimator, "output_max_abs_difference", float(bench_out.abs().max()),
                        float(peer_out.abs().max()), OUTPUT_TOLERANCE, note, implementation,
                        difference=float((bench_out - peer_out).abs().max())))
        peer = build_peer(layer, estimator, seed)  # the original rho again for the KL

    # KL
    with torch.no_grad():
        torch.manual_seed(seed)
        _, peer_kl = peer(x)
        mu, rho, bias_mu, bias_rho = weights(peer)
        per_tensor = [(peer.kl_div(mu, torch.log1p(torch.exp(rho)), peer.prior_weight_mu, peer.prior_weight_sigma), mu.numel()),
                      (peer.kl_div(bias_mu, torch.log1p(torch.exp(bias_rho)), peer.prior_bias_mu, peer.prior_bias_sigma),
                       bias_mu.numel())]
        peer_sum = float(sum(value * count for value, count in per_tensor))
        bench_kl = float(bench_net(layer, peer).kl()[0])
        s = torch.tensor(PRIOR_SD)
        bench_means = float(sum(gaussian_kl(m, F.softplus(r), s).mean() for m, r in ((mu, rho), (bias_mu, bias_rho))))
        reference = sum(gaussian_kl(m.double(), F.softplus(r.double()), s.double()).sum()
                        for m, r in ((mu, rho), (bias_mu, bias_rho)))
        as_variance = build_peer(layer, estimator, seed, prior_variance=PRIOR_SD ** 2)
        torch.manual_seed(seed)
        _, kl_as_variance = as_variance(x)
    n_weight, n_bias = mu.numel(), bias_mu.numel()
    note = (f"bench: VariationalNet.kl() (gaussian_kl summed over the {n_weight} weights and {n_bias} biases); peer: "
            f"bayesian-torch's kl_div returns a tensor's per-element mean, so its returned kl {float(peer_kl):.7g} "
            f"(= mean over weights + mean over biases) is rebuilt as {float(per_tensor[0][0]):.7g} x {n_weight} + "
            f"{float(per_tensor[1][0]):.7g} x {n_bias}; prior N(0, {PRIOR_SD}^2) given as prior_variance={PRIOR_SD} "
            f"(the library uses it as the sd: prior_variance={PRIOR_SD ** 2} would give a raw kl of {float(kl_as_variance):.7g}, "
            f"not {float(peer_kl):.7g}); "
            f"both within {max(abs(bench_kl - float(reference)), abs(peer_sum - float(reference))):.2g} of the float64 "
            f"sum {float(reference):.9g}; tolerance relative")
    rows.append(row("kl", layer, estimator, "kl_sum", bench_kl, peer_sum, KL_TOLERANCE, note, implementation, relative=True))
    note = (f"the peer's raw returned kl (its convention: per-tensor means, summed over weight and bias) against bench's "
            f"gaussian_kl averaged per tensor and summed; a loss using the raw value weighs the weights' KL 1/{n_weight} "
            f"and the biases' 1/{n_bias} of the ELBO's sum; tolerance relative")
    rows.append(row("kl", layer, estimator, "kl_peer_convention", bench_means, float(peer_kl), KL_TOLERANCE, note,
                    implementation, relative=True))
    return rows


def local_reparameterization_rows(seed: int = 7, passes: int = 2000) -> list[dict]:
    """bench's local reparameterization dense draw over ``passes`` passes against its analytic moments."""
    inputs, outputs, batch = 7, 5, 8
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(1, batch, inputs, generator=generator)
    mu = 0.3 * torch.randn(1, inputs, outputs, generator=generator)
    sigma = F.softplus(-2.0 + 0.5 * torch.randn(1, inputs, outputs, generator=generator))
    bias_mu = 0.3 * torch.randn(1, outputs, generator=generator)
    bias_sigma = 0.3 + 0.05 * torch.rand(1, outputs, generator=generator)
    torch.manual_seed(seed)
    with torch.no_grad():
        draws = torch.stack([dense_draw(h, mu, sigma, bias_mu, bias_sigma, "local_reparameterization",
                                        dense_noise(h, mu, "local_reparameterization"))[0] for _ in range(passes)]).double()
    h64, mu64, s64, bmu64, bs64 = (t.double()[0] for t in (h, mu, sigma, bias_mu, bias_sigma))
    mean = h64 @ mu64 + bmu64                        # (B, O)
    variance = (h64 * h64) @ (s64 * s64) + bs64 ** 2  # (B, O)
    covariance = bs64 ** 2                          # (O,): rows of one pass share the bias draw

    empirical_mean = draws.mean(0)
    empirical_variance = draws.var(0, unbiased=True)
    centred = draws - empirical_mean
    pairs = [(a, b) for a in range(batch) for b in range(a + 1, batch)]
    empirical_covariance = torch.stack([(centred[:, a] * centred[:, b]).sum(0) / (passes - 1) for a, b in pairs])
    analytic_covariance = covariance.expand(len(pairs), -1)

    z_mean = (empirical_mean - mean) / torch.sqrt(variance / passes)
    z_variance = (empirical_variance - variance) / (variance * math.sqrt(2 / (passes - 1)))
    pair_variance = torch.stack([variance[a] * variance[b] for a, b in pairs])
    covariance_se = torch.sqrt((pair_variance + analytic_covariance ** 2) / passes)
    z_covariance = (empirical_covariance - analytic_covariance) / covariance_se
    # what the check would see were the bias drawn per row (covariance 0) or left out of the variance
    z_per_row = float((analytic_covariance / covariance_se).min())
    z_no_bias = float(((empirical_variance - (variance - bs64 ** 2)) / ((variance - bs64 ** 2) * math.sqrt(2 / (passes - 1)))).abs().max())

    implementation = f"analytic N(h @ mu + b_mu, h^2 @ sigma^2 + sigma_b^2) ({PEER} has no local reparameterization layer)"
    rows = []
    for quantity, z, empirical, analytic, what in (
            ("output_mean", z_mean, empirical_mean, mean, "each output's mean, standard error sqrt(var / n)"),
            ("output_variance", z_variance, empirical_variance, variance,
             "each output's variance (sigma_b^2 included), standard error var * sqrt(2 / (n - 1)) (Gaussian)"),
            ("row_covariance", z_covariance, empirical_covariance, analytic_covariance,
             "covariance of two rows' outputs in a pass, sigma_b^2 (the bias drawn once per pass), standard error "
             "sqrt((var_a var_b + cov^2) / n)")):
        worst = int(z.abs().flatten().argmax())
        count = z.numel()
        note = (f"{passes} passes of bench's dense_draw(estimator='local_reparameterization') with dense_noise's draws, "
                f"{batch} rows x {inputs} inputs x {outputs} outputs; {what}; difference = the largest |z| over the "
                f"{count} elements (bench, peer: that element's empirical and analytic values); tolerance {Z_TOLERANCE:g} "
                f"standard errors: a correct draw fails with probability at most {count} x P(|Z| > {Z_TOLERANCE:g}) = "
                f"{count * math.erfc(Z_TOLERANCE / math.sqrt(2)):.1g} (Bonferroni)")
        if quantity == "row_covariance":
            note += f"; a bias drawn per row (covariance 0) would give |z| >= {z_per_row:.1f}"
        if quantity == "output_variance":
            note += f"; the bias's variance left out of the analytic value would give |z| up to {z_no_bias:.1f}"
        rows.append(row("local_reparameterization_moments", "dense", "local_reparameterization", quantity,
                        float(empirical.flatten()[worst]), float(analytic.flatten()[worst]), Z_TOLERANCE, note,
                        implementation, difference=float(z.abs().max()),
                        passed=bool(float(z.abs().max()) <= Z_TOLERANCE)))
    return rows


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for seed, (layer, estimator) in enumerate(PEER_CLASSES):
        rows += layer_rows(layer, estimator, seed)
    rows += local_reparameterization_rows()
    table = pd.DataFrame(rows).rename(columns={"pass_": "pass"})[COLUMNS]
    write_csv(table, HERE / "vi_layers.csv")
    print(table[["check", "layer", "estimator", "quantity", "difference", "tolerance", "pass"]].to_string())


if __name__ == "__main__":
    main()
