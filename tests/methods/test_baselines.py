"""The DARE paper's baselines and the single network: each defining term on a hand-computed case
(with the gradient where a stop-gradient matters), the joint-training hook, and tiny end-to-end runs."""
import dataclasses
import math

import pandas as pd
import pytest
import torch

from bench.models.registry import ArchSpec
from bench.cli.main import main
from bench.config import make_protocol
from bench.conformance import toy_split
from bench.errors import ConfigError
from bench.models.mlp import StackedMLP
from bench.seeding import CounterStream
from bench.training.loop import train
from methods import REGISTRY
from methods.anchor_net import AnchorNet, anchor_distance
from methods.base import Batch, Method
from methods.mod import MOD, box_samples, member_variance
from methods.negcorr import NegCorr, negative_correlation
from methods.rde import RDE, repulsion


def test_anchor_distance_by_hand():
    w = torch.tensor([[[1.0, 2.0]], [[0.0, 0.0]]])   # (M=2, 1, 2)
    b = torch.tensor([[1.0], [3.0]])                 # (M=2, 1)
    anchors = [torch.zeros_like(w), torch.ones_like(b)]
    # member 0: weights mean((1, 4)) = 2.5, bias 0 -> 1.25; member 1: weights 0, bias 4 -> 2
    assert anchor_distance([w, b], anchors).tolist() == pytest.approx([1.25, 2.0])
    w.requires_grad_(), b.requires_grad_()
    anchor_distance([w, b], anchors).sum().backward()
    # d/dtheta of (1/T) mean_t mean((theta - a)^2) = (1/T) * 2 (theta - a) / numel_t, T = 2 tensors;
    # member 1's weights sit on their anchors: a zero norm, whose gradient is 0, not nan
    assert w.grad.tolist() == [[[0.5, 1.0]], [[0.0, 0.0]]] and b.grad.tolist() == [[0.0], [2.0]]


def test_anchors_are_per_member_reproducible_and_scaled_by_sigma():
    model = StackedMLP.for_seed(0, [0, 1], 50, (40,), 3)
    anchors = AnchorNet(members=2, sigma=10.0).prepare(model, seed=7, member_ids=[0, 1])
    alone = AnchorNet(members=1, sigma=10.0).prepare(StackedMLP.for_seed(0, [1], 50, (40,), 3), 7, [1])
    for a, single in zip(anchors, alone):
        torch.testing.assert_close(a[1], single[0])  # member 1's anchors do not depend on its neighbours
    assert torch.cat([a.flatten() for a in anchors]).std().item() == pytest.approx(10.0, rel=0.05)
    assert not torch.equal(anchors[0][0], anchors[0][1])
    penalty = AnchorNet(members=2, lam=0.5).penalty(model, None, Batch(None, None, None, anchors))
    torch.testing.assert_close(penalty, 0.5 * anchor_distance(list(model.parameters()), anchors))


def test_mod_draws_in_the_batch_box_and_rewards_member_variance():
    x = torch.tensor([[0.0, 10.0], [1.0, 30.0], [0.5, 20.0]])
    draws = box_samples(x.repeat(100, 1), CounterStream(torch.tensor([7])).uniform((300, 2))[0])
    assert draws.shape == (300, 2)
    assert (draws[:, 0] >= 0).all() and (draws[:, 0] <= 1).all() and (draws[:, 1] >= 10).all() and (draws[:, 1] <= 30).all()
    # two members, one sample, two outputs: (1, 3) and (3, 3) -> variances 1 and 0 -> mean 0.5
    outputs = torch.tensor([[[1.0, 3.0]], [[3.0, 3.0]]])
    assert member_variance(outputs).item() == pytest.approx(0.5)

    class Fixed(StackedMLP):  # outputs that do not depend on the input
        def forward(self, x, dropout=False):
            return outputs
    fixed = Fixed(2, 2, (1,), 2)
    state = MOD(members=2).prepare(fixed, 0, [0, 1])  # the run's own generator
    shares = MOD(members=2, lam=0.1).penalty(fixed, None, Batch(x, None, None, state))
    assert shares.tolist() == pytest.approx([-0.025, -0.025])  # sum: -lam * 0.5

    class Echo(StackedMLP):  # members output their input (member m times m + 1): the term sees the draws
        def forward(self, inputs, dropout=False):
            seen.append(inputs)
            return torch.stack([inputs * (m + 1) for m in range(2)])
    seen = []
    shares = MOD(members=2, lam=0.1).penalty(Echo(2, 2, (1,), 2), None, Batch(x, None, None, state))
    (draws,) = seen
    assert draws.shape == x.shape and not torch.equal(draws, x)  # new inputs, not the batch
    assert (draws.min(0).values >= x.min(0).values).all() and (draws.max(0).values <= x.max(0).values).all()
    # outputs d and 2d: population variance (d/2)^2 per feature; term -lam * mean, split in two shares
    assert shares.sum().item() == pytest.approx(-0.1 * (draws / 2).pow(2).mean().item())


