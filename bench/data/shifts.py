"""The shift suite: deterministic, seeded transformations of the in-distribution test images,
scored from stored weights by ``bench evaluate`` (docs/evaluation.md, "Dataset shift").

* ``rotation`` and ``translation``: Ovadia et al. (2019), "Can You Trust Your Model's
  Uncertainty?": rotation by 15°-180° in 15° steps (bilinear, about the image centre, zero fill),
  cyclic horizontal roll by 2-26 pixels in steps of 4.
* The 15 corruptions of MNIST-C (Mu & Gilmer, 2019), under the paper's names, re-implemented with
  numpy/scipy/scikit-image from the published definitions and seeded. Where the published function
  has a severity list, every severity 1-5 is a level and ``reference_level`` is the severity the
  MNIST-C dataset was made with (the function's default); stripe, dotted line, zigzag and canny
  edges have no parameter (one level). ``fidelity`` says which are exact re-implementations (same
  formula and parameters; only the random stream differs) and which are approximations, and why.

Images are float arrays (N, 28, 28) in [0, 255] (the loader's convention); every output is too.
The corruption functions work on [0, 1] values, as the published ones do.
"""
from __future__ import annotations

import dataclasses
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from bench.data import rendered
from bench.data.image_cache import ImageCache
from bench.errors import ConfigError

SIDE = 28
CENTRE = (SIDE - 1) / 2  # 13.5: MNIST-C's affine maps keep this point fixed
# a shift's images depend on this (with the seed, level and source images): raise it when a shift's
# generator changes what it draws, so that cached levels (bench.data.image_cache) are drawn again
GENERATOR_VERSION = 1
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Shift:
    name: str
    family: str                 # "rotation" / "translation" (Ovadia et al.), "mnist_c"
    levels: tuple[float, ...]   # intensities, the x axis of the shift curves
    unit: str                   # of the levels: degrees, pixels, severity, or "" (one level)
    apply: Callable[[np.ndarray, float, np.random.Generator], np.ndarray] | None  # [0, 1] images -> [0, 1]
    fidelity: str               # "exact" or "approximation: why"
    reference_level: float | None = None  # MNIST-C's published severity (the per-corruption table's level)
    middle_level: float | None = None     # rotation / translation: the table's level, mid-curve
    # a dataset shift: another set of images of the ID classes replaces the test split (no ``apply``),
    # for the ID datasets whose classes it shares
    dataset: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    id_datasets: tuple[str, ...] = ()

    def applies_to(self, id_dataset: str) -> bool:
        return not self.id_datasets or id_dataset in self.id_datasets

    @property
    def table_level(self) -> float:
        """The level the per-corruption table reports: MNIST-C's severity; for rotation and
        translation the middle of the curve (90°; 14 px, the farthest a cyclic roll can move a
        pixel); else the only level."""
        for level in (self.reference_level, self.middle_level):
            if level is not None:
                return level
        return self.levels[-1]


def shifted(images: np.ndarray, shift: str, level: float, seed: int = 0, cache: ImageCache | None = None
            ) -> np.ndarray:
    """``images`` (N, 28, 28) in [0, 255] under ``shift`` at ``level``: float32 in [0, 255]. The
    random stream is (seed, shift, level): the same set whatever else is generated. ``cache``: kept
    on disk and read back from there next time (bench.data.image_cache), keyed by these images."""
    spec = get_shift(shift)
    if level not in spec.levels:
        raise ConfigError(f"shift {shift}: level {level:g} is not one of {', '.join(f'{v:g}' for v in spec.levels)}")
    if spec.dataset is not None:
        return spec.dataset()[0]

    def draw():
        rng = np.random.default_rng([seed, zlib.crc32(shift.encode()), spec.levels.index(level)])
        out = spec.apply(np.asarray(images, dtype=np.float64) / 255.0, level, rng)
        return (np.clip(out, 0.0, 1.0) * 255.0).astype(np.float32)
    if cache is None:
        return draw()
    key = {"shift": shift, "level": level, "seed": seed, "images": cache.fingerprint(images),
           "generator": GENERATOR_VERSION}
    return cache.load_or_build(f"shift-{shift}-{level:g}-seed{seed}", key, draw)


