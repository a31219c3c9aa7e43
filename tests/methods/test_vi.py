"""Mean-field variational inference (bench.models.variational, methods/vi.py): the KL by hand, the
posterior-mean network against ordinary torch layers, the three estimators' draws against their
analytic moments, Flipout's reduction to the reparameterization draw, the initialisations, the
method's options and predictive, and tiny end-to-end runs."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import methods
from bench.config import make_protocol
from bench.conformance import check_method, toy_split
from bench.errors import ConfigError
from bench.models.registry import ArchSpec
from bench.models.variational import (ESTIMATORS, MEAN_INITS, PRIORS, TRUNCATED_NORMAL_SD, VariationalNet, conv_draw,
                                      conv_noise, dense_draw, dense_noise, gaussian_kl, inverse_softplus)
from bench.options import validate
from bench.training.loop import train
from methods.base import Batch
from methods.vi import VariationalInference

MNIST = (1, 28, 28)
PADDINGS = {"lenet5": (2, 0, 0), "lenet5_same": (2, 2, 2)}  # each conv's padding; 2x2 pool after the first two
FEATURES, CLASSES = 6, 3


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These tests run thousands of tiny operations, which two threads on a loaded two-core machine make
    tens of times slower (each waits for the other at every operation); none depends on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(**options) -> VariationalInference:
    cls = methods.get_method("vi")
    return cls(**validate(cls, options, "method vi"))


def softplus(x):
    return np.log1p(np.exp(np.asarray(x, dtype=np.float64)))


def numpy_kl(mu, rho, prior_std) -> float:
    """sum of log(s / sigma) + (sigma^2 + mu^2) / (2 s^2) - 1/2, sigma = log(1 + exp(rho)), in float64."""
    mu, sigma = np.asarray(mu, dtype=np.float64), softplus(rho)
    return float(np.sum(np.log(prior_std / sigma) + (sigma ** 2 + mu ** 2) / (2 * prior_std ** 2) - 0.5))


def set_layers(model: VariationalNet, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Every mu and rho of ``model`` set to known values (mu in [-1, 1], rho in [-3, 1]); returns
    (mu, rho, bias_mu, bias_rho) per layer as numpy arrays."""
    rng = np.random.default_rng(seed)
    layers = []
    with torch.no_grad():
        for tensors in zip(model.mu, model.rho, model.bias_mu, model.bias_rho):
            values = []
            for i, t in enumerate(tensors):
                v = rng.uniform(-1, 1, t.shape) if i % 2 == 0 else rng.uniform(-3, 1, t.shape)
                t.copy_(torch.from_numpy(v))
                values.append(t.detach().numpy().astype(np.float64))  # what float32 kept
            layers.append(tuple(values))
    return layers


def lenet(arch="lenet5", members=(0, 1), seed=0, **options) -> VariationalNet:
    return ArchSpec(arch, MNIST, 10).build(seed, list(members), layers="variational", **options)


def images(n=3, seed=0) -> torch.Tensor:
    return torch.rand(n, 784, generator=torch.Generator().manual_seed(seed))


# -- 1. the KL, by hand ------------------------------------------------------------------------------

def test_inverse_softplus_inverts_softplus():
    for y in (1e-3, 0.1, 1.0, 5.0):
        assert float(softplus(inverse_softplus(y))) == pytest.approx(y, rel=1e-12)


def test_kl_of_a_one_layer_net_equals_the_closed_form_sum_over_weights_and_biases():
    model = VariationalNet(1, [3, 2], prior_std=0.5)
    ((mu, rho, bias_mu, bias_rho),) = set_layers(model)
    expected = numpy_kl(mu, rho, 0.5) + numpy_kl(bias_mu, bias_rho, 0.5)
    kl = model.kl()
    assert kl.shape == (1,)
    assert kl.item() == pytest.approx(expected, rel=1e-5)
    # the elementwise term itself, on one number: mu 0.3, sigma 0.2, s 0.5
    one = gaussian_kl(torch.tensor(0.3), torch.tensor(0.2), torch.tensor(0.5)).item()
    assert one == pytest.approx(math.log(0.5 / 0.2) + (0.04 + 0.09) / 0.5 - 0.5, rel=1e-6)


