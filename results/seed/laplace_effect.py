"""What the last-layer Laplace posterior changes, isolated: each Laplace-ensemble run of
results/seed scored from its own stored weights twice, with the Laplace predictive (its posterior
fitted again, as after training) and with the members' plain softmax (the MAP networks: the deep
ensemble those weights are). The Laplace rows' networks differ from the deep ensemble rows' in
training (another harness version), so comparing the two rows mixes the posterior with retraining;
this compares the same weights.

    python -m bench run --preset seed --methods laplace --out results/seed --data-dir DATA --save-weights
    python results/seed/laplace_effect.py --data-dir DATA     # writes results/seed/laplace_effect.csv
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
from methods.base import Method

HERE = Path(__file__).parent


def scored(p_id: np.ndarray, p_ood: np.ndarray, labels: np.ndarray) -> dict:
    mean = p_id.mean(axis=0)
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
        if record["method"] != "laplace":
            continue
        run = StoredRun(record, [record])
        load_run(store, run, resolve_data_dir(args.data_dir), False, "cpu")
        torch.set_num_threads(run.threads or torch.get_num_threads())  # the run's own: sums in its order
        data, method, model = run.data, run.method, run.model
        method.post_fit(model, data.val.x, data.val.y, train=(data.train.x, data.train.y))
        test, ood, labels = data.test.x, data.ood["fashion_mnist"].x, data.test.y.numpy()
        laplace = scored(method.predict_proba(model, test).numpy(), method.predict_proba(model, ood).numpy(), labels)
        plain = scored(Method.predict_proba(method, model, test).numpy(),  # the members' softmax, no posterior
                       Method.predict_proba(method, model, ood).numpy(), labels)
        if not np.isclose(laplace["id_nll_nats"], record["id_nll_nats"], rtol=1e-6, atol=0):
            raise SystemExit(f"{record['run_id']}: the Laplace NLL {laplace['id_nll_nats']!r} does not reproduce "
                             f"the record's {record['id_nll_nats']!r}")
        for metric in laplace:
            rows.append({"variant": record["variant"], "seed": record["seed"],
                         "prior_precision": record["laplace_prior_precision"], "metric": metric,
                         "laplace": laplace[metric], "map": plain[metric],
                         "laplace_minus_map": laplace[metric] - plain[metric]})
    table = pd.DataFrame(rows)
    write_csv(table, HERE / "laplace_effect.csv")
    print(table.groupby(["variant", "metric"])["laplace_minus_map"].agg(["mean", "min", "max"]).to_string())


if __name__ == "__main__":
    main()
