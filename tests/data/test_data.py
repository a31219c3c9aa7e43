from pathlib import Path

import pytest
import torch

from bench.config import make_protocol
from bench.data.files import DATA_DIR_ENV, DATASETS, load_images, resolve_data_dir
from bench.data.loaders import load_benchmark_data


def test_data_dir_flag_then_environment_then_default(monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, "/from/env")
    assert resolve_data_dir("/from/flag") == Path("/from/flag")
    assert resolve_data_dir(None) == Path("/from/env")
    monkeypatch.delenv(DATA_DIR_ENV)
    assert resolve_data_dir(None) == Path("./data")


@pytest.mark.parametrize("dataset", ["mnist", "fashion_mnist"])
@pytest.mark.parametrize("train", [True, False])
def test_the_idx_files_read_as_torchvision_reads_them(dataset, train, tiny_data):
    import torchvision  # the harness reads the files itself (torchvision's import costs seconds); here it is the reference
    theirs = getattr(torchvision.datasets, DATASETS[dataset].folder)(root=str(tiny_data), train=train, download=False)
    images, labels, names = load_images(tiny_data, dataset, train, download=False)
    assert images.dtype == theirs.data.dtype and torch.equal(images, theirs.data)
    assert labels.dtype == torch.int64 and torch.equal(labels, theirs.targets.long())
    assert names == tuple(theirs.classes)


def test_split_sizes_and_ood_is_the_other_dataset_test_split(tiny_data):
    data = load_benchmark_data(make_protocol({"val_size": 50}), tiny_data, download=False)
    assert list(data.ood) == ["fashion_mnist"] and data.ood_skipped == {}
    assert (len(data.train), len(data.val), len(data.test), len(data.ood["fashion_mnist"])) == (250, 50, 100, 100)
    assert data.train.x.shape == (250, 784) and data.train.x.dtype == torch.float32
    assert 0.0 <= data.train.x.min() and data.train.x.max() <= 1.0  # raw pixels in [0, 1]
    swapped = load_benchmark_data(make_protocol({"val_size": 50, "id_dataset": "fashion_mnist"}), tiny_data,
                                  download=False)
    torch.testing.assert_close(swapped.ood["mnist"].x, data.test.x)  # MNIST test is OOD for Fashion-MNIST


def test_split_seed_changes_the_validation_split(tiny_data):
    a = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 0}), tiny_data, download=False)
    b = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 1}), tiny_data, download=False)
    assert not torch.equal(a.val.x, b.val.x)


def test_standardize_uses_train_statistics_for_every_split(tiny_data):
    raw = load_benchmark_data(make_protocol({"val_size": 50}), tiny_data, download=False)
    std = load_benchmark_data(make_protocol({"val_size": 50, "preprocess": "standardize"}), tiny_data,
                              download=False)
    assert std.train.x.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert std.train.x.std().item() == pytest.approx(1.0, abs=1e-4)
    mean, sd = raw.train.x.mean(), raw.train.x.std()
    ood = raw.ood["fashion_mnist"].x
    torch.testing.assert_close(std.ood["fashion_mnist"].x, (ood - mean) / sd)  # same transform on OOD


def test_no_validation_split_is_allowed(tiny_data):
    data = load_benchmark_data(make_protocol({"val_size": 0}), tiny_data, download=False)
    assert len(data.train) == 300 and len(data.val) == 0 and data.val.x.shape == (0, 784)