def test_kl_is_per_member_and_reads_each_tensors_own_prior_sd():
    model = VariationalNet(2, [3, 4, 2], prior="empirical_bayes", prior_std=1.0)
    layers = set_layers(model, seed=1)
    stds = np.array([[0.5, 2.0, 1.5, 0.8], [1.0, 0.3, 0.7, 3.0]])  # per member: w0, b0, w1, b1
    with torch.no_grad():
        model.prior_rho.copy_(torch.from_numpy(stds + np.log(-np.expm1(-stds))))  # inverse softplus
    torch.testing.assert_close(model.prior_stds(), torch.from_numpy(stds).float())
    expected = []
    for m in range(2):
        tensors = [(mu[m], rho[m]) for layer in layers for mu, rho in (layer[:2], layer[2:])]
        expected.append(sum(numpy_kl(mu, rho, s) for (mu, rho), s in zip(tensors, stds[m])))
    assert model.kl().tolist() == pytest.approx(expected, rel=1e-5)


def test_empirical_bayes_trains_the_prior_sd_and_a_fixed_prior_does_not():
    eb = VariationalNet(1, [3, 2], prior="empirical_bayes", prior_std=0.7)
    ((mu, rho, bias_mu, bias_rho),) = set_layers(eb)
    assert any(p is eb.prior_rho for p in eb.parameters())
    eb.kl().sum().backward()
    # d KL / d s = sum(1/s - (sigma^2 + mu^2) / s^3), and d s / d prior_rho = sigmoid(prior_rho)
    prior_rho = inverse_softplus(0.7)
    sigmoid = 1 / (1 + math.exp(-prior_rho))
    expected = [sigmoid * float(np.sum(1 / 0.7 - (softplus(r) ** 2 + m ** 2) / 0.7 ** 3))
                for m, r in ((mu, rho), (bias_mu, bias_rho))]
    assert eb.prior_rho.grad[0].tolist() == pytest.approx(expected, rel=1e-4)

    fixed = VariationalNet(1, [3, 2], prior="fixed", prior_std=0.7)
    assert not any(p is fixed.prior_rho for p in fixed.parameters())
    assert not fixed.prior_rho.requires_grad and "prior_rho" in dict(fixed.named_buffers())
    torch.testing.assert_close(fixed.prior_stds(), torch.full((1, 2), 0.7))


def test_unknown_estimator_or_prior_is_refused():
    with pytest.raises(ValueError, match="unknown"):
        VariationalNet(1, [3, 2], estimator="nope")
    with pytest.raises(ValueError, match="unknown"):
        VariationalNet(1, [3, 2], prior="nope")
    assert set(ESTIMATORS) == {"flipout", "reparameterization", "local_reparameterization"}
    assert set(PRIORS) == {"fixed", "empirical_bayes"} and set(MEAN_INITS) == {"protocol", "he_normal"}


# -- 2. the network of posterior means ---------------------------------------------------------------

def test_mlp_posterior_means_are_a_relu_chain_of_the_means():
    model = ArchSpec.mlp(4, (5, 6), 3).build(0, [0, 1], layers="variational", rho_init=0.0)
    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(0))
    out = model(x, dropout=False)
    assert out.shape == (2, 7, 3)
    for m in range(2):
        h = x
        for layer, (w, b) in enumerate(zip(model.mu, model.bias_mu)):
            h = (torch.relu(h) if layer else h) @ w[m].detach() + b[m].detach()
        torch.testing.assert_close(out[m], h)
    torch.testing.assert_close(model(x), out, rtol=0, atol=0)  # deterministic, whatever sigma
    # per-member rows (M, N, D) are read member by member
    own = torch.stack([x, x.flip(0)])
    torch.testing.assert_close(model(own)[1], model(x.flip(0))[1])


