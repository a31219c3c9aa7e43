"""Smoke test on the real MNIST/FashionMNIST files (skipped unless $DARE_BENCH_DATA holds them)."""
import os
from pathlib import Path

import pytest

from bench.config import make_protocol
from bench.data.loaders import load_benchmark_data
from bench.evaluation.metrics import run_metrics
from bench.training.loop import train
from methods.deep_ensemble import DeepEnsemble

DATA = Path(os.environ.get("DARE_BENCH_DATA", "/nonexistent"))
pytestmark = [pytest.mark.smoke, pytest.mark.skipif(
    not (DATA / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()
    or not (DATA / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").is_file(),
    reason="set DARE_BENCH_DATA to a folder holding MNIST and FashionMNIST")]


def test_one_epoch_on_real_mnist():
    data = load_benchmark_data(make_protocol({}), DATA, download=False)
    assert (len(data.train), len(data.val), len(data.test), len(data.ood["fashion_mnist"])) == (59000, 1000, 10000, 10000)
    method = DeepEnsemble(members=1)
    protocol = make_protocol({"epochs": 1})
    model = train(method, protocol, data.train, data.n_classes, seed=0, progress=False).model
    metrics, _ = run_metrics(method.predict_proba(model, data.test.x).numpy(), data.test.y.numpy(),
                             {"fashion_mnist": method.predict_proba(model, data.ood["fashion_mnist"].x).numpy()})
    assert metrics["id_acc"] > 0.93          # one epoch of the seed MLP
    assert metrics["auroc_pred_entropy_vs_fashion_mnist"] > 0.6  # FashionMNIST is visibly OOD after one epoch


def test_the_paper_protocols_data():
    from bench.config import load_preset
    protocol = make_protocol(load_preset("paper-fmnist")[1]["protocol"])
    seed0, seed1 = (load_benchmark_data(protocol, DATA, download=False, seed=s) for s in (0, 1))
    assert (len(seed0.train), len(seed0.val), len(seed0.test)) == (59000, 1000, 10000)
    assert seed0.train.x.max().item() == 255.0 and len(seed0.ood["mnist"]) == 10000
    assert not (seed0.val.y == seed1.val.y).all()  # one validation split per seed
    if "cifar10_gray28" not in seed0.ood:  # the mirror has no CIFAR-10: skipped, with its reason
        assert "cifar10_gray28" in seed0.ood_skipped
