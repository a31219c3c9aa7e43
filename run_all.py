#!/usr/bin/env python
"""The default benchmark: every registered method (deep ensemble, DARE, MC dropout, a single
network, the DARE paper's baselines, BatchEnsemble, Packed-Ensembles, MIMO, MultiSWAG, the Laplace
ensemble, snapshot ensembles) on the seed protocol (MNIST
vs FashionMNIST test), seeds 0-4, everything written to results/seed/. Runs already recorded there
are reused (a fresh clone re-renders the committed results in seconds); --force retrains.

Any `python -m bench run` option can be appended, e.g. `python run_all.py --data-dir /data/copy`,
or another preset: `python run_all.py --preset paper-fmnist` reproduces the DARE paper's
Fashion-MNIST table into results/paper-fmnist/ (paper_table.md beside the published numbers).
"""
import sys

from bench.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["run", "--preset", "seed", *sys.argv[1:]]))
