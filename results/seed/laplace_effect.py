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

from scored_twice import check_reproduced, scored, stored_runs, write

from methods.base import Method


def main() -> None:
    rows = []
    for run in stored_runs(__doc__, lambda r: r["method"] == "laplace"):
        record, data, method, model = run.source, run.data, run.method, run.model
        method.post_fit(model, data.val.x, data.val.y, train=(data.train.x, data.train.y))
        test, ood, labels = data.test.x, data.ood["fashion_mnist"].x, data.test.y.numpy()
        laplace = scored(method.predict_proba(model, test).numpy(), method.predict_proba(model, ood).numpy(), labels)
        plain = scored(Method.predict_proba(method, model, test).numpy(),  # the members' softmax, no posterior
                       Method.predict_proba(method, model, ood).numpy(), labels)
        check_reproduced("Laplace", laplace, record)
        for metric in laplace:
            rows.append({"variant": record["variant"], "seed": record["seed"],
                         "prior_precision": record["laplace_prior_precision"], "metric": metric,
                         "laplace": laplace[metric], "map": plain[metric],
                         "laplace_minus_map": laplace[metric] - plain[metric]})
    write(rows, "laplace_effect", "laplace_minus_map")


if __name__ == "__main__":
    main()
