"""The architecture registry (bench.models.registry): LeNet-5's parameter and FLOP counts, every stacked member
equal to its ordinary torch module, packs bitwise equal to networks alone, BatchEnsemble's convolutional layers,
the protocol's ``arch`` option, the CLI's refusal of an unknown one, and every method on every image architecture."""
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import methods
from bench.cli.main import main
from bench.config import make_protocol, make_run_config, overridden
from bench.conformance import check_method, toy_split
from bench.errors import ConfigError
from bench.models.batch_ensemble import BatchEnsembleNet
from bench.models.lenet import StackedLeNet
from bench.models.mlp import PackedMLP, StackedMLP
from bench.models.registry import ARCHITECTURES, ArchSpec
from bench.models.stacked import StackedNetwork
from bench.seeding import member_generator
from bench.training.loop import train, train_pack
from bench.training.packs import packed_method
from methods.deep_ensemble import DeepEnsemble

ROOT = Path(__file__).resolve().parents[2]
MNIST = (1, 28, 28)
IMAGE_ARCHS = ("lenet5", "lenet5_same")


def lenet(arch="lenet5", seed=0, members=(0, 1, 2), **kw):
    return ArchSpec(arch, MNIST, 10).build(seed, list(members), **kw)


def rows(n=5, seed=0, members=None):
    g = torch.Generator().manual_seed(seed)
    shape = (n, 784) if members is None else (members, n, 784)
    return torch.rand(shape, generator=g)


