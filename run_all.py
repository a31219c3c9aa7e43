#!/usr/bin/env python
"""The default benchmark: deep ensemble, DARE and MC dropout on the seed protocol (MNIST vs
FashionMNIST test), seeds 0-4, everything written to results/seed/.

Any `python -m bench run` option can be appended, e.g. `python run_all.py --data-dir ../shared/data`,
or another preset: `python run_all.py --preset paper-fmnist` reproduces the DARE paper's
Fashion-MNIST table into results/paper-fmnist/ (paper_table.md beside the published numbers).
"""
import sys

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "--preset", "seed", *sys.argv[1:]]))
