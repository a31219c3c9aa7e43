"""The disk cache of generated images (bench.data.image_cache) and the shift suite read through it:
the same arrays back, a damaged entry drawn again, two builders at once, an unwritable cache."""
import multiprocessing
import zipfile

import numpy as np
import pytest

from bench.data import shifts
from bench.data.image_cache import ImageCache, resolve_cache_dir
from bench.errors import ConfigError


@pytest.fixture(scope="module")
def digits():
    rng = np.random.default_rng(1)
    images = np.zeros((20, 28, 28), dtype=np.float32)
    for i in range(20):
        r, c = rng.integers(4, 18, size=2)
        images[i, r:r + 8, c:c + 3] = rng.integers(150, 256)
    return images


def counting(builds, value):
    def build():
        builds.append(1)
        return value
    return build


def test_a_cached_shift_level_comes_back_as_the_very_array_drawn(digits, tmp_path):
    cache = ImageCache(tmp_path)
    for name, level in (("fog", 5.0), ("rotation", 45.0), ("translation", 6.0), ("canny_edges", 1.0)):
        drawn = shifts.shifted(digits, name, level, 2)
        first = shifts.shifted(digits, name, level, 2, cache)
        again = shifts.shifted(digits, name, level, 2, cache)
        assert first.dtype == again.dtype == np.float32
        assert np.array_equal(drawn, first) and np.array_equal(drawn, again), name
    assert len(list(tmp_path.glob("shift-*.npz"))) == 4


def test_an_entry_is_keyed_by_seed_level_and_source_images(digits, tmp_path):
    cache, builds = ImageCache(tmp_path), []
    key = {"shift": "x", "images": cache.fingerprint(digits)}
    cache.load_or_build("x", key, counting(builds, digits))
    cache.load_or_build("x", key, counting(builds, digits))
    assert len(builds) == 1
    other = digits.copy()
    other[0, 0, 0] += 1
    assert cache.fingerprint(other) != key["images"]
    a = shifts.shifted(digits, "shot_noise", 5.0, 0, cache)
    assert not np.array_equal(a, shifts.shifted(digits, "shot_noise", 5.0, 1, cache))
    assert not np.array_equal(a, shifts.shifted(digits, "shot_noise", 4.0, 0, cache))
    assert not np.array_equal(a[1:], shifts.shifted(digits[1:], "shot_noise", 5.0, 0, cache))


@pytest.mark.parametrize("damage", ["truncate", "flip", "other_key"])
@pytest.mark.parametrize("shift, level, method", [("fog", 3.0, zipfile.ZIP_STORED),  # noise: kept as it is
                                                  ("canny_edges", 1.0, zipfile.ZIP_DEFLATED)])  # sparse: deflated
def test_a_damaged_entry_is_said_drawn_again_and_replaced(digits, tmp_path, damage, shift, level, method):
    lines = []
    cache = ImageCache(tmp_path, lines.append)
    drawn = shifts.shifted(digits, shift, level, 0, cache)
    (entry,) = tmp_path.glob(f"shift-{shift}-*.npz")
    assert {i.compress_type for i in zipfile.ZipFile(entry).infolist()} == {method}
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[:len(data) // 2])
    elif damage == "flip":  # a byte in the middle of the images: only the zip's CRC-32 can tell
        middle = len(data) // 2
        entry.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])
    else:  # a complete file holding another key's images
        with zipfile.ZipFile(entry, "w") as z:
            with z.open("images.npy", "w") as f:
                np.save(f, np.zeros_like(drawn))
            with z.open("key.npy", "w") as f:
                np.save(f, np.array("{}"))
            with z.open("dtype.npy", "w") as f:
                np.save(f, np.array("<f4"))
    again = shifts.shifted(digits, shift, level, 0, cache)
    assert np.array_equal(again, drawn)
    assert len(lines) == 1 and "damaged: drawn again" in lines[0] and str(entry) in lines[0]
    assert np.array_equal(shifts.shifted(digits, shift, level, 0, ImageCache(tmp_path, lines.append)), drawn)
    assert len(lines) == 1  # the rewritten entry reads back whole


def _build_level(folder, images, start, out):
    start.wait()
    out.put(shifts.shifted(images, "fog", 5.0, 0, ImageCache(folder)).tobytes())