def textbook_lenet5() -> nn.Sequential:
    """LeNet-5 as ordinary torch layers, ReLU before each pool (the textbook order)."""
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(16, 120, 5), nn.ReLU(), nn.Flatten(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def assert_same_parameters(a: nn.Module, b: nn.Module):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


# -- 1. parameter counts ------------------------------------------------------------------------------

@pytest.mark.parametrize(("arch", "parameters"), [("lenet5", 61_706), ("lenet5_same", 545_546)])
def test_lenet_parameter_counts(arch, parameters):
    assert ArchSpec(arch, MNIST, 10).cost().parameters == parameters
    model = lenet(arch)
    assert isinstance(model, StackedLeNet) and model.parameters_per_network() == parameters
    assert sum(p.numel() for p in model.parameters()) == 3 * parameters
    assert sum(p.numel() for p in model.as_module(1).parameters()) == parameters
    assert make_protocol({"arch": arch}).arch_spec.cost().parameters == parameters  # the protocol's MNIST images


def test_lenet5_has_the_textbook_networks_parameters():
    assert sum(p.numel() for p in textbook_lenet5().parameters()) == 61_706 == lenet().parameters_per_network()


# -- 2. each member is its ordinary torch module ------------------------------------------------------

@pytest.mark.parametrize(("arch", "kind"), [("lenet5", "members"), ("lenet5_same", "members"), ("lenet5", "packed"),
                                            ("lenet5_same", "packed"), ("mlp", "members"), ("mlp", "packed")])
def test_each_member_equals_its_torch_module(arch, kind):
    options = {"alpha": 2, "gamma": 2} if kind == "packed" else {}
    spec = ArchSpec.mlp(784, (32, 16), 10) if arch == "mlp" else ArchSpec(arch, MNIST, 10)
    model = spec.build(3, [0, 1, 2], layers=kind, **options)
    expected_type = {"mlp": PackedMLP if kind == "packed" else StackedMLP}.get(arch, StackedLeNet)
    assert type(model) is expected_type
    if kind == "packed" and arch != "mlp":
        assert model.groups == 2
    shared, per_member = rows(6, seed=1), rows(6, seed=2, members=3)
    with torch.no_grad():
        out_shared, out_each = model(shared), model(per_member)
        assert out_shared.shape == (3, 6, 10)
        for m in range(3):
            module = model.as_module(m)
            assert isinstance(module[-1], nn.Linear) and not module.training
            torch.testing.assert_close(module(shared), out_shared[m])
            torch.testing.assert_close(module(per_member[m]), out_each[m])
    assert not torch.allclose(out_shared[0], out_shared[1])  # the members differ


def test_a_lenet_member_is_the_textbook_network_relu_before_pool():
    model = lenet(members=(0, 1))
    reference = textbook_lenet5()
    convs = [layer for layer in reference if isinstance(layer, nn.Conv2d)]
    linears = [layer for layer in reference if isinstance(layer, nn.Linear)]
    with torch.no_grad():
        for conv, weight, bias in zip(convs, model.conv_weights, model.conv_biases):
            conv.weight.copy_(weight[1]), conv.bias.copy_(bias[1])
        for linear, weight, bias in zip(linears, model.weights, model.biases):
            linear.weight.copy_(weight[1].T), linear.bias.copy_(bias[1])
    x = rows(4, seed=3) * 4 - 2  # negative pixels too: some windows all negative after a conv
    labels = torch.tensor([0, 3, 7, 9])
    F.cross_entropy(model(x)[1], labels).backward()
    F.cross_entropy(reference(x.view(-1, *MNIST)), labels).backward()
    torch.testing.assert_close(model(x)[1], reference(x.view(-1, *MNIST)))
    for layer, weight in zip(convs, model.conv_weights):
        torch.testing.assert_close(weight.grad[1], layer.weight.grad)
        assert torch.count_nonzero(weight.grad[0]) == 0  # member 0 took no part in the loss
    for layer, weight in zip(linears, model.weights):
        torch.testing.assert_close(weight.grad[1], layer.weight.grad.T)


# -- 3. training FLOPs -------------------------------------------------------------------------------

def lenet_flops_by_hand(paddings):
    """LeNet-5 on 28 x 28 MNIST: conv 1->6, pool, conv 6->16, pool, conv 16->120, dense 84, dense 10."""
    flops, size, c_in, k = 0, 28, 1, 5
    for i, (c_out, padding, pool) in enumerate(zip((6, 16, 120), paddings, (True, True, False))):
        out = size + 2 * padding - k + 1
        macs = c_in * k * k * c_out * out * out
        flops += 2 * macs + 2 * macs + (2 * macs if i else 0)  # forward, weight grad, input grad (not the images)
        size, c_in = (out // 2 if pool else out), c_out
    features = c_in * size * size
    return flops + 6 * features * 84 + 6 * 84 * 10


@pytest.mark.parametrize(("arch", "paddings", "expected"), [("lenet5", (2, 0, 0), 2_263_920),
                                                            ("lenet5_same", (2, 2, 2), 20_373_360)])
def test_training_flops_by_hand(arch, paddings, expected):
    assert lenet_flops_by_hand(paddings) == expected
    assert lenet(arch).training_flops_per_sample() == expected
    assert ArchSpec(arch, MNIST, 10).cost().training_flops_per_sample == expected


# -- 4. packs: a member computes as it does alone ------------------------------------------------------

@pytest.mark.parametrize("arch", IMAGE_ARCHS)  # lenet5_same's dense 5880 -> 84 included: a batched matmul of one
# member would round unlike one of several on a multi-threaded CPU; the members' addmm does not
def test_a_member_in_a_stack_computes_bitwise_as_alone(arch):
    together, alone = lenet(arch, members=(0, 1, 2)), lenet(arch, members=(1,))
    x = rows(7, seed=4, members=3)
    with torch.no_grad():
        assert torch.equal(together(x)[1], alone(x[1:2])[0])
        assert torch.equal(together(x[1])[1], alone(x[1])[0])  # shared rows


@pytest.mark.parametrize("arch", IMAGE_ARCHS)
def test_stack_and_select_round_trip(arch):
    together, alone = lenet(arch, members=(0, 1, 2)), lenet(arch, members=(1,))
    x = rows(7, seed=4, members=3)
    with torch.no_grad():  # a member beside one other computes as beside two
        assert torch.equal(together(x)[1], lenet(arch, members=(1, 2))(x[1:])[0])
    assert_same_parameters(together.select([1]), alone)
    assert_same_parameters(StackedNetwork.stack([lenet(arch, members=(0,)), lenet(arch, members=(1, 2))]), together)
    assert not torch.equal(lenet(arch, seed=1, members=(1,)).flat(), alone.flat())  # the seed matters


def test_flat_with_flat_and_reset_member_round_trip():
    model = lenet(members=(0, 1, 2))
    flat = model.flat()
    assert flat.shape == (3, 61_706)
    assert_same_parameters(model.with_flat(flat), model)
    assert_same_parameters(model.with_flat(flat[[2, 0]]), model.select([2, 0]))
    fresh = lenet(members=(0, 1, 2))
    with torch.no_grad():
        for p in fresh.parameters():
            p[1].zero_()
    fresh.reset_member(1, member_generator(0, 1, "init"))
    assert_same_parameters(fresh, model)


def test_a_lenet_pack_trains_each_run_bitwise_as_alone():
    protocol = make_protocol({"arch": "lenet5", "epochs": 2, "batch_size": 8, "early_stop_acc": "none",
                              "val_size": 8})
    train_split, val = toy_split(32, 784, 10, seed=1), toy_split(8, 784, 10, seed=2)
    runs = [(DeepEnsemble(members=1), 0), (DeepEnsemble(members=1), 1)]
    packed = train_pack(runs, packed_method([m for m, _ in runs]), protocol, train_split, 10, progress=False,
                        val=val)
    for (method, seed), result in zip(runs, packed):
        alone = train(method, protocol, train_split, 10, seed, progress=False, val=val)
        assert isinstance(alone.model, StackedLeNet)
        a, b = alone.model.state_dict(), result.model.state_dict()
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name
        assert alone.epochs_run == result.epochs_run and alone.history == result.history
    assert not torch.equal(packed[0].model.flat(), packed[1].model.flat())


# -- 5. pool, then ReLU ---------------------------------------------------------------------------------

def test_relu_after_max_pool_equals_relu_before_in_value_and_gradient():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 8, 8, generator=g)
    x[:, :, :2, :2] = -x[:, :, :2, :2].abs() - 0.1  # windows with no positive value
    x[:, 0, 2:4, 2:4] = x[:, 0, 2:4, 2:4].abs() + 0.1  # and windows with no negative one
    upstream = torch.randn(2, 3, 4, 4, generator=g)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    pool_first, relu_first = torch.relu(F.max_pool2d(a, 2)), F.max_pool2d(torch.relu(b), 2)
    assert (pool_first == 0).any() and (pool_first > 0).any()
    assert torch.equal(pool_first, relu_first)
    (pool_first * upstream).sum().backward()
    (relu_first * upstream).sum().backward()
    assert torch.equal(a.grad, b.grad)
    assert torch.count_nonzero(a.grad[:, :, :2, :2]) == 0  # nothing flows into an all-negative window


def test_lenet_features_pool_before_relu():
    model = lenet(members=(0,))
    images = rows(3, seed=6).view(-1, *MNIST) - 0.5
    weights, biases = [w[0] for w in model.conv_weights], [b[0] for b in model.conv_biases]
    h = images
    for conv, weight, bias in zip(model.convs, weights, biases):
        h = torch.relu(F.conv2d(h, weight, bias, padding=conv.padding))
        h = F.max_pool2d(h, 2) if conv.pool else h
    with torch.no_grad():
        torch.testing.assert_close(model.features(images, weights, biases), h.flatten(1).detach())


# -- 6. the protocol's arch ---------------------------------------------------------------------------

def test_protocol_arch_values_and_refusals():
    protocol = make_protocol({"arch": "lenet5"})
    assert protocol.arch == "lenet5" and protocol.arch_spec == ArchSpec("lenet5", MNIST, 10)
    assert make_protocol({}).arch == "mlp" and make_protocol({}).arch_spec.option("hidden") == (256, 256)
    with pytest.raises(ConfigError) as unknown:
        make_protocol({"arch": "resnet"})
    message = str(unknown.value)
    assert "\n" not in message and "resnet" in message
    assert all(name in message for name in ARCHITECTURES)
    for widths in ([100], [256, 256]):  # given at all, the MLP's default widths too
        with pytest.raises(ConfigError, match="hidden") as hidden:
            make_protocol({"arch": "lenet5", "hidden": widths})
        assert "\n" not in str(hidden.value)
    assert overridden({"hidden": [100, 100], "epochs": 3}, {"arch": "lenet5"}) == {"epochs": 3, "arch": "lenet5"}
    assert overridden({"hidden": [100, 100]}, {"arch": "mlp"}) == {"hidden": [100, 100], "arch": "mlp"}
    assert make_protocol(overridden({"hidden": [100, 100]}, {"arch": "lenet5"})).arch == "lenet5"


def test_image_architectures_refuse_rows_of_another_width():
    spec = make_protocol({"arch": "lenet5"}).arch_spec
    assert spec.fitted(784, 3) == ArchSpec("lenet5", MNIST, 3)
    with pytest.raises(ValueError, match="lenet5"):
        spec.fitted(12, 3)
    assert ArchSpec.mlp(784, (8,), 10).fitted(12, 3).in_features == 12  # the MLP reads rows of any width
    with pytest.raises(ValueError, match="too small"):
        ArchSpec("lenet5", (1, 8, 8), 10).build(0, [0])


def test_run_ids_of_mlp_runs_hold_and_lenet_runs_record_their_arch():
    record = json.loads((ROOT / "tests/records/schema-2/records/d2f0b0ac2c7d.json").read_text())
    config = record["config"]
    rebuilt = make_run_config(config["method"], config["method_options"], make_protocol(config["protocol"]),
                              config["seed"], config["preset"])
    assert rebuilt.run_id == record["run_id"]  # a run id made before the arch field existed
    mlp = make_run_config("deep_ensemble", {}, make_protocol({}), 0)
    assert "arch" not in mlp.to_dict()["protocol"] and "arch" not in mlp.row()
    assert mlp.run_id == make_run_config("deep_ensemble", {}, make_protocol({"arch": "mlp"}), 0).run_id
    le = make_run_config("deep_ensemble", {}, make_protocol({"arch": "lenet5"}), 0)
    assert le.to_dict()["protocol"]["arch"] == "lenet5" and "hidden" not in le.to_dict()["protocol"]
    assert le.row()["arch"] == "lenet5" and "hidden" not in le.row()
    assert le.run_id != mlp.run_id
    same = make_run_config("deep_ensemble", {}, make_protocol({"arch": "lenet5_same"}), 0)
    assert same.run_id not in (le.run_id, mlp.run_id)


# -- 7. the command line -------------------------------------------------------------------------------

def test_an_unknown_arch_on_the_command_line_is_one_line(tmp_path, capsys):
    # in this process: tests/config's real process shows a user mistake ends without a traceback
    assert main(["run", "--arch", "nonsense", "--methods", "deep_ensemble", "--dry-run", "--out",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nonsense" in err and "lenet5" in err


def test_arch_on_the_command_line_drops_the_presets_hidden(tmp_path, capsys):
    base = ["run", "--methods", "deep_ensemble", "--seeds", "0", "--dry-run", "--out", str(tmp_path / "out")]
    assert main([*base, "--arch", "lenet5"]) == 0  # preset seed's hidden widths are dropped
    lenet_plan = capsys.readouterr().out
    assert main(base) == 0
    mlp_plan = capsys.readouterr().out
    assert lenet_plan.split()[0] != mlp_plan.split()[0]  # another run id
    assert main([*base, "--arch", "lenet5", "--hidden", "100"]) == 2  # given beside it: refused
    err = capsys.readouterr().err
    assert "hidden" in err and err.count("\n") == 1


# -- 8. every method on every image architecture ---------------------------------------------------------

@pytest.mark.parametrize("arch", IMAGE_ARCHS)
@pytest.mark.parametrize("name", sorted(methods.REGISTRY))
def test_every_method_on_every_image_architecture(name, arch):
    """A pair trains and predicts valid probabilities, or the method refuses the architecture before training
    with one ConfigError line (today every pair trains)."""
    try:
        method = check_method(methods.REGISTRY[name], arch=arch)
    except ConfigError as exc:
        assert "\n" not in str(exc) and name in str(exc), str(exc)
        with pytest.raises(ConfigError):  # refused by check_protocol, i.e. before any training
            methods.REGISTRY[name]().check_protocol(make_protocol({"arch": arch}), f"method {name}")
        return
    assert method.name == name


# -- 9. BatchEnsemble's convolutions ----------------------------------------------------------------------

def batch_ensemble_member_by_hand(model: BatchEnsembleNet, m: int, run: int, x: torch.Tensor) -> torch.Tensor:
    """Member m of a BatchEnsemble LeNet as its paper writes it: conv(h * r_m, W) * s_m + b_m, per layer."""
    h = x.view(-1, *model.input_shape)
    for conv, w, r, s, b in zip(model.convs, model.conv_shared, model.conv_r, model.conv_s, model.conv_bias):
        h = F.conv2d(h * r[m].view(1, -1, 1, 1), w[run], padding=conv.padding)
        h = torch.relu(h * s[m].view(1, -1, 1, 1) + b[m].view(1, -1, 1, 1))
        h = F.max_pool2d(h, 2) if conv.pool else h
    h = h.flatten(1)
    for layer, (w, r, s, b) in enumerate(zip(model.shared, model.r, model.s, model.bias)):
        h = ((torch.relu(h) if layer else h) * r[m]) @ w[run] * s[m] + b[m]
    return h


@pytest.mark.parametrize("arch", IMAGE_ARCHS)
def test_batch_ensemble_convs_share_one_weight_per_run(arch):
    a, b = lenet(arch, seed=0, members=(0, 1), layers="batch_ensemble"), lenet(arch, seed=1, members=(0, 1),
                                                                                layers="batch_ensemble")
    assert isinstance(a, BatchEnsembleNet) and a.runs == 1 and a.members == 2 and len(a.convs) == 3
    assert all(w.shape[0] == 1 for w in [*a.conv_shared, *a.shared])  # one W per run: the members share it
    assert all(p.shape[0] == 2 for p in [*a.conv_r, *a.conv_s, *a.conv_bias, *a.r, *a.s, *a.bias])
    assert not torch.equal(a.conv_r[1][0], a.conv_r[1][1])  # members differ by their rank-1 factors
    pack = BatchEnsembleNet.stack([a, b])
    assert pack.runs == 2 and pack.members == 4 and pack.conv_shared[0].shape[0] == 2
    assert_same_parameters(pack.select([0, 1]), a)
    assert_same_parameters(pack.select([2, 3]), b)
    with pytest.raises(ValueError, match="whole runs"):
        pack.select([1, 2])
    x = rows(5, seed=7)
    with torch.no_grad():
        out = a(x)
        assert out.shape == (2, 5, 10)
        assert torch.equal(out, a(x.expand(2, -1, -1)))  # shared rows = the rows expanded per member
        for m in range(2):
            torch.testing.assert_close(out[m], batch_ensemble_member_by_hand(a, m, 0, x))
        torch.testing.assert_close(pack(x), torch.cat([a(x), b(x)]))
        torch.testing.assert_close(pack(x)[3], batch_ensemble_member_by_hand(pack, 3, 1, x))


def test_the_seed_lenet_preset_is_the_seed_protocol_on_lenet5():
    from bench.config import load_preset
    from bench.design.grid import expand_grid
    (_, seed), (name, lenet) = load_preset("seed"), load_preset("seed-lenet")
    assert {k: v for k, v in lenet.items() if k not in ("protocol", "out")} == \
        {k: v for k, v in seed.items() if k not in ("protocol", "out")}
    assert {k: v for k, v in seed["protocol"].items() if k != "hidden"} == \
        {k: v for k, v in lenet["protocol"].items() if k != "arch"} and lenet["protocol"]["arch"] == "lenet5"
    items = expand_grid(name, lenet, None, None, {})
    assert len(items) == 70 and {item.protocol.arch for item in items} == {"lenet5"}  # 55 runs, 15 selections


def test_an_architecture_is_one_file_that_the_registry_finds(tmp_path, monkeypatch):
    import bench.models
    from bench.models import registry
    (tmp_path / "tiny_arch.py").write_text(
        "from bench.models.mlp import StackedMLP\n"
        "from bench.models.stacked import Architecture\n"
        "def build(spec, members, layers, dropout, per_network_kernels, **options):\n"
        "    return StackedMLP(members, spec.in_features, (4,), spec.n_classes, dropout, per_network_kernels)\n"
        "ARCHITECTURES = (Architecture('tiny', 'a 4-unit MLP', build, layers=('members',)),)\n")
    monkeypatch.setattr(bench.models, "__path__", [*bench.models.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "bench.models.tiny_arch", raising=False)
    found = registry.discovered()
    assert list(found)[0] == "mlp" and set(found) == {*ARCHITECTURES, "tiny"}
    assert found["tiny"].layers == ("members",) and found["tiny"].build(ArchSpec.mlp(784, (4,), 10), 2, "members", 0.0,
                                                                        False).members == 2
    sys.modules.pop("bench.models.tiny_arch", None)
