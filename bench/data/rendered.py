"""Image sets made from data that ships inside installed packages, so they need no download.

``sklearn_digits``: scikit-learn's 1,797 handwritten digits (the UCI optdigits test set, 8 x 8, values
0-16) scaled to 0-255, enlarged bilinearly to 20 x 20 and put in the middle of a 28 x 28 frame, as
MNIST's digits fill a 20 x 20 box in theirs (MNIST centres each by its centre of mass; these fill
their box). The same ten classes from other writers and another scanner: a label-preserving shift
for MNIST (``bench.data.shifts``: accuracy and NLL, not OOD).

``letters``: the letters A-J (labels 0-9) rendered white on black in 28 x 28 from TrueType fonts
that ship with matplotlib (DejaVu Sans, Sans Mono and Serif, STIX General, four weights each, and
four Computer Modern faces: ``FONTS``), by FreeType through ``matplotlib.ft2font``, each image from
a seeded stream: the letter, the font, the glyph size (12-22 pixels em) and the position (the glyph
anywhere in the frame with a 1-pixel margin where it fits). A notMNIST-like near-OOD set; unlike
notMNIST (Bulatov, 2011: about 19,000 small images cut from some 500 fonts, decorative ones
included, each glyph scaled to fill the frame, dark letters on white), it has 20 plain text fonts,
varied sizes and positions and MNIST's polarity. Rendering 10,000 images takes 1-3 s; the image
cache keeps them on disk and a process in memory (``functools.cache``), and ``LETTERS_SHA256`` checks that the FreeType of the
installed matplotlib draws the images this table was made with.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from bench.data.image_cache import ImageCache, resolve_cache_dir
from bench.errors import DataError

SIDE = 28
LETTERS = "ABCDEFGHIJ"
N_LETTERS = 10_000
LETTERS_SEED = 0
SIZES = (12, 22)  # the em size in pixels, inclusive
FONTS = tuple(f"{family}{style}.ttf" for family in ("DejaVuSans", "DejaVuSansMono", "DejaVuSerif")
              for style in ("", "-Bold", "-Oblique" if family != "DejaVuSerif" else "-Italic",
                            "-BoldOblique" if family != "DejaVuSerif" else "-BoldItalic")) + (
    "STIXGeneral.ttf", "STIXGeneralBol.ttf", "STIXGeneralItalic.ttf", "STIXGeneralBolIta.ttf",
    "cmr10.ttf", "cmb10.ttf", "cmss10.ttf", "cmtt10.ttf")
RENDER_VERSION = 1  # raised when letters() draws otherwise: cached sets are drawn again
RECORDED_WITH_FREETYPE = "2.14.3"  # matplotlib 3.11.2's: the FreeType that drew LETTERS_SHA256's images
LETTERS_SHA256 = "ecec1eefe7b9b2d4d7ade719808ca4eed5cc8ae1d460fc4c5d60e2ab537c7249"


def font_dir() -> Path:
    import matplotlib
    return Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def glyph(font, letter: str, size: int) -> np.ndarray:
    """The anti-aliased bitmap (h, w) uint8 of ``letter`` in ``font`` (an FT2Font) at ``size`` pixels em."""
    font.set_size(size, 72)  # 72 dpi: points are pixels
    font.set_text(letter, 0.0)
    font.draw_glyphs_to_bitmap(antialiased=True)
    return np.asarray(font.get_image())


def place(bitmap: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A 28 x 28 uint8 frame with ``bitmap`` at a random position, a 1-pixel margin where it fits
    (a glyph larger than the frame is cut to its centre)."""
    h, w = bitmap.shape
    top, left = max(0, (h - SIDE) // 2), max(0, (w - SIDE) // 2)
    bitmap = bitmap[top:top + SIDE, left:left + SIDE]
    h, w = bitmap.shape
    frame = np.zeros((SIDE, SIDE), dtype=np.uint8)
    y, x = (rng.integers(margin, SIDE - extent - margin + 1)
            for extent, margin in ((h, int(h <= SIDE - 2)), (w, int(w <= SIDE - 2))))
    frame[y:y + h, x:x + w] = bitmap
    return frame


@functools.cache
def letters(n: int = N_LETTERS, seed: int = LETTERS_SEED) -> tuple[np.ndarray, np.ndarray]:
    """``n`` letter images (n, 28, 28) uint8 in 0-255 and their labels (n,) 0-9, the same for the
    same (n, seed) wherever matplotlib ships the same fonts and FreeType. The images are kept in the
    image cache (bench.data.image_cache: $DARE_BENCH_CACHE, else ~/.cache/dare-bench; keyed by n,
    seed, fonts, matplotlib and FreeType), so a later process reads them instead of drawing them."""
    import matplotlib
    from matplotlib import ft2font

    rng = np.random.default_rng([seed, 0x1E77E55])
    labels = rng.integers(0, len(LETTERS), size=n)  # the stream's first draw: no rendering needed

    def draw() -> np.ndarray:
        fonts = [ft2font.FT2Font(str(font_dir() / name)) for name in FONTS]
        faces = rng.integers(0, len(fonts), size=n)
        sizes = rng.integers(SIZES[0], SIZES[1] + 1, size=n)
        return np.stack([place(glyph(fonts[f], LETTERS[k], int(s)), rng) for k, f, s in zip(labels, faces, sizes)])

    key = {"set": "letters", "n": n, "seed": seed, "fonts": FONTS, "sizes": SIZES, "version": RENDER_VERSION,
           "matplotlib": matplotlib.__version__, "freetype": ft2font.__freetype_version__}
    return ImageCache(resolve_cache_dir(None)).load_or_build(f"letters-{n}-seed{seed}", key, draw), labels


def checksum(images: np.ndarray, labels: np.ndarray, dtype: type = np.uint8) -> str:
    """sha256 of images' bytes as ``dtype`` (integer images 0-255: uint8) and their labels' (int64)."""
    return hashlib.sha256(np.ascontiguousarray(images, dtype=dtype).tobytes()
                          + np.ascontiguousarray(labels, dtype=np.int64).tobytes()).hexdigest()


DIGITS_BOX = 20  # MNIST's digits fill a 20 x 20 box in the middle of the 28 x 28 frame
DIGITS_SHA256 = "65e5b4619795efb40c1082f4c350c049e4ad552200d369b6ae99e21eef5e72c5"  # load_digits' 0-16 values, labels
# the enlarged images (float32 bytes) and labels: scipy's zoom is part of what makes them
DIGITS_FRAMES_SHA256 = "96ede88eea12e74cba3a1581b1d6ddfe3e061475181e2b1319b61c776942224b"


@functools.cache
def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (1797, 28, 28) float32 images in 0-255 and their labels 0-9."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    found = checksum(digits.images, digits.target)
    if found != DIGITS_SHA256:
        raise DataError(f"scikit-learn's digits have sha256 {found[:12]}..., not the recorded {DIGITS_SHA256[:12]}... "
                        "(bench.data.rendered): another copy of the data than the one this shift was made from")
    big = zoom(digits.images * (255.0 / 16.0), (1, DIGITS_BOX / 8, DIGITS_BOX / 8), order=1)  # bilinear
    frame = np.zeros((len(big), SIDE, SIDE))
    margin = (SIDE - DIGITS_BOX) // 2
    frame[:, margin:margin + DIGITS_BOX, margin:margin + DIGITS_BOX] = np.clip(big, 0.0, 255.0)
    frame, labels = frame.astype(np.float32), digits.target.astype(np.int64)
    found = checksum(frame, labels, np.float32)
    if found != DIGITS_FRAMES_SHA256:
        import scipy
        raise DataError(f"scikit-learn's digits enlarged by scipy {scipy.__version__} have sha256 {found[:12]}..., not "
                        f"the recorded {DIGITS_FRAMES_SHA256[:12]}... (bench.data.rendered): another scipy draws "
                        "other images than this shift was made with")
    return frame, labels


def read_letters(root: Path, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``letters`` OOD set's reader (bench.data.ood_sets): FileNotFoundError, as for absent files,
    when the installed matplotlib draws other images than the recorded checksum's."""
    images, labels = letters()
    found = checksum(images, labels)
    if LETTERS_SHA256 and found != LETTERS_SHA256:
        import matplotlib
        from matplotlib import ft2font
        raise FileNotFoundError(f"letters rendered by matplotlib {matplotlib.__version__} (FreeType "
                                f"{ft2font.__freetype_version__}) have sha256 {found[:12]}..., not the recorded "
                                f"{LETTERS_SHA256[:12]}... (bench.data.rendered)")
    return images, labels