def shifted_set(images: np.ndarray, labels: np.ndarray, shift: str, level: float, seed: int = 0,
                cache: ImageCache | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The shifted test set, images and labels: the ID test images under ``shift`` with their labels,
    or, for a dataset shift, its own images and labels."""
    spec = get_shift(shift)
    return shifted(images, shift, level, seed, cache), (labels if spec.dataset is None else spec.dataset()[1])


def get_shift(name: str) -> Shift:
    if name not in SHIFTS:
        raise ConfigError(f"unknown shift {name!r} (known: {', '.join(SHIFTS)})")
    return SHIFTS[name]


def parse_shifts(text: str | None) -> list[str]:
    """'all', 'none', a family (rotation, translation, mnist_c) or names, comma-separated -> names."""
    if text is None or text.strip() in ("", "none"):
        return []
    names: list[str] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "all":
            names += list(SHIFTS)
        elif part in {s.family for s in SHIFTS.values()}:
            names += [n for n, s in SHIFTS.items() if s.family == part]
        else:
            names.append(get_shift(part).name)
    return list(dict.fromkeys(names))


# -- Ovadia et al. -------------------------------------------------------------------------------

def _rotation(x, degrees, rng):
    from scipy import ndimage  # imported when a shift is drawn: not at every command's start
    return ndimage.rotate(x, degrees, axes=(2, 1), reshape=False, order=1, mode="constant", cval=0.0)


def _translation(x, pixels, rng):
    return np.roll(x, int(pixels), axis=2)


# -- MNIST-C helpers -----------------------------------------------------------------------------

def _gaussian(x, sigma, rows_only=False):
    """skimage.filters.gaussian's defaults (mode nearest, truncate 4) on each image. ``rows_only``:
    MNIST-C's glass blur called it on a 2-D image with multichannel=True, which blurs along the
    rows axis only (the columns were taken for channels); kept, as published."""
    from scipy import ndimage
    return ndimage.gaussian_filter(x, sigma=(0, sigma, 0) if rows_only else (0, sigma, sigma), mode="nearest",
                                   truncate=4.0)


def _warp(x, matrix, order=1):
    """skimage.transform.warp(image, inverse_map=AffineTransform(matrix)) of every image: output
    pixel (r, c) takes the input at matrix @ (c, r, 1), bilinear, zero outside."""
    from skimage.transform import AffineTransform, warp
    stacked = np.moveaxis(x, 0, -1)  # (28, 28, N): warp maps every "channel" alike
    return np.moveaxis(warp(stacked, inverse_map=AffineTransform(matrix=matrix), order=order, mode="constant",
                            cval=0.0, clip=True), -1, 0)


def _affine(rotation=0.0, shear=0.0, scale=1.0, translation=(0.0, 0.0), keep_centre=True) -> np.ndarray:
    """The 3 x 3 matrix of scikit-image's AffineTransform as MNIST-C used it (scikit-image < 0.19:
    [[s cos r, -s sin(r + shear), tx], [s sin r, s cos(r + shear), ty]]), with the translation
    that keeps the image centre fixed when ``keep_centre``."""
    m = np.array([[scale * np.cos(rotation), -scale * np.sin(rotation + shear), translation[0]],
                  [scale * np.sin(rotation), scale * np.cos(rotation + shear), translation[1]],
                  [0.0, 0.0, 1.0]])
    if keep_centre:
        m[0, 2] = CENTRE * (1 - m[0, 0] - m[0, 1])
        m[1, 2] = CENTRE * (1 - m[1, 0] - m[1, 1])
    return m


def _random_sign_affine(x, rng, make):
    """MNIST-C's shear and rotate: each image's direction is a fair coin."""
    signs = rng.choice([-1.0, 1.0], size=len(x))
    out = np.empty_like(x)
    for sign in (-1.0, 1.0):
        chosen = signs == sign
        if chosen.any():
            out[chosen] = _warp(x[chosen], make(sign))
    return out


def _line_from_points(c0, r0, c1, r1):
    """MNIST-C's anti-aliased line (28 x 28 in [0, 1]): intensity log(1 - d/2.3) + 1 at vertical
    distance d from the line through (c0, r0), (c1, r1), zero outside the columns [floor c0, ceil c1).
    Rows given as (G, 1, 1) arrays give G lines (G, 28, 28), each the one its rows would give."""
    if c1 == c0:
        return np.zeros((SIDE, SIDE))
    cols = np.arange(SIDE, dtype=np.float64)[None, :]
    rows = np.arange(SIDE, dtype=np.float64)[:, None]
    dist = np.clip(np.abs(rows - ((r1 - r0) / (c1 - c0) * (cols - c0) + r0)), 0, 2.3 - 1e-10)
    line = np.clip(np.log(1 - dist / 2.3) + 1, 0, 1)
    line[..., :int(np.floor(c0))] = 0
    line[..., int(np.ceil(c1)):] = 0
    return line


# -- MNIST-C corruptions (x: (N, 28, 28) in [0, 1]) ------------------------------------------------

SHOT = (60, 25, 12, 5, 3)
IMPULSE = (0.03, 0.06, 0.09, 0.17, 0.27)
GLASS = ((0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2))  # sigma, max shift, iterations
MOTION = ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15))  # ImageMagick radius, sigma
SHEAR = (0.2, 0.4, 0.6, 0.8, 1.0)
SCALE = (1 / .9, 1 / .8, 1 / .7, 1 / .6, 1 / .5)
ROTATE = (0.2, 0.4, 0.6, 0.8, 1.0)  # radians
BRIGHTNESS = (0.1, 0.2, 0.3, 0.4, 0.5)
TRANSLATE = (1, 2, 3, 4, 5)
FOG = ((1.5, 2), (2.0, 2), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4))  # strength, wibble decay
SPATTER = ((0.65, 0.3, 4, 0.69, 0.6), (0.65, 0.3, 3, 0.68, 0.6), (0.65, 0.3, 2, 0.68, 0.5),
           (0.65, 0.3, 1, 0.65, 1.5), (0.67, 0.4, 1, 0.65, 1.5))  # loc, scale, sigma, threshold, mask sigma


def _severity(table, level):
    return table[int(level) - 1]


def _shot_noise(x, level, rng):
    c = _severity(SHOT, level)
    return rng.poisson(x * c) / c


def _impulse_noise(x, level, rng):
    from skimage.util import random_noise
    return random_noise(x, mode="s&p", amount=_severity(IMPULSE, level), rng=rng, clip=True)


def _glass_blur(x, level, rng):
    sigma, delta, iterations = _severity(GLASS, level)
    x = (_gaussian(x, sigma, rows_only=True) * 255).astype(np.uint8)  # truncation, as published
    n = np.arange(len(x))
    # the published loop visits pixels from (27 - delta) down to (delta + 1); at each, with
    # probability 1/2, it swaps the pixel with one at offsets in [-delta, delta): one image at a
    # time there, all images at once here (the same sequence of swaps per image)
    for _ in range(iterations):
        for h in range(SIDE - delta, delta, -1):
            for w in range(SIDE - delta, delta, -1):
                swap = rng.random(len(x)) < 0.5
                dy, dx = rng.integers(-delta, delta, size=(2, len(x)))
                idx, h2, w2 = n[swap], h + dy[swap], w + dx[swap]
                here, there = x[idx, h, w].copy(), x[idx, h2, w2].copy()
                x[idx, h, w], x[idx, h2, w2] = there, here
    return _gaussian(x / 255.0, sigma, rows_only=True)


def _motion_blur(x, level, rng, block=128):
    """ImageMagick's MotionBlurImage(radius, sigma, angle): a one-sided kernel of 2 ceil(radius) + 1
    taps, weight exp(-i^2 / (2 sigma^2)) (normalised) at the offset round(i (cos a, sin a)), edge
    pixels repeated; the result rounded to 8 bits (MNIST-C went through PNG). ``block`` images at a
    time, so that the sums stay in the CPU's cache (2.5x faster than all at once, the same floats)."""
    radius, sigma = _severity(MOTION, level)
    taps = np.arange(2 * int(np.ceil(radius)) + 1)
    weights = np.exp(-taps ** 2 / (2.0 * sigma ** 2))
    weights /= weights.sum()
    angles = np.deg2rad(rng.uniform(-45, 45, size=len(x)))
    rows, cols = np.arange(SIDE)[None, :, None], np.arange(SIDE)[None, None, :]
    out = np.zeros_like(x)
    for start in range(0, len(x), block):
        pixels = np.ascontiguousarray(x[start:start + block]).reshape(-1)
        angle = angles[start:start + block]
        first = (np.arange(len(angle)) * SIDE * SIDE)[:, None, None]  # each image's first pixel in ``pixels``
        total = out[start:start + block]
        for i, weight in zip(taps, weights):
            dx = np.ceil(i * np.cos(angle) - 0.5).astype(int)[:, None, None]
            dy = np.ceil(i * np.sin(angle) - 0.5).astype(int)[:, None, None]
            total += weight * pixels.take(first + np.clip(rows + dy, 0, SIDE - 1) * SIDE
                                          + np.clip(cols + dx, 0, SIDE - 1))
    return np.round(np.clip(out, 0, 1) * 255) / 255


