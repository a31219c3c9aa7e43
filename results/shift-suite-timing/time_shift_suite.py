"""Time the shift suite's generation on the MNIST and Fashion-MNIST test splits (10,000 images each),
level by level, the way `bench evaluate` generates it (bench.data.shifts.shifted):

  drawn_s   no cache (`--cache-dir none`): what every evaluate paid before the cache
  cold_s    drawn and written into an empty cache: a first evaluate
  warm_s    read back from that cache: every later evaluate (same_as_drawn: the very same array)

  before_s  the same level drawn by bench/data/shifts.py as it was at the commit --before (the
            code before the cache and the faster fog, motion blur and zigzag), in the same process,
            so the ratio is fair; same_as_before: byte for byte the same images

Writes OUT/shift_times.csv (one row per dataset, shift and level) and prints the totals.

    python results/shift-suite-timing/time_shift_suite.py --data-dir DATA --out results/shift-suite-timing
"""
import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.data import shifts
from bench.data.files import load_images
from bench.data.image_cache import ImageCache

ROOT = Path(__file__).resolve().parents[2]


def shifts_at(revision: str):
    """bench/data/shifts.py as it was at ``revision``, imported as a module of its own."""
    source = subprocess.run(["git", "show", f"{revision}:bench/data/shifts.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "shifts_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("shifts_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["shifts_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def timed(call):
    start = time.perf_counter()
    value = call()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out", default=str(Path(__file__).parent))
    parser.add_argument("--datasets", default="mnist,fashion_mnist")
    parser.add_argument("--before", default="13d7481", help="the commit whose shifts.py is the baseline")
    args = parser.parse_args()
    before = shifts_at(args.before)
    rows = []
    for dataset in args.datasets.split(","):
        images = load_images(Path(args.data_dir), dataset, False, False)[0].numpy()
        with tempfile.TemporaryDirectory() as folder:
            cache = ImageCache(Path(folder))
            for name, spec in shifts.SHIFTS.items():
                if spec.dataset is not None:
                    continue
                for level in spec.levels:
                    drawn, drawn_s = timed(lambda: shifts.shifted(images, name, level, 0))
                    _, cold_s = timed(lambda: shifts.shifted(images, name, level, 0, cache))
                    warm, warm_s = timed(lambda: shifts.shifted(images, name, level, 0, cache))
                    entry = next(Path(folder).glob(f"shift-{name}-{level:g}-seed0-*.npz"))
                    row = dict(dataset=dataset, shift=name, level=level, drawn_s=drawn_s, cold_s=cold_s,
                               warm_s=warm_s, entry_bytes=entry.stat().st_size,
                               same_as_drawn=bool(np.array_equal(drawn, warm)))
                    old, row["before_s"] = timed(lambda: before.shifted(images, name, level, 0))
                    row["same_as_before"] = old.tobytes() == drawn.tobytes()
                    rows.append(row)
                    print(f"{dataset} {name} {level:g}: before {row['before_s']:.2f} s, drawn {drawn_s:.2f} s, "
                          f"cold {cold_s:.2f} s, warm {warm_s:.3f} s", flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(Path(args.out) / "shift_times.csv", index=False, float_format="%.4g")
    totals = table.groupby("dataset")[["before_s", "drawn_s", "cold_s", "warm_s", "entry_bytes"]].sum()
    totals["cold_over_before"] = totals["cold_s"] / totals["before_s"]
    print(totals.to_string())
    print("every level the same images as before:", bool(table["same_as_before"].all()),
          "and read back exactly:", bool(table["same_as_drawn"].all()))


if __name__ == "__main__":
    main()
