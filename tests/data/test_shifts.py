"""The shift suite and the generated OOD sets: identities, determinism, value ranges, hand-checked
cases, and one-line errors for unknown names."""
import numpy as np
import pytest

from bench.data import ood_sets, shifts
from bench.cli.main import main
from bench.errors import ConfigError


@pytest.fixture(scope="module")
def digits():
    """Twelve 28 x 28 'digits' in 0-255: a bright bar on black, at different places."""
    rng = np.random.default_rng(0)
    images = np.zeros((12, 28, 28))
    for i in range(12):
        r, c = rng.integers(4, 18, size=2)
        images[i, r:r + 8, c:c + 3] = rng.integers(150, 256)
    return images


def test_every_shift_level_is_deterministic_in_range_and_shaped_like_its_input(digits):
    for name, spec in shifts.SHIFTS.items():
        if spec.dataset is not None:  # a dataset shift: images of its own (below)
            continue
        for level in spec.levels:
            a = shifts.shifted(digits, name, level, seed=3)
            b = shifts.shifted(digits, name, level, seed=3)
            assert a.shape == digits.shape and a.dtype == np.float32, name
            assert np.array_equal(a, b), f"{name} {level}: not deterministic per seed"
            assert a.min() >= 0 and a.max() <= 255, f"{name} {level}: outside the ID value range"


def test_random_shifts_depend_on_the_seed(digits):
    for name in ("shot_noise", "impulse_noise", "glass_blur", "fog", "spatter", "zigzag", "translate"):
        level = shifts.SHIFTS[name].table_level
        assert not np.array_equal(shifts.shifted(digits, name, level, 0), shifts.shifted(digits, name, level, 1)), name


def test_rotation_and_translation_by_zero_are_the_identity(digits):
    x = digits / 255.0
    rng = np.random.default_rng(0)
    assert np.allclose(shifts.SHIFTS["rotation"].apply(x, 0.0, rng), x, atol=1e-12)
    assert np.array_equal(shifts.SHIFTS["translation"].apply(x, 0.0, rng), x)


def test_rotation_by_180_twice_is_the_identity_within_interpolation(digits):
    # the pixel grid maps onto itself under 180 degrees about the centre (13.5, 13.5): bilinear
    # interpolation then only rounds; the stated bound is 1e-3 of the 0-255 range
    once = shifts.shifted(digits, "rotation", 180.0)
    assert np.abs(shifts.shifted(once, "rotation", 180.0) - digits).max() < 1e-3
    assert np.abs(once - digits[:, ::-1, ::-1]).max() < 1e-3  # and once is the point reflection


def test_hand_checked_corruptions(digits):
    x = digits
    assert np.array_equal(shifts.shifted(x, "translation", 2.0), np.roll(x, 2, axis=2).astype(np.float32))
    stripe = shifts.shifted(x, "stripe", 1.0)
    assert np.array_equal(stripe[:, :, :7], (255 - x[:, :, :7]).astype(np.float32))
    assert np.array_equal(stripe[:, :, 7:21], x[:, :, 7:21].astype(np.float32))
    bright = shifts.shifted(x, "brightness", 5.0)  # + 0.5 of the range, clipped
    assert np.allclose(bright, np.clip(x + 127.5, 0, 255), atol=1e-4)
    edges = shifts.shifted(x, "canny_edges", 1.0)
    assert set(np.unique(edges)) <= {0.0, 255.0} and edges.any()
    # impulse noise at severity 4 replaces about 17 % of the pixels with 0 or 255
    impulse = shifts.shifted(np.full((50, 28, 28), 100.0), "impulse_noise", 4.0)
    assert abs((impulse != 100.0).mean() - 0.17) < 0.01
    # scale by 1 / 0.5 shrinks the image about its centre: a centred 8 x 8 block becomes 4 x 4
    block = np.zeros((1, 28, 28))
    block[0, 10:18, 10:18] = 255
    small = shifts.shifted(block, "scale", 5.0)
    assert 12 <= (small > 127).sum() <= 20 and small[0, 13:15, 13:15].min() > 200


def test_mnist_c_shifts_switch_on_border_pixels_that_mnist_never_uses(digits):
    border = np.ones((28, 28), bool)
    border[3:-3, 3:-3] = False
    for name in ("stripe", "fog", "brightness"):
        assert (shifts.shifted(digits, name, shifts.SHIFTS[name].table_level)[:, border] > 30).mean() > 0.3, name


def test_parse_shifts_names_families_and_errors():
    assert shifts.parse_shifts("none") == []
    assert shifts.parse_shifts("rotation,stripe") == ["rotation", "stripe"]
    assert len(shifts.parse_shifts("mnist_c")) == 15
    assert len(shifts.parse_shifts("all")) == 18 and shifts.parse_shifts("dataset") == ["sklearn_digits"]
    with pytest.raises(ConfigError, match="unknown shift 'blur'"):
        shifts.parse_shifts("blur")
    with pytest.raises(ConfigError, match="level 7"):
        shifts.shifted(np.zeros((1, 28, 28)), "fog", 7.0)


