"""The OOD sets as a table: a set added as one row plus its reader is scored like the built-in ones;
names are checked in one place; a set that cannot be had is an error or a note."""
import os

import numpy as np
import pandas as pd
import pytest

from bench.cli.main import main
from bench.data import files, ood_sets
from bench.data.loaders import load_ood_images, prepare_ood_sets
from bench.errors import ConfigError, DataError
from bench.execution import executors
from idx import write_both, write_idx_images, write_idx_labels

QUIET = ["--no-download", "--no-plots", "-q"]


def read_kmnist_test(root, download):
    """A user's loaded set: KMNIST-style IDX files in <data folder>/KMNIST (never downloaded)."""
    folder = root / "KMNIST"
    return (files.read_idx(folder / "t10k-images-idx3-ubyte", "images"),
            files.read_idx(folder / "t10k-labels-idx1-ubyte", "labels"))


def register(monkeypatch, name="kmnist_test", optional=False, read=read_kmnist_test):
    monkeypatch.setitem(ood_sets.SETS, name, ood_sets.OodSet(name, "near", "KMNIST's test split (a test's own)",
                                                             read=read, optional=optional))


@pytest.fixture
def data_with_kmnist(tmp_path):
    root = write_both(tmp_path / "data", n_train=200, n_test=60)
    (root / "KMNIST").mkdir()
    rng = np.random.default_rng(5)
    write_idx_images(root / "KMNIST" / "t10k-images-idx3-ubyte", rng.integers(0, 256, size=(40, 28, 28)))
    write_idx_labels(root / "KMNIST" / "t10k-labels-idx1-ubyte", np.arange(40) % 10)
    return root


def test_a_set_added_as_one_row_is_listed_and_scored(data_with_kmnist, tmp_path, monkeypatch, capsys):
    register(monkeypatch)
    assert ood_sets.known_for("mnist")[-1] == "kmnist_test" and ood_sets.group("kmnist_test") == "near"
    assert main(["list"]) == 0
    assert "kmnist_test [near OOD]: KMNIST's test split (a test's own)" in capsys.readouterr().out
    images, labels = load_ood_images(data_with_kmnist, "kmnist_test", download=False)
    assert images.shape == (40, 28, 28) and images.dtype.is_floating_point and labels.tolist() == list(range(10)) * 4
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(data_with_kmnist), "--out", str(out), "--seeds", "0", "--epochs", "1",
                 "--val-size", "50", "--hidden", "8", *QUIET, "--methods", "deep_ensemble", "-o", "members=2",
                 "--ood-sets", "fashion_mnist,kmnist_test"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs["ood_sets"].tolist() == ["fashion_mnist kmnist_test"]
    assert 0.0 <= runs["auroc_pred_entropy_vs_kmnist_test"].iloc[0] <= 1.0


def test_a_set_that_cannot_be_had_is_an_error_or_when_optional_a_note(tmp_path, monkeypatch):
    register(monkeypatch, "kmnist_required")
    register(monkeypatch, "kmnist_optional", optional=True)
    with pytest.raises(DataError, match="OOD set kmnist_required: .*t10k-images-idx3-ubyte"):
        prepare_ood_sets(tmp_path, ["kmnist_required"], download=False)
    skipped = prepare_ood_sets(tmp_path, ["inverted", "kmnist_optional"], download=False)
    assert list(skipped) == ["kmnist_optional"] and "t10k-images-idx3-ubyte" in skipped["kmnist_optional"]


def test_a_reader_of_the_wrong_shape_is_one_clear_error(tmp_path, monkeypatch):
    register(monkeypatch, "flat_images", read=lambda root, download: (np.zeros((5, 784)), np.zeros(5)))
    with pytest.raises(DataError, match=r"OOD set flat_images: its reader gave images of shape \(5, 784\)"):
        load_ood_images(tmp_path, "flat_images", download=False)