def test_negcorr_value_and_stopped_gradient_by_hand():
    f = torch.tensor([[[1.0]], [[3.0]]], requires_grad=True)  # M = 2, B = 1, K = 1; fbar = 2
    per_member = negative_correlation(f)
    # deviations (-1, 1); the others' deviations (1, -1); products (-1, -1)
    assert per_member.tolist() == pytest.approx([-1.0, -1.0])
    per_member.sum().backward()
    # fbar and the others' sum are stopped: d/df_m = sum_{j != m}(f_j - fbar) = (1, -1)
    assert f.grad.flatten().tolist() == pytest.approx([1.0, -1.0])

    class Model:
        members = 2
    shares = NegCorr(members=2, lam=0.3).penalty(Model(), None, Batch(None, None, f.detach()))
    assert shares.sum().item() == pytest.approx(0.3 * (1 / 2) * (-2.0))  # lam (1/M) sum_m


def test_rde_value_bandwidth_and_gradient_by_hand():
    theta = torch.tensor([[0.0], [2.0]], requires_grad=True)  # two members, one parameter each
    shares = repulsion([theta])
    # d = [[0, 4], [4, 0]], median of {0, 0, 4, 4} = 2, gamma = log 2 / 2, k_m = 1 + exp(-2 log 2) = 1.25
    assert shares.tolist() == pytest.approx([0.5, 0.5])  # k / stopgrad(k) / M: value 1 in all
    shares.sum().backward()
    # gradient of (1/M) sum_m log k_m: member 0: (1/2) * 2 * [0.25 * gamma * 4] / 1.25 = 0.4 log 2
    assert theta.grad.flatten().tolist() == pytest.approx([0.4 * math.log(2), -0.4 * math.log(2)])
    one = repulsion([torch.zeros(1, 3, requires_grad=True)])  # one member: no repulsion, no nan
    assert one.tolist() == [1.0]


def test_rde_hand_written_gradient_equals_autograd_of_the_definition():
    # the definition spelled out with autograd: pairwise differences, no Gram trick, no custom backward
    def by_definition(params):
        theta = torch.cat([p.flatten(1) for p in params], dim=1)
        d = (theta.unsqueeze(1) - theta.unsqueeze(0)).square().sum(dim=2)
        gamma = math.log(theta.shape[0]) / d.detach().flatten().quantile(0.5)
        k = torch.exp(-gamma * d).sum(dim=1)
        return k / k.detach() / theta.shape[0]

    generator = torch.Generator().manual_seed(0)
    for members in (2, 3, 5):
        shapes = [(members, 7, 4), (members, 4), (members, 4, 3)]
        params = [(0.3 * torch.randn(*s, generator=generator, dtype=torch.float64) + 1.0).requires_grad_()
                  for s in shapes]  # a common offset of 1, which both directions centre away
        upstream = torch.rand(members, generator=generator, dtype=torch.float64)  # not all ones
        mine, expected = repulsion(params), by_definition(params)
        assert torch.allclose(mine, expected, rtol=0, atol=1e-15)
        grads = torch.autograd.grad((mine * upstream).sum(), params)
        reference = torch.autograd.grad((expected * upstream).sum(), params)
        for g, r in zip(grads, reference):
            assert torch.allclose(g, r, rtol=1e-10, atol=1e-13) and r.abs().max() > 1e-3
    # a pack: 2 runs of 3 members, each its own term; the second run's parameters are not finite
    first = [torch.randn(3, *s[1:], generator=generator, dtype=torch.float64) for s in shapes]
    second = [torch.full_like(p, float("nan")) for p in first]
    packed = [torch.cat([a, b]).requires_grad_() for a, b in zip(first, second)]
    upstream = torch.rand(6, generator=generator, dtype=torch.float64)
    shares = repulsion(packed, runs=2)
    grads = torch.autograd.grad((shares * upstream).sum(), packed)
    alone = [p.clone().requires_grad_() for p in first]
    reference = torch.autograd.grad((by_definition(alone) * upstream[:3]).sum(), alone)
    assert torch.allclose(shares[:3], by_definition(alone)) and shares[3:].isnan().all()
    for g, r in zip(grads, reference):
        assert torch.allclose(g[:3], r, rtol=1e-10, atol=1e-13) and g[3:].isnan().all()
    with pytest.raises(ValueError, match="do not split"):
        repulsion([torch.zeros(5, 2)], runs=2)
    # float32, members close together (spread 5e-4 around a common 0.1): as precise as the definition
    common = [0.1 * torch.randn(1, *s[1:], generator=generator) for s in [(5, 64, 32), (5, 32)]]
    close = [(c + 5e-4 * torch.randn(5, *c.shape[1:], generator=generator)).requires_grad_() for c in common]
    exact = [p.detach().double().requires_grad_() for p in close]
    got = torch.autograd.grad(repulsion(close).sum(), close)
    want = torch.autograd.grad(by_definition(exact).sum(), exact)
    scale = max(w.abs().max() for w in want)
    assert max((g.double() - w).abs().max() for g, w in zip(got, want)) < 2e-6 * scale