@pytest.mark.parametrize("arch", sorted(PADDINGS))
def test_lenet_posterior_means_equal_ordinary_conv_relu_pool_layers(arch):
    model = lenet(arch, rho_init=0.0)
    x = images(3)
    out = model(x, dropout=False)
    assert out.shape == (2, 3, 10)
    for m in range(2):
        h = x.reshape(-1, *MNIST)
        for layer, padding in enumerate(PADDINGS[arch]):
            h = torch.relu(F.conv2d(h, model.mu[layer][m].detach(), model.bias_mu[layer][m].detach(), padding=padding))
            h = F.max_pool2d(h, 2) if layer < 2 else h
        h = h.flatten(1)
        dense = [(model.mu[i][m].detach(), model.bias_mu[i][m].detach()) for i in (3, 4)]
        assert dense[0][0].shape[1] == 84 and dense[1][0].shape == (84, 10)
        h = torch.relu(F.linear(h, dense[0][0].T, dense[0][1]))
        torch.testing.assert_close(out[m], F.linear(h, dense[1][0].T, dense[1][1]))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_with_vanishing_sigma_every_estimators_draw_is_the_posterior_mean_network(estimator):
    model = lenet("lenet5", members=(0,), estimator=estimator, rho_init=-40.0)  # sigma ~ 4e-18
    x = images(2, seed=1)
    torch.testing.assert_close(model(x, dropout=True), model(x, dropout=False), rtol=1e-5, atol=1e-5)
    noisy = lenet("lenet5", members=(0,), estimator=estimator, rho_init=0.0)
    assert not torch.allclose(noisy(x, dropout=True), noisy(x, dropout=False), atol=1e-3)


# -- 3. the estimators agree in distribution ---------------------------------------------------------

DRAWS = 4000


def dense_case():
    """One dense layer of 3 inputs and 2 outputs, its moments repeated over DRAWS members."""
    g = torch.Generator().manual_seed(0)
    h = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.0, -1.0]])                    # (B=2, I=3)
    mu, bias_mu = torch.randn(3, 2, generator=g), torch.randn(2, generator=g)
    sigma, bias_sigma = torch.rand(3, 2, generator=g) + 0.2, torch.tensor([0.3, 0.6])
    mean = h @ mu + bias_mu
    variance = (h * h) @ (sigma * sigma) + bias_sigma ** 2
    args = (h.expand(DRAWS, 2, 3), mu.expand(DRAWS, 3, 2), sigma.expand(DRAWS, 3, 2),
            bias_mu.expand(DRAWS, 2), bias_sigma.expand(DRAWS, 2))
    return args, mean, variance


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_dense_draws_have_the_analytic_mean_and_variance(estimator):
    torch.manual_seed(0)
    args, mean, variance = dense_case()
    out = dense_draw(*args, estimator, dense_noise(args[0], args[1], estimator))
    assert out.shape == (DRAWS, 2, 2)
    # 5 standard errors of the mean; the variance's relative standard error is sqrt(2 / DRAWS) ~ 2.2%
    assert (out.mean(0) - mean).abs().le(5 * (variance / DRAWS).sqrt()).all(), (out.mean(0), mean)
    torch.testing.assert_close(out.var(0), variance, rtol=0.1, atol=0)


