"""The DARE paper's data: pixel bytes as floats, one split per run seed, CIFAR-10 gray 28 x 28 (loading,
corrupt batches, skipping a missing download with a note)."""
import pickle
import urllib.error

import numpy as np
import pandas as pd
import torch

from bench.cli.main import main
from bench.config import make_protocol
from bench.data.loaders import load_benchmark_data

QUIET = ["--no-download", "-q", "--no-plots"]


# -- data ---------------------------------------------------------------------------------------

def test_raw255_feeds_pixel_bytes_as_floats(tiny_data):
    raw = load_benchmark_data(make_protocol({"val_size": 50}), tiny_data, download=False)
    byte = load_benchmark_data(make_protocol({"val_size": 50, "preprocess": "raw255"}), tiny_data, download=False)
    assert byte.train.x.dtype == torch.float32 and byte.train.x.max().item() == 255.0
    assert torch.equal(byte.train.x, byte.train.x.round())  # whole numbers 0..255
    torch.testing.assert_close(byte.train.x / 255.0, raw.train.x)
    torch.testing.assert_close(byte.ood["fashion_mnist"].x / 255.0, raw.ood["fashion_mnist"].x)


def test_split_seed_run_draws_one_split_per_run_seed(tiny_data):
    per_seed = make_protocol({"val_size": 50, "split_seed": "run"})
    seed0, seed1 = (load_benchmark_data(per_seed, tiny_data, False, seed=s) for s in (0, 1))
    assert not torch.equal(seed0.val.x, seed1.val.x)
    fixed = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 0}), tiny_data, False, seed=1)
    torch.testing.assert_close(fixed.val.x, seed0.val.x)  # split_seed=run at seed 0 == fixed split 0
    fixed_again = load_benchmark_data(make_protocol({"val_size": 50, "split_seed": 0}), tiny_data, False, seed=4)
    torch.testing.assert_close(fixed_again.val.x, fixed.val.x)  # a fixed split ignores the run seed


def write_cifar_test_batch(root, n=6, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": data, b"labels": list(range(n))}, f)
    return data


def test_cifar10_gray28_is_the_top_left_crop_averaged_over_rgb(tiny_data, tmp_path):
    import shutil
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    raw = write_cifar_test_batch(root).reshape(-1, 3, 32, 32).astype(np.float64)
    data = load_benchmark_data(make_protocol({"val_size": 50, "id_dataset": "fashion_mnist", "preprocess": "raw255",
                                              "ood_sets": "mnist,cifar10_gray28"}), root, download=False)
    gray = data.ood["cifar10_gray28"].x.numpy().reshape(-1, 28, 28)
    np.testing.assert_allclose(gray, raw[:, :, :28, :28].mean(axis=1), rtol=1e-6)
    assert data.ood_skipped == {}


def test_a_corrupt_cifar_batch_is_one_clear_line(tiny_data, tmp_path, capsys):
    import shutil
    root = tmp_path / "data"
    shutil.copytree(tiny_data, root)
    (root / "cifar-10-batches-py").mkdir()
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    code = main(["run", "--data-dir", str(root), "--out", str(tmp_path / "out"), "--methods", "deep_ensemble",
                 "--seeds", "0", "--epochs", "1", "--val-size", "50", "--ood-sets", "cifar10_gray28", *QUIET])
    assert code == 2
    assert "is not a readable CIFAR-10 batch" in capsys.readouterr().err


def test_a_missing_ood_download_is_skipped_with_a_note(tiny_data, tmp_path, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")
    monkeypatch.setattr("torchvision.datasets.utils.download_and_extract_archive", offline)
    from bench.data.loaders import _load_ood_images
    _load_ood_images.cache_clear()  # no earlier test's outcome for this folder may be reused
    out = tmp_path / "out"
    # the tiny data folder has no CIFAR-10: the run tries the (patched) download, then skips the set
    code = main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble",
                 "--seeds", "0", "--epochs", "1", "--val-size", "50", "--ood-sets", "fashion_mnist,cifar10_gray28",
                 "-q", "--no-plots"])
    assert code == 0
    printed = capsys.readouterr()
    assert "note: OOD set cifar10_gray28 skipped:" in printed.out + printed.err
    assert "download failed (URLError)" in printed.out + printed.err
    runs = pd.read_csv(out / "runs.csv")
    assert runs["ood_skipped"].str.startswith("cifar10_gray28: ").all()
    assert "auroc_pred_entropy_vs_fashion_mnist" in runs and not any("cifar" in c for c in runs.columns
                                                                     if c.startswith("auroc"))