PROTOCOL = make_protocol({"hidden": [16], "epochs": 2, "batch_size": 16, "early_stop_acc": None})


@dataclasses.dataclass(frozen=True)
class JointSpy(Method):
    name = "joint_spy"
    joint = True
    seen: list = dataclasses.field(default_factory=list, compare=False)

    @property
    def n_networks(self):
        return 3

    def penalty(self, model, task_loss, batch):
        self.seen.append((batch.x.dim(), batch.y))
        return None


def test_joint_members_share_every_batch_and_always_train_stacked():
    spy = JointSpy()
    train(spy, PROTOCOL, toy_split(seed=1), 3, seed=0, progress=False, vectorize=False)
    assert spy.seen and all(dim == 2 for dim, _ in spy.seen)  # one (B, D) batch for all members
    assert all(torch.equal(y[0], y[1]) and torch.equal(y[0], y[2]) for _, y in spy.seen)
    a = train(MOD(members=2, lam=0.1), PROTOCOL, toy_split(seed=1), 3, seed=0, progress=False, vectorize=True).model
    b = train(MOD(members=2, lam=0.1), PROTOCOL, toy_split(seed=1), 3, seed=0, progress=False, vectorize=False).model
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_each_baseline_term_changes_training():
    data = toy_split(seed=1)
    for method, off in ((AnchorNet(members=2, lam=10.0), AnchorNet(members=2, lam=0.0)),
                        (MOD(members=2, lam=1.0), MOD(members=2, lam=0.0)),
                        (NegCorr(members=2, lam=1.0), NegCorr(members=2, lam=0.0))):
        on_w = train(method, PROTOCOL, data, 3, seed=0, progress=False).model.weights[0]
        off_w = train(off, PROTOCOL, data, 3, seed=0, progress=False).model.weights[0]
        assert not torch.allclose(on_w, off_w), method.name
    # RDE has no weight: its repulsion must move members apart compared with the same joint run without it
    rde = train(RDE(members=3), PROTOCOL, data, 3, seed=0, progress=False).model
    no_term = train(NegCorr(members=3, lam=0.0), PROTOCOL, data, 3, seed=0, progress=False).model
    spread = lambda m: torch.cat([p.flatten(1) for p in m.parameters()], 1).var(0).sum()  # noqa: E731
    assert spread(rde) > spread(no_term)


def test_baselines_and_single_network_end_to_end(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "--epochs", "2",
                 "--val-size", "50", "--no-download", "-q", "--no-plots", "-o", "members=2",
                 "--methods", "single_network", "anchor_net", "mod", "negcorr", "rde",
                 "-o", "anchor_net.sigma=0.1", "-o", "checkpoint=best",
                 # the seed preset selects these on validation data; fixed here, so no selection walks
                 "-o", "anchor_net.lam=1", "-o", "mod.lam=1e-3", "-o", "negcorr.lam=1e-3"]) == 0
    runs = pd.read_csv(out / "runs.csv").set_index("method")
    assert set(runs["status"]) == {"ok"} and len(runs) == 5
    assert runs.loc["single_network", "label"] == "Single network"
    assert len(str(runs.loc["single_network", "kept_epochs"]).split()) == 1
    assert set(runs.loc[["anchor_net", "mod", "negcorr", "rde"], "label"]) == {"AnchorNet", "MOD", "NegCorr", "RDE"}
    assert (runs["id_acc"] > 0.5).all()