def test_flipout_decorrelates_rows_and_reparameterization_shares_one_draw():
    torch.manual_seed(1)
    args, _, variance = dense_case()
    same = args[0][:, :1].expand(DRAWS, 2, 3)  # two identical rows
    reparam = dense_draw(same, *args[1:], "reparameterization", dense_noise(same, args[1], "reparameterization"))
    assert torch.equal(reparam[:, 0], reparam[:, 1])
    flip = dense_draw(same, *args[1:], "flipout", dense_noise(same, args[1], "flipout"))
    assert (flip[:, 0] != flip[:, 1]).float().mean() > 0.9
    centred = flip - flip.mean(0)
    correlation = (centred[:, 0] * centred[:, 1]).mean(0) / centred.var(0).mean(1)
    assert correlation.abs().max() < 0.1, correlation  # independent signs per row: uncorrelated

    # through the model: one pass on identical rows
    x = torch.ones(2, 3)
    for estimator, equal in (("reparameterization", True), ("flipout", False), ("local_reparameterization", False)):
        model = ArchSpec.mlp(3, (4,), 2).build(0, [0, 1], layers="variational", estimator=estimator, rho_init=0.0)
        out = model(x, dropout=True)
        assert torch.equal(out[:, 0], out[:, 1]) is equal, estimator


# -- 4. Flipout with all signs +1 is the reparameterization draw --------------------------------------

def test_dense_flipout_with_unit_signs_is_the_reparameterization_draw():
    torch.manual_seed(2)
    h, mu, sigma = torch.randn(2, 5, 3), torch.randn(2, 3, 4), torch.rand(2, 3, 4)
    bias_mu, bias_sigma = torch.randn(2, 4), torch.rand(2, 4)
    noise = dense_noise(h, mu, "flipout")
    reparam = dense_draw(h, mu, sigma, bias_mu, bias_sigma, "reparameterization", noise)
    ones = noise | {"sign_in": torch.ones_like(noise["sign_in"]), "sign_out": torch.ones_like(noise["sign_out"])}
    torch.testing.assert_close(dense_draw(h, mu, sigma, bias_mu, bias_sigma, "flipout", ones), reparam)
    torch.testing.assert_close(reparam, torch.baddbmm((bias_mu + bias_sigma * noise["bias"]).unsqueeze(1), h,
                                                      mu + sigma * noise["weight"]))
    # all signs -1: the weight perturbation sees sign_in * sign_out = +1, the bias's sign_out alone
    minus = noise | {"sign_in": -ones["sign_in"], "sign_out": -ones["sign_out"]}
    negated_bias = dense_draw(h, mu, sigma, bias_mu, bias_sigma, "reparameterization", noise | {"bias": -noise["bias"]})
    torch.testing.assert_close(dense_draw(h, mu, sigma, bias_mu, bias_sigma, "flipout", minus), negated_bias)
    flipped = dense_draw(h, mu, sigma, bias_mu, bias_sigma, "flipout", noise)
    assert not torch.allclose(flipped, reparam)  # the drawn signs do change it
    assert set(noise["sign_in"].unique().tolist()) == {-1.0, 1.0} and noise["sign_out"].shape == (2, 5, 4)