def test_names_are_checked_in_one_place():
    ood_sets.check_names(["fashion_mnist", "constant"], "mnist")
    with pytest.raises(ConfigError, match=r"^protocol: unknown OOD set 'kmnist' \(known for in-distribution mnist: "
                                          r"fashion_mnist, cifar10_gray28, .*bernoulli_noise, or suite\)$"):
        ood_sets.check_names(["constant", "kmnist"], "mnist", "protocol", keywords=("suite",))
    with pytest.raises(ConfigError, match=r"^OOD set 'fashion_mnist' is not known for in-distribution fashion_mnist "
                                          r"\(known: mnist, "):
        ood_sets.check_names(["fashion_mnist"], "fashion_mnist")


def test_a_row_is_a_reader_or_a_generator():
    with pytest.raises(ValueError, match="exactly one of a reader and a generator"):
        ood_sets.OodSet("both", "far", "", read=read_kmnist_test, generate=lambda x, rng: x)
    with pytest.raises(ValueError, match="only a loaded set can be optional"):
        ood_sets.OodSet("made", "far", "", generate=lambda x, rng: x, optional=True)
    with pytest.raises(ValueError, match="group 'middle' is not one of near, far"):
        ood_sets.OodSet("odd", "middle", "", read=read_kmnist_test)


def test_an_unknown_set_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "run_pack", lambda *a, **k: pytest.fail("trained despite bad input"))
    assert main(["run", "--out", str(tmp_path), "--data-dir", str(tmp_path), *QUIET, "--ood-sets", "kmnist"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown OOD set 'kmnist' (known for in-distribution mnist: fashion_mnist" in err


def test_letters_are_rendered_from_matplotlibs_fonts_the_same_every_time(monkeypatch):
    from matplotlib import ft2font
    from bench.data import rendered

    images, labels = rendered.letters()
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8 and set(labels.tolist()) == set(range(10))
    assert (np.bincount(labels) > 900).all()  # A-J drawn about evenly
    assert (images.reshape(len(images), -1).max(axis=1) > 200).all()  # every image has a glyph
    assert (images[:, 0, :] == 0).mean() > 0.99 and (images[:, :, -1] == 0).mean() > 0.99  # the margin, where it fits
    small, small_labels = rendered.letters(50, seed=1)
    session_cache = os.environ["DARE_BENCH_CACHE"]  # tests/conftest.py's folder, never ~/.cache
    monkeypatch.setenv("DARE_BENCH_CACHE", "none")
    again = rendered.letters.__wrapped__(50, seed=1)  # rendered anew, not a cache's copy
    assert np.array_equal(small, again[0]) and np.array_equal(small_labels, again[1])
    monkeypatch.setenv("DARE_BENCH_CACHE", session_cache)
    monkeypatch.setattr(rendered, "glyph", lambda *a: (_ for _ in ()).throw(AssertionError("drawn again")))
    kept = rendered.letters.__wrapped__(50, seed=1)  # another process: read from the disk cache, not drawn
    assert np.array_equal(small, kept[0]) and np.array_equal(small_labels, kept[1]) and kept[0].dtype == np.uint8
    monkeypatch.undo()
    assert not np.array_equal(small, rendered.letters(50, seed=2)[0])
    if ft2font.__freetype_version__ == rendered.RECORDED_WITH_FREETYPE:  # another FreeType may draw other pixels
        assert rendered.checksum(images, labels) == rendered.LETTERS_SHA256
    # drawn otherwise than recorded: the optional set is skipped with a note, as absent files are
    monkeypatch.setattr(rendered, "LETTERS_SHA256", "0" * 64)
    with pytest.raises(FileNotFoundError, match=r"letters rendered by matplotlib .* have sha256 .*not the recorded 000"):
        rendered.read_letters(None, False)


def test_letters_are_scored_as_an_ood_set_without_any_file(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "--epochs", "1",
                 "--val-size", "50", "--hidden", "8", *QUIET, "--methods", "deep_ensemble", "-o", "members=2",
                 "--ood-sets", "letters"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs["ood_sets"].tolist() == ["letters"] and 0.0 <= runs["auroc_pred_entropy_vs_letters"].iloc[0] <= 1.0
    assert "ood_skipped" not in runs or runs["ood_skipped"].isna().all()