def test_two_workers_drawing_the_same_level_at_once_both_get_it_and_leave_one_whole_entry(digits, tmp_path):
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_build_level, args=(tmp_path, digits, start, out)) for _ in range(2)]
    for w in workers:
        w.start()
    got = [out.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    expected = shifts.shifted(digits, "fog", 5.0, 0).tobytes()
    assert got == [expected, expected]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    lines = []
    assert shifts.shifted(digits, "fog", 5.0, 0, ImageCache(tmp_path, lines.append)).tobytes() == expected
    assert lines == []


def test_a_cache_folder_that_cannot_be_made_is_one_warning_and_the_images_are_still_drawn(digits, tmp_path):
    (tmp_path / "taken").write_text("a file where the cache folder would be")
    lines = []
    cache = ImageCache(tmp_path / "taken" / "cache", lines.append)
    for level in (1.0, 2.0):
        assert np.array_equal(shifts.shifted(digits, "fog", level, 0, cache), shifts.shifted(digits, "fog", level, 0))
    assert len(lines) == 1 and "cannot be written (Not a directory)" in lines[0]


def test_a_full_disk_is_one_warning_and_the_images_are_still_drawn(digits, tmp_path, monkeypatch):
    from bench.data import image_cache

    def full(path, write, durable=True):
        raise OSError(28, "No space left on device", str(path))
    monkeypatch.setattr(image_cache, "atomic_write", full)
    lines = []
    cache = ImageCache(tmp_path, lines.append)
    for level in (1.0, 2.0):
        assert np.array_equal(shifts.shifted(digits, "fog", level, 0, cache), shifts.shifted(digits, "fog", level, 0))
    assert lines == [f"the image cache in {tmp_path} cannot be written (No space left on device): generated images "
                     "are not kept"]


def test_the_cache_folder_comes_from_the_flag_the_environment_or_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DARE_BENCH_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir(str(tmp_path / "flag")) == tmp_path / "flag"
    assert resolve_cache_dir(None) == tmp_path / "env"
    assert resolve_cache_dir("none") is None
    monkeypatch.delenv("DARE_BENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_cache_dir(None) == tmp_path / "xdg" / "dare-bench"
    monkeypatch.setenv("DARE_BENCH_CACHE", "none")
    assert resolve_cache_dir(None) is None
    with pytest.raises(ConfigError):
        resolve_cache_dir(" ")


def _fog_as_published(count, rng, decay, size=256, chunk=128):
    """ImageNet-C's plasma fractal, chunk by chunk and level by level as bench.data.shifts drew it
    before it built the maps block by block: the reference the faster one must equal bit for bit."""
    maps = []
    for start in range(0, count, chunk):
        m = np.zeros((min(chunk, count - start), size, size))
        step, wibble = size, 100.0
        while step >= 2:
            half = step // 2

            def jitter(a):
                return a / 4 + wibble * rng.uniform(-wibble, wibble, a.shape)
            corners = m[:, 0:size:step, 0:size:step]
            square = corners + np.roll(corners, -1, axis=1)
            square = square + np.roll(square, -1, axis=2)
            m[:, half:size:step, half:size:step] = jitter(square)
            centres = m[:, half:size:step, half:size:step]
            corners = m[:, 0:size:step, 0:size:step]
            m[:, 0:size:step, half:size:step] = jitter(centres + np.roll(centres, 1, axis=1) + corners
                                                       + np.roll(corners, -1, axis=2))
            m[:, half:size:step, 0:size:step] = jitter(centres + np.roll(centres, 1, axis=2) + corners
                                                       + np.roll(corners, -1, axis=1))
            step //= 2
            wibble /= decay
        m -= m.min(axis=(1, 2), keepdims=True)
        maps.append((m / m.max(axis=(1, 2), keepdims=True))[:, :28, :28])
    return np.concatenate(maps)


@pytest.mark.parametrize("count", [1, 6, 131])  # one map; a part-filled block; past a chunk of 128
def test_fogs_plasma_fractal_built_block_by_block_is_the_published_one_bit_for_bit(count):
    for decay in (2.0, 1.4):
        fast = shifts._plasma_fractal(count, np.random.default_rng(11), decay)
        assert np.array_equal(fast, _fog_as_published(count, np.random.default_rng(11), decay))
