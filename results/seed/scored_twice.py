"""What one part of a method changes, isolated: stored runs of results/seed scored from their own
weights twice, with the part and without it (ts_effect.py: temperature scaling; laplace_effect.py:
the Laplace posterior). Comparing two rows of the table mixes the part with retraining (the rows
were trained by other commands and harness versions); this compares the same weights."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pandas as pd
import torch

from bench.data.files import resolve_data_dir
from bench.evaluation.calibration import ece
from bench.evaluation.measures import accuracy, nll
from bench.evaluation.metrics import ood_metrics, ood_scores
from bench.execution.rescoring import StoredRun, load_run
from bench.store import RunStore, write_csv

HERE = Path(__file__).parent


def scored(p_id: np.ndarray, p_ood: np.ndarray, labels: np.ndarray) -> dict:
    """Accuracy, NLL and ECE of the mean prediction on the test split, AUROC vs FashionMNIST."""
    mean = p_id.mean(axis=0)
    return {"id_acc": accuracy(mean, labels), "id_nll_nats": nll(mean, labels), "id_ece": ece(mean, labels),
            "auroc_pred_entropy_vs_fashion_mnist":
                ood_metrics(ood_scores(p_id)["pred_entropy"], ood_scores(p_ood)["pred_entropy"])["auroc"]}


def stored_runs(description: str, chosen: Callable[[dict], bool]) -> Iterator[StoredRun]:
    """The chosen records of results/seed with their weights and data loaded (--data-dir from the
    command line), in (variant, seed) order, each scored with its own thread count."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="dataset folder (default: $DARE_BENCH_DATA, else ./data)")
    args = parser.parse_args()
    store = RunStore(HERE)
    records, _ = store.scan()
    for record in sorted(records, key=lambda r: (r["variant"], r["seed"])):
        if chosen(record):
            run = StoredRun(record, [record])
            load_run(store, run, resolve_data_dir(args.data_dir), False, "cpu")
            torch.set_num_threads(run.threads or torch.get_num_threads())  # the run's own: sums in its order
            yield run


def check_reproduced(what: str, scores: dict, record: dict) -> None:
    """Stop unless ``scores`` (the part on) give the record's NLL: the weights are the record's."""
    if not np.isclose(scores["id_nll_nats"], record["id_nll_nats"], rtol=1e-6, atol=0):
        raise SystemExit(f"{record['run_id']}: the {what} NLL {scores['id_nll_nats']!r} does not reproduce "
                         f"the record's {record['id_nll_nats']!r}")


def write(rows: list[dict], name: str, difference: str) -> None:
    """results/seed/<name>.csv, and the difference's mean, min and max per variant and metric."""
    table = pd.DataFrame(rows)
    write_csv(table, HERE / f"{name}.csv")
    print(table.groupby(["variant", "metric"])[difference].agg(["mean", "min", "max"]).to_string())