def _shear(x, level, rng):
    c = _severity(SHEAR, level)
    return _random_sign_affine(x, rng, lambda sign: _affine(shear=sign * c))


def _scale(x, level, rng):
    return _warp(x, _affine(scale=_severity(SCALE, level)))


def _rotate(x, level, rng):
    c = _severity(ROTATE, level)
    return _random_sign_affine(x, rng, lambda sign: _affine(rotation=sign * c))


def _brightness(x, level, rng):
    # published: gray -> RGB -> HSV, V + c, back to gray. A gray pixel has S = 0 and V = its value,
    # and the RGB -> gray weights sum to 1, so this is exactly min(x + c, 1)
    return x + _severity(BRIGHTNESS, level)


def _translate(x, level, rng):
    c = _severity(TRANSLATE, level)
    signs = rng.choice([-1, 1], size=(len(x), 2))
    out = np.empty_like(x)
    for sx in (-1, 1):
        for sy in (-1, 1):
            chosen = (signs[:, 0] == sx) & (signs[:, 1] == sy)
            if chosen.any():
                out[chosen] = _warp(x[chosen], _affine(translation=(sx * c, sy * c), keep_centre=False))
    return out


def _stripe(x, level, rng):
    out = x.copy()
    out[:, :, :7] = 1 - out[:, :, :7]
    out[:, :, 21:] = 1 - out[:, :, 21:]
    return out