def test_conv_flipout_with_unit_signs_is_the_reparameterization_draw():
    torch.manual_seed(3)
    h = torch.randn(4, 2, 6, 6)
    mu, sigma = torch.randn(3, 2, 3, 3), torch.rand(3, 2, 3, 3)
    bias_mu, bias_sigma = torch.randn(3), torch.rand(3)
    noise = conv_noise(h, mu, "flipout")
    assert noise["sign_in"].shape == (4, 2, 1, 1) and noise["sign_out"].shape == (4, 3, 1, 1)
    for padding in (0, 1):
        reparam = conv_draw(h, mu, sigma, bias_mu, bias_sigma, padding, "reparameterization", noise)
        ones = noise | {"sign_in": torch.ones_like(noise["sign_in"]), "sign_out": torch.ones_like(noise["sign_out"])}
        flip = conv_draw(h, mu, sigma, bias_mu, bias_sigma, padding, "flipout", ones)
        torch.testing.assert_close(flip, reparam, rtol=1e-5, atol=1e-5)
        expected = F.conv2d(h, mu + sigma * noise["weight"], bias_mu + bias_sigma * noise["bias"], padding=padding)
        torch.testing.assert_close(reparam, expected)
        assert not torch.allclose(conv_draw(h, mu, sigma, bias_mu, bias_sigma, padding, "flipout", noise), reparam)
    # the signs' roles: sign_in flips the weight perturbation only, sign_out the weight's and the bias's
    ones, negate = torch.ones_like(noise["sign_in"]), {"weight": -noise["weight"], "bias": -noise["bias"]}
    for sign_in, sign_out, flipped in ((-1, 1, ("weight",)), (1, -1, ("weight", "bias"))):
        signed = noise | {"sign_in": sign_in * ones, "sign_out": sign_out * torch.ones_like(noise["sign_out"])}
        torch.testing.assert_close(conv_draw(h, mu, sigma, bias_mu, bias_sigma, 1, "flipout", signed),
                                   conv_draw(h, mu, sigma, bias_mu, bias_sigma, 1, "reparameterization",
                                             noise | {k: negate[k] for k in flipped}), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("estimator", ["reparameterization", "flipout"])
def test_conv_draws_have_the_analytic_mean_and_variance(estimator):
    torch.manual_seed(4)
    h = torch.randn(2, 2, 4, 4)  # two different images, each of 2 channels
    mu, sigma = torch.randn(2, 2, 3, 3), torch.rand(2, 2, 3, 3) + 0.2
    bias_mu, bias_sigma = torch.randn(2), torch.tensor([0.3, 0.6])
    mean = F.conv2d(h, mu, bias_mu, padding=1)
    variance = F.conv2d(h * h, sigma * sigma, bias_sigma ** 2, padding=1)
    draws = 2000
    out = torch.stack([conv_draw(h, mu, sigma, bias_mu, bias_sigma, 1, estimator, conv_noise(h, mu, estimator))
                       for _ in range(draws)])
    assert (out.mean(0) - mean).abs().le(5 * (variance / draws).sqrt()).all()
    torch.testing.assert_close(out.var(0), variance, rtol=0.15, atol=0)


@pytest.mark.parametrize(("estimator", "shared"), [("reparameterization", True), ("flipout", False),
                                                   ("local_reparameterization", False)])
def test_conv_features_of_identical_images_share_a_draw_only_under_reparameterization(estimator, shared):
    # local_reparameterization's convolutions use Flipout: their weights are shared by every position
    model = lenet("lenet5", members=(0,), estimator=estimator, rho_init=0.0)
    x = images(1).expand(1, 3, 784)
    layers = list(zip(model.mu, model.rho, model.bias_mu, model.bias_rho))[:3]
    with torch.no_grad():
        features = model.features(x, layers, sample=True)
    assert features.shape == (1, 3, 120)
    assert torch.equal(features[0, 0], features[0, 1]) is shared
    assert torch.equal(features[0, 1], features[0, 2]) is shared


# -- 5. the initialisation ---------------------------------------------------------------------------

def test_rho_is_drawn_around_rho_init_with_sd_one_tenth():
    model = ArchSpec.mlp(200, (100,), 3).build(0, [0], layers="variational", rho_init=-3.0)
    rho = model.rho[0].detach().flatten()
    assert rho.numel() == 20_000
    assert rho.mean().item() == pytest.approx(-3.0, abs=0.005)
    assert rho.std().item() == pytest.approx(0.1, rel=0.05)
    bias_rho = torch.cat([b.detach().flatten() for b in model.bias_rho])
    assert bias_rho.mean().item() == pytest.approx(-3.0, abs=0.05) and 0.05 < bias_rho.std().item() < 0.15


def test_he_normal_means_are_truncated_at_two_sd_biases_by_their_own_length():
    model = ArchSpec.mlp(200, (100,), 3).build(0, [0], layers="variational", mean_init="he_normal")
    for w, b in zip(model.mu, model.bias_mu):
        fan_in = w.shape[1]
        sd = math.sqrt(2 / fan_in) / TRUNCATED_NORMAL_SD
        # tf1's he_normal on a bias of length n: fan-in n (uncertainty-baselines' bias posterior means)
        assert (b != 0).all() and b.abs().max().item() <= 2 * math.sqrt(2 / b.shape[1]) / TRUNCATED_NORMAL_SD
        assert w.abs().max().item() <= 2 * sd
    w = model.mu[0].detach().flatten()
    assert w.std().item() == pytest.approx(math.sqrt(2 / 200), rel=0.03)
    assert w.abs().max().item() > 1.9 * math.sqrt(2 / 200) / TRUNCATED_NORMAL_SD  # truncated, not narrower
    # a convolution's fan-in is its input channels x kernel area
    conv = lenet("lenet5", members=(0,), mean_init="he_normal").mu[1].detach()  # 16 x 6 x 5 x 5
    assert conv.std().item() == pytest.approx(math.sqrt(2 / 150), rel=0.1)
    assert conv.abs().max().item() <= 2 * math.sqrt(2 / 150) / TRUNCATED_NORMAL_SD


def test_protocol_means_follow_the_protocols_init():
    glorot = ArchSpec.mlp(200, (100,), 3, init="glorot").build(0, [0], layers="variational")
    for w, b in zip(glorot.mu, glorot.bias_mu):
        bound = math.sqrt(6 / (w.shape[1] + w.shape[2]))
        assert torch.equal(b, torch.zeros_like(b))
        assert w.abs().max().item() <= bound and w.abs().max().item() > 0.9 * bound
    torch_init = ArchSpec.mlp(200, (100,), 3, init="torch").build(0, [0], layers="variational")
    bias = torch_init.bias_mu[0].detach()
    assert bias.abs().max().item() <= 1 / math.sqrt(200) and (bias != 0).all()
    assert torch_init.mu[0].abs().max().item() <= 1 / math.sqrt(200)


@pytest.mark.parametrize("mean_init", MEAN_INITS)
def test_a_members_parameters_come_from_its_seed_and_id_alone(mean_init):
    spec = ArchSpec.mlp(5, (4,), 3)
    pair = spec.build(7, [0, 1], layers="variational", mean_init=mean_init)
    alone = spec.build(7, [1], layers="variational", mean_init=mean_init)
    again = spec.build(7, [1], layers="variational", mean_init=mean_init)
    other_seed = spec.build(8, [1], layers="variational", mean_init=mean_init)
    for name, p in pair.named_parameters():
        q = dict(alone.named_parameters())[name]
        assert torch.equal(p[1], q[0]), name                   # independent of its neighbours
        assert torch.equal(q, dict(again.named_parameters())[name]), name
        assert not torch.equal(p[0], p[1]), name               # another id, other draws
        assert not torch.equal(q, dict(other_seed.named_parameters())[name]), name


# -- 6. the method -----------------------------------------------------------------------------------

def test_vi_is_registered_and_builds_its_options_into_the_model():
    assert methods.get_method("vi") is VariationalInference
    assert make().label == "VI" and make(members=3).label == "VI ensemble (3)"
    method = make(members=2, estimator="reparameterization", prior="empirical_bayes", prior_std=0.5, rho_init=-2.0)
    model = method.build_model(0, [0, 1], ArchSpec.mlp(FEATURES, (8,), CLASSES))
    assert isinstance(model, VariationalNet) and model.members == 2 and model.sizes == [FEATURES, 8, CLASSES]
    assert (model.estimator, model.prior, model.prior_std) == ("reparameterization", "empirical_bayes", 0.5)
    torch.testing.assert_close(model.prior_stds(), torch.full((2, 4), 0.5))
    assert model.rho[0].mean().item() == pytest.approx(-2.0, abs=0.1)


def test_vi_predicts_samples_times_members_stochastic_draws():
    method = make(members=2, samples=3, rho_init=-1.0)
    model = method.build_model(0, [0, 1], ArchSpec.mlp(FEATURES, (8,), CLASSES))
    x = toy_split(10, FEATURES, CLASSES, seed=3).x
    proba = method.predict_proba(model, x)
    assert proba.shape == (6, 10, CLASSES)
    torch.testing.assert_close(proba.sum(-1), torch.ones(6, 10))
    assert (proba >= 0).all()
    assert not torch.allclose(proba, method.predict_proba(model, x))   # a new draw every call
    assert not torch.allclose(proba[0], proba[2])                       # and every sample
    logits = method.logits(model, x)                                      # dropout=False: the means
    assert logits.shape == (2, 10, CLASSES) and torch.equal(logits, method.logits(model, x))
    numpy_proba, own = method.predict(model, x)
    assert numpy_proba.shape == (6, 10, CLASSES) and own == {}


def test_vi_penalty_is_the_kl_over_the_training_set_size():
    method = make(members=2)
    model = method.build_model(0, [0, 1], ArchSpec.mlp(FEATURES, (8,), CLASSES))
    x = torch.randn(4, FEATURES)
    logits = model(x, dropout=True)
    penalty = method.penalty(model, None, Batch(x, None, logits, train_size=250))
    assert penalty.shape == (2,)
    torch.testing.assert_close(penalty, model.kl() / 250)
    assert penalty.requires_grad
    with pytest.raises(ValueError, match="training-set size"):
        method.penalty(model, None, Batch(x, None, logits))  # train_size defaults to 0


@pytest.mark.parametrize(("options", "message"), [
    ({"samples": 0}, "samples=0 is out of range"),
    ({"prior_std": -1}, "prior_std=-1 is out of range"),
    ({"prior_std": 0}, "prior_std=0 is out of range"),
    ({"estimator": "nope"}, "estimator='nope' is out of range"),
    ({"prior": "flat"}, "prior='flat' is out of range"),
    ({"mean_init": "glorot"}, "mean_init='glorot' is out of range"),
    ({"rho_init": "inf"}, "rho_init='inf' is out of range"),
    ({"members": 0}, "members=0 is out of range"),
    ({"temperature": "fit"}, "temperature=fit is not supported"),
])
def test_vi_refuses_bad_options_in_one_line(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        make(**options)
    assert "\n" not in str(error.value)


# -- 7. end to end -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("arch", "options"), [
    ("mlp", {"estimator": "reparameterization", "members": 2, "samples": 2}),
    ("lenet5", {"estimator": "local_reparameterization", "prior": "empirical_bayes", "mean_init": "he_normal",
                "samples": 2}),
])
def test_vi_passes_the_conformance_checks(arch, options):
    method = check_method(VariationalInference, options, arch=arch)
    assert method.samples == 2


def test_vi_learns_a_separable_toy_problem_and_its_kl_shrinks():
    protocol = make_protocol({"hidden": (16,), "epochs": 15, "batch_size": 32, "early_stop_acc": "none",
                              "val_size": 20, "lr": 0.02})
    data, val, test = (toy_split(n, FEATURES, CLASSES, seed=s) for n, s in ((192, 0), (20, 1), (150, 2)))
    method = make(estimator="flipout", prior="empirical_bayes", rho_init=-5.0, samples=5)
    initial = method.build_model(0, [0], protocol.arch_spec.fitted(FEATURES, CLASSES)).kl().item()
    result = train(method, protocol, data, CLASSES, seed=0, progress=False, val=val)
    assert result.epochs_run == [15]
    kl = result.model.kl()
    assert torch.isfinite(kl).all() and kl.item() < initial
    proba, _ = method.predict(result.model, test.x)
    accuracy = (proba.mean(0).argmax(-1) == test.y.numpy()).mean()
    assert accuracy > 0.75, accuracy  # chance: 1/3
    again = train(method, protocol, data, CLASSES, seed=0, progress=False, val=val)
    torch.testing.assert_close(again.model.kl(), kl, rtol=0, atol=0)  # the run's draws are seeded