def test_generated_ood_sets_are_seeded_in_range_and_grouped(digits):
    for name in ood_sets.generated():
        a, b = ood_sets.generate(name, digits), ood_sets.generate(name, digits)
        assert np.array_equal(a, b) and a.shape == digits.shape and a.min() >= 0 and a.max() <= 255, name
    assert np.array_equal(ood_sets.generate("inverted", digits), (255 - digits).astype(np.float32))
    shuffled = ood_sets.generate("block_shuffled", digits)
    assert np.array_equal(np.sort(shuffled.reshape(12, -1)), np.sort(digits.reshape(12, -1)).astype(np.float32))
    assert not np.array_equal(shuffled, digits)
    constant = ood_sets.generate("constant", digits)
    assert (np.ptp(constant, axis=(1, 2)) == 0).all()
    assert not np.array_equal(ood_sets.generate("uniform_noise", digits),
                              ood_sets.generate("uniform_noise", digits, seed=1))
    assert {ood_sets.group(n) for n in ("mnist", "fashion_mnist", "block_shuffled")} == {"near"}
    assert {ood_sets.group(n) for n in ("cifar10_gray28", "inverted", "uniform_noise", "constant")} == {"far"}


def test_unknown_shift_or_ood_set_is_one_line_and_exit_2(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "--epochs", "1",
                 "--val-size", "50", "--hidden", "8", "--no-download", "--no-plots", "-q", "--methods",
                 "deep_ensemble", "-o", "members=2", "--save-weights"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--shifts", "rotation,blur"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown shift 'blur'" in err[0]
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--ood-sets", "svhn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown OOD set 'svhn'" in err[0]
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--ood-sets", "svhn", "--no-download"]) == 2


def test_scikit_learns_digits_replace_the_mnist_test_split_as_a_label_preserving_shift(digits):
    from sklearn.datasets import load_digits

    images, labels = shifts.shifted_set(digits, np.arange(12), "sklearn_digits", 1.0)
    source = load_digits()
    assert images.shape == (1797, 28, 28) and images.dtype == np.float32 and labels.tolist() == source.target.tolist()
    assert images[:, :4].max() == 0 and images[:, :, 24:].max() == 0  # a 20 x 20 box in the middle, as MNIST's
    # enlarged 2.5 x: the middle of each 8 x 8 source pixel keeps its value, scaled from 0-16 to 0-255
    middle = images[:, 4:24, 4:24][:, 1::5, 1::5]  # rows and columns near each source pixel's centre
    assert np.corrcoef(middle[:, :4, :4].ravel(), source.images[:, ::2, ::2].ravel())[0, 1] > 0.95
    assert images.max() == pytest.approx(255.0) and images.min() == 0
    spec = shifts.SHIFTS["sklearn_digits"]
    assert spec.applies_to("mnist") and not spec.applies_to("fashion_mnist")
    same, kept = shifts.shifted_set(digits, np.arange(12), "rotation", 90.0)  # a transformation keeps the labels
    assert same.shape == digits.shape and kept.tolist() == list(range(12))


def test_evaluate_scores_a_dataset_shift_only_for_the_id_dataset_of_its_classes(tiny_data, tmp_path):
    import pandas as pd

    for dataset in ("mnist", "fashion_mnist"):
        out = tmp_path / dataset
        assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "--epochs", "1",
                     "--val-size", "50", "--hidden", "8", "--methods", "single_network", "--id-dataset", dataset,
                     "--save-weights", "--no-download", "--no-plots", "-q"]) == 0
        # alone (no shift with a curve: the report draws no shift curves) and beside one with a level
        assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--ood-sets", "none",
                     "--shifts", "sklearn_digits", "--no-download", "-q"]) == 0
        # the figures only evaluate's shifts make; nothing to show on Fashion-MNIST (no OOD set, no shift of it)
        assert (out / "shift_gallery.png").is_file() == (dataset == "mnist")
        assert (out / "shift_table.png").is_file() == (dataset == "mnist")  # digits shift only MNIST's classes
        assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--ood-sets", "none",
                     "--shifts", "sklearn_digits,stripe", "--no-download", "-q", "--no-plots"]) == 0
        table = pd.read_csv(out / "shift.csv")
        expected = {"sklearn_digits", "stripe"} if dataset == "mnist" else {"stripe"}
        assert set(table["shift"]) == expected, dataset
        assert table["acc"].between(0, 1).all()


def test_a_copy_of_the_digits_other_than_the_recorded_one_is_one_clear_error(monkeypatch):
    from bench.data import rendered
    from bench.errors import DataError

    rendered.sklearn_digits.cache_clear()
    monkeypatch.setattr(rendered, "DIGITS_SHA256", "0" * 64)
    with pytest.raises(DataError, match="scikit-learn's digits have sha256 .*not the recorded 000000000000"):
        rendered.sklearn_digits()
    monkeypatch.undo()
    monkeypatch.setattr(rendered, "DIGITS_FRAMES_SHA256", "1" * 64)  # the same data, enlarged otherwise
    rendered.sklearn_digits.cache_clear()
    with pytest.raises(DataError, match=r"enlarged by scipy [0-9.]+ have sha256 .*not the recorded 111111111111"):
        rendered.sklearn_digits()
    monkeypatch.undo()
    rendered.sklearn_digits.cache_clear()
    images, labels = rendered.sklearn_digits()
    assert images.shape == (1797, 28, 28) and images.dtype == np.float32 and np.bincount(labels).min() >= 170


def test_the_gallery_has_no_row_for_a_shift_that_does_not_apply_to_a_dataset():
    from bench.reporting.shift_plots import gallery_rows
    assert gallery_rows(["fashion_mnist"], ["sklearn_digits", "rotation"], ("inverted",)) == [
        ("fashion_mnist", "rotation"), ("fashion_mnist", "OOD")]
    assert gallery_rows(["mnist"], ["sklearn_digits"], ("inverted",)) == [("mnist", "sklearn_digits"), ("mnist", "OOD")]
    assert gallery_rows(["mnist"], ["sklearn_digits"]) == [("mnist", "sklearn_digits")]  # no generated set scored
    assert gallery_rows(["mnist"], []) == []  # --shifts none, no generated set: no gallery