@pytest.mark.parametrize("args, message", [
    (["--methods", "anchor_net", "-o", "anchor_net.sigma=-1"], "sigma='-1' is out of range"),
    (["--methods", "anchor_net", "-o", "anchor_net.lam=-0.1"], "lam='-0.1' is out of range"),
    (["--methods", "mod", "-o", "mod.lam=inf"], "lam='inf' is out of range"),
    (["--methods", "negcorr", "-o", "negcorr.lam=-1"], "lam='-1' is out of range"),
    (["--methods", "rde", "-o", "rde.lam=1"], "method rde: unknown option 'lam'"),
    (["--methods", "single_network", "-o", "single_network.members=3"], "unknown option 'members'"),
    (["--methods", "packed_ensemble", "-o", "packed_ensemble.alpha=0"], "alpha='0' is out of range"),
    (["--methods", "packed_ensemble", "-o", "packed_ensemble.gamma=0"], "gamma='0' is out of range"),
    (["--methods", "batch_ensemble", "-o", "batch_ensemble.rank1_init=ones"], "rank1_init='ones' is out of range"),
])
def test_bad_baseline_options_are_one_line(args, message, tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--data-dir", str(tmp_path), "--no-download", "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# -- the cheap-ensemble family: methods that bring their own model ----------------------------------

def test_batch_ensemble_layer_is_shared_weight_times_rank1_factors():
    from methods.batch_ensemble import BatchEnsemble
    model = BatchEnsemble(members=3, rank1_init="random_sign").build_model(0, [0, 1, 2], ArchSpec.mlp(4, (5,), 2, "torch"))
    assert len(model.shared) == 2 and model.shared[0].shape == (1, 4, 5)  # one W per layer for all members
    assert set(torch.cat([r.flatten() for r in model.r]).tolist()) == {-1.0, 1.0}
    x = torch.randn(7, 4)
    out = model(x)
    for m in range(3):
        h = torch.relu((x * model.r[0][m]) @ model.shared[0][0] * model.s[0][m] + model.bias[0][m])
        expected = (h * model.r[1][m]) @ model.shared[1][0] * model.s[1][m] + model.bias[1][m]
        torch.testing.assert_close(out[m], expected)
    # a pack of two runs: each run's members use its own W
    other = BatchEnsemble(members=3, rank1_init="random_sign").build_model(1, [0, 1, 2], ArchSpec.mlp(4, (5,), 2, "torch"))
    pack = type(model).stack([model, other])
    assert pack.shared[0].shape == (2, 4, 5) and pack.r[0].shape == (6, 4) and pack.runs == 2
    assert torch.equal(pack(x), torch.cat([out, other(x)]))
    assert torch.equal(pack.select([3, 4, 5])(x), other(x))
    with pytest.raises(ValueError, match="whole runs"):
        pack.select([2, 3, 4])
    # weights saved before the run axis (W as (in, out)) still load
    old = {k: v[0] if k.startswith("shared.") else v for k, v in model.state_dict().items()}
    again = BatchEnsemble(members=3).build_model(5, [0, 1, 2], ArchSpec.mlp(4, (5,), 2, "torch"))
    again.load_state_dict(old)
    assert torch.equal(again(x), out)
    normal = BatchEnsemble(members=50).build_model(0, list(range(50)), ArchSpec.mlp(40, (40,), 2, "torch"))
    assert normal.r[0].mean().item() == pytest.approx(1.0, abs=0.05)
    assert normal.r[0].std().item() == pytest.approx(0.5, abs=0.05)


def test_packed_ensemble_widths_groups_and_masked_weights_stay_zero():
    from bench.models.stacked import group_mask, packed_width
    from methods.packed_ensemble import PackedEnsemble
    assert packed_width(100, 2.0, 4, 1) == 50 and packed_width(100, 2.0, 4, 2) == 50
    assert packed_width(100, 1.0, 3, 2) == 34  # rounded up to a multiple of gamma
    assert group_mask(4, 6, 2).tolist() == [[1, 1, 1, 0, 0, 0]] * 2 + [[0, 0, 0, 1, 1, 1]] * 2
    method = PackedEnsemble(members=2, alpha=2.0, gamma=2)
    result = train(method, make_protocol({"hidden": [8, 8], "epochs": 2, "batch_size": 16, "early_stop_acc": None}),
                   toy_split(classes=4, seed=1), 4, seed=0, progress=False)
    model = result.model
    assert [w.shape[2] for w in model.weights] == [8, 8, 4]  # 2 * 8 / 2 members = 8 units each
    assert torch.count_nonzero(model.weights[0]) == 2 * 6 * 8  # the first layer sees the whole input
    hidden_to_hidden, output = model.weights[1], model.weights[2]
    assert torch.count_nonzero(hidden_to_hidden * (1 - model.mask1)) == 0  # still block-diagonal
    assert torch.count_nonzero(hidden_to_hidden) == 2 * 2 * 4 * 4  # 2 members x 2 groups of 4 x 4
    # the output layer is grouped too, as torch-uncertainty's PackedLinear groups every layer but the first
    assert torch.count_nonzero(output * (1 - model.mask2)) == 0 and torch.count_nonzero(output) == 2 * 2 * 4 * 2
    with pytest.raises(ConfigError, match="gamma=3 must divide the 10 classes"):  # checked with the protocol
        PackedEnsemble(members=2, gamma=3).check_protocol(make_protocol({}), "method packed_ensemble")


def test_packed_members_are_separate_narrow_grouped_networks():
    from methods.packed_ensemble import PackedEnsemble
    model = PackedEnsemble(members=3, alpha=1.5, gamma=2).build_model(0, [0, 1, 2], ArchSpec.mlp(5, (8, 8), 4, "glorot"))
    x = torch.randn(7, 5)
    out = model(x)
    for m in range(3):  # member m by hand: its own weights only, each later layer as gamma separate blocks
        h = x
        for layer, (w, b) in enumerate(zip(model.weights, model.biases)):
            w, b = w[m], b[m]
            if layer == 0:
                h = h @ w + b
            else:  # block g maps input units [g*i, (g+1)*i) to output units [g*o, (g+1)*o)
                i, o = w.shape[0] // 2, w.shape[1] // 2
                h = torch.cat([h[:, g * i:(g + 1) * i] @ w[g * i:(g + 1) * i, g * o:(g + 1) * o] + b[g * o:(g + 1) * o]
                               for g in range(2)], dim=1)
            if layer < len(model.weights) - 1:
                h = torch.relu(h)
        assert torch.allclose(out[m], h, atol=1e-5)
    assert [w.shape[1:] for w in model.weights] == [(5, 4), (4, 4), (4, 4)]  # 8 * 1.5 / 3 = 4 units


def test_cheap_ensembles_train_jointly_and_checkpoint_as_one_model(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "--epochs", "3",
                 "--val-size", "50", "--no-download", "-q", "--no-plots", "--lr", "0.005",
                 "--methods", "batch_ensemble", "packed_ensemble", "-o", "members=3", "-o", "checkpoint=best",
                 "-o", "packed_ensemble.gamma=2"]) == 0
    runs = pd.read_csv(out / "runs.csv").set_index("method")
    assert set(runs["status"]) == {"ok"} and (runs["id_acc"] > 0.5).all()
    for method in ("batch_ensemble", "packed_ensemble"):
        kept = runs.loc[method, "kept_epochs"].split()
        assert len(kept) == 3 and len(set(kept)) == 1  # one model: one kept epoch for all members
    assert set(runs["label"]) == {"BatchEnsemble", "Packed-Ensembles"}




@pytest.mark.parametrize("name", [name for name, cls in REGISTRY.items() if cls.joint])
def test_joint_methods_train_the_same_with_no_vectorize(name):
    method = REGISTRY[name](members=2)
    a = train(method, PROTOCOL, toy_split(seed=1), 3, seed=0, progress=False, vectorize=True).model
    b = train(method, PROTOCOL, toy_split(seed=1), 3, seed=0, progress=False, vectorize=False).model
    assert type(a) is type(b)  # the method's own model, not a restacked plain MLP
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_joint_members_are_checkpointed_together_on_their_mean_validation_loss():
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "training"))
    from test_checkpoint import TRAIN, VAL, protocol, val_curve
    result = train(NegCorr(members=2, lam=0.0, checkpoint="best"), protocol(), TRAIN, 3, seed=0,
                   progress=False, val=VAL)
    curves = [val_curve(result, m) for m in range(2)]
    mean = [(a + b) / 2 for a, b in zip(*curves)]
    best = min(range(len(mean)), key=mean.__getitem__) + 1
    own = [min(range(len(c)), key=c.__getitem__) + 1 for c in curves]
    assert result.kept_epochs == [best, best]
    assert own != [best, best]  # per member, the members would have kept other epochs