def _plasma_fractal(count, rng, wibble_decay, size=256, chunk=128, block=4):
    """MNIST-C's diamond-square height map (from ImageNet-C), ``count`` maps of size x size, each
    scaled to [0, 1]; their top-left 28 x 28 corners. The stream is drawn as ImageNet-C draws it,
    ``chunk`` maps at once (per level: squares, then the two diamonds); the maps are built ``block`` at
    a time (in the CPU's cache) on up to 4 cores while the next chunk is drawn: the same numbers."""
    out = np.empty((count, SIDE, SIDE))

    def build(start, first, noise):
        m = np.zeros((min(block, len(noise[0][0]) - first), size, size))
        _diamond_square(m, [[draw[first:first + block] for draw in level] for level in noise])
        low, high = m.min(axis=(1, 2), keepdims=True), m.max(axis=(1, 2), keepdims=True)
        # (m - low) / max(m - low) on the corner: fl(x - low) is monotone, so max(m - low) = fl(high - low)
        out[start + first:start + first + len(m)] = (m[:, :SIDE, :SIDE] - low) / (high - low)
    with ThreadPoolExecutor(min(4, CORES)) as pool:
        built = []
        for start in range(0, count, chunk):
            k = min(chunk, count - start)
            noise, wibble, n = [], 100.0, 1
            while n <= size // 2:
                noise.append([wibble * rng.uniform(-wibble, wibble, (k, n, n)) for _ in range(3)])
                n, wibble = 2 * n, wibble / wibble_decay
            built += [pool.submit(build, start, first, noise) for first in range(0, k, block)]
        for done in built:
            done.result()
    return out


def _diamond_square(m, noise):
    """Fill the (b, size, size) zeros ``m`` level by level: each new point is the mean of its four
    neighbours on the coarser grid (wrapping around) plus that level's noise (square, row and column
    points); the sums are added in ImageNet-C's order, so the floats are its floats."""
    size = m.shape[-1]
    step = size
    for square_noise, row_noise, column_noise in noise:
        half = step // 2
        corners = m[:, 0:size:step, 0:size:step]
        square = corners + np.roll(corners, -1, axis=1)
        square = square + np.roll(square, -1, axis=2)
        m[:, half:size:step, half:size:step] = square / 4 + square_noise
        centres = m[:, half:size:step, half:size:step]
        m[:, 0:size:step, half:size:step] = (centres + np.roll(centres, 1, axis=1) + corners
                                             + np.roll(corners, -1, axis=2)) / 4 + row_noise
        m[:, half:size:step, 0:size:step] = (centres + np.roll(centres, 1, axis=2) + corners
                                             + np.roll(corners, -1, axis=1)) / 4 + column_noise
        step //= 2


def _fog(x, level, rng):
    strength, decay = _severity(FOG, level)
    peak = x.max(axis=(1, 2), keepdims=True)
    fogged = x + strength * _plasma_fractal(len(x), rng, decay)
    return fogged * peak / (peak + strength)


def _spatter(x, level, rng):
    loc, scale, sigma, threshold, mask_sigma = _severity(SPATTER, level)
    liquid = _gaussian(rng.normal(loc, scale, size=x.shape), sigma)
    liquid[liquid < threshold] = 0
    mask = _gaussian((liquid > threshold).astype(np.float64), mask_sigma)
    mask[mask < 0.8] = 0
    return x * (1 - mask) + 63 / 255 * mask  # mud of gray 63


