"""What temperature scaling changes, isolated: each "+ TS" run of results/seed scored from its own
stored weights twice, with its fitted temperature and with T = 1 (no scaling). The "+ TS" rows
were trained by another command (and harness version) than the plain rows, so comparing the two
rows mixes TS with retraining; this compares the same weights.

    python -m bench run --methods deep_ensemble single_network -o temperature=fit --out results/seed \\
        --data-dir DATA --save-weights                 # the weights (not committed)
    python results/seed/ts_effect.py --data-dir DATA   # writes results/seed/ts_effect.csv
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.data.files import resolve_data_dir
from bench.evaluation.calibration import ece
from bench.evaluation.measures import accuracy, nll
from bench.evaluation.metrics import ood_metrics, ood_scores
from bench.execution.rescoring import StoredRun, load_run
from bench.store import RunStore, write_csv
from methods.base import FITTED_TEMPERATURE

HERE = Path(__file__).parent


def scored(run: StoredRun, temperature: float | None) -> dict:
    if temperature is None:
        delattr(run.model, FITTED_TEMPERATURE)
    else:
        setattr(run.model, FITTED_TEMPERATURE, temperature)
    p_id = run.method.predict_proba(run.model, run.data.test.x).numpy()
    p_ood = run.method.predict_proba(run.model, run.data.ood["fashion_mnist"].x).numpy()
    labels, mean = run.data.test.y.numpy(), p_id.mean(axis=0)
    return {"id_acc": accuracy(mean, labels), "id_nll_nats": nll(mean, labels), "id_ece": ece(mean, labels),
            "auroc_pred_entropy_vs_fashion_mnist":
                ood_metrics(ood_scores(p_id)["pred_entropy"], ood_scores(p_ood)["pred_entropy"])["auroc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="dataset folder (default: $DARE_BENCH_DATA, else ./data)")
    args = parser.parse_args()
    store = RunStore(HERE)
    records, _ = store.scan()
    rows = []
    for record in sorted(records, key=lambda r: (r["variant"], r["seed"])):
        if record["config"]["method_options"].get("temperature") != "fit":
            continue
        run = StoredRun(record, [record])
        load_run(store, run, resolve_data_dir(args.data_dir), False, "cpu")
        torch.set_num_threads(run.threads or torch.get_num_threads())  # the run's own: sums in its order
        with_ts, without = scored(run, record[FITTED_TEMPERATURE]), scored(run, None)
        if not np.isclose(with_ts["id_nll_nats"], record["id_nll_nats"], rtol=1e-6, atol=0):
            raise SystemExit(f"{record['run_id']}: the scaled NLL {with_ts['id_nll_nats']!r} does not reproduce "
                             f"the record's {record['id_nll_nats']!r}")
        for metric in with_ts:
            rows.append({"variant": record["variant"], "seed": record["seed"], "temperature": record[FITTED_TEMPERATURE],
                         "metric": metric, "with_ts": with_ts[metric], "without_ts": without[metric],
                         "ts_minus_none": with_ts[metric] - without[metric]})
    table = pd.DataFrame(rows)
    write_csv(table, HERE / "ts_effect.csv")
    print(table.groupby(["variant", "metric"])["ts_minus_none"].agg(["mean", "min", "max"]).to_string())


if __name__ == "__main__":
    main()