def _dotted_line(x, level, rng):
    out = x.copy()
    dashes = (np.arange(SIDE) // 2) % 2 == 1  # the published line keeps columns 2-3, 6-7, ...
    for i, (r0, r1) in enumerate(rng.integers(0, 27, size=(len(x), 2))):
        out[i] += _line_from_points(0, r0, 27, r1) * dashes
    return out


def _zigzag_line(r0, r1):
    """MNIST-C's zigzag: a saw line of segment length 2 and amplitude 2 from column 2 to 25, tilted
    from row r0 towards row r1 (its last-point rule kept as published)."""
    a = b = 2.0
    c0, c1 = 2, 25
    theta = np.arctan((r1 - r0) / (c1 - c0))
    d = (c1 - c0) / np.cos(theta)
    points = [(0.0, 0.0)]
    r_i = 0.0
    for i in range(int((d - a) // (2 * a)) + 1):
        r_i = (-1) ** i * b
        points.append(((2 * i + 1) * a, r_i))
    last = (2 * a) * (d // (2 * a))
    if d != last:
        points.append((d, r_i / (2 * (d - last))))
    rotation = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    cs, rs = rotation @ np.array(points).T
    return cs + c0, rs + r0


def _zigzag(x, level, rng):
    out = x.copy()
    starts, tilts = np.empty(len(x), dtype=np.int64), np.empty(len(x), dtype=np.int64)
    for i in range(len(x)):  # the published stream: per image, its first row, then its tilt
        starts[i] = rng.integers(0, 27)
        tilts[i] = rng.integers(-5, 5)
    # the images of one tilt share their line, moved down by their first row: drawn together (same floats)
    for tilt in np.unique(tilts):
        chosen = np.flatnonzero(tilts == tilt)
        first = starts[chosen][:, None, None]
        cs, rs = _zigzag_line(0, tilt)
        for j in range(1, len(cs)):
            line = _line_from_points(cs[j - 1], rs[j - 1] + first, cs[j], rs[j] + first)
            out[chosen] = np.clip(out[chosen] + line, 0, 1)
    return out


def _canny_edges(x, level, rng):
    from skimage.feature import canny
    return np.stack([canny(image) for image in x]).astype(np.float64)


SEVERITIES = (1.0, 2.0, 3.0, 4.0, 5.0)
EXACT = "exact"


def _mnist_c(name, apply, reference=None, fidelity=EXACT) -> Shift:
    levels = SEVERITIES if reference is not None else (1.0,)
    return Shift(name, "mnist_c", levels, "severity" if reference is not None else "", apply, fidelity, reference)


SHIFTS: dict[str, Shift] = {s.name: s for s in [
    Shift("rotation", "rotation", tuple(float(d) for d in range(15, 181, 15)), "degrees", _rotation, EXACT,
          middle_level=90.0),
    Shift("translation", "translation", tuple(float(p) for p in range(2, 27, 4)), "pixels", _translation, EXACT,
          middle_level=14.0),
    _mnist_c("shot_noise", _shot_noise, 5.0),
    _mnist_c("impulse_noise", _impulse_noise, 4.0),
    _mnist_c("glass_blur", _glass_blur, 1.0),
    _mnist_c("motion_blur", _motion_blur, 1.0,
             "approximation: ImageMagick's MotionBlurImage kernel re-implemented from ImageMagick's source (taps, "
             "weights, rounded offsets, edge pixels), without its 16-bit quantum arithmetic; ImageMagick is not a "
             "dependency, so no pixel-by-pixel comparison was made"),
    _mnist_c("shear", _shear, 2.0),
    _mnist_c("scale", _scale, 3.0),
    _mnist_c("rotate", _rotate, 2.0),
    _mnist_c("brightness", _brightness, 5.0),
    _mnist_c("translate", _translate, 3.0),
    _mnist_c("stripe", _stripe),
    _mnist_c("fog", _fog, 5.0),
    _mnist_c("spatter", _spatter, 4.0),
    _mnist_c("dotted_line", _dotted_line),
    _mnist_c("zigzag", _zigzag),
    _mnist_c("canny_edges", _canny_edges),
    Shift("sklearn_digits", "dataset", (1.0,), "", None, "a dataset, not a transformation: scikit-learn's 1,797 "
          "8 x 8 digits enlarged to 20 x 20 in a 28 x 28 frame (bench.data.rendered)", dataset=rendered.sklearn_digits,
          id_datasets=("mnist",)),
]}
