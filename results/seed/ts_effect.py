"""What temperature scaling changes, isolated: each "+ TS" run of results/seed scored from its own
stored weights twice, with its fitted temperature and with T = 1 (no scaling). The "+ TS" rows
were trained by another command (and harness version) than the plain rows, so comparing the two
rows mixes TS with retraining; this compares the same weights.

    python -m bench run --methods deep_ensemble single_network -o temperature=fit --out results/seed \\
        --data-dir DATA --save-weights                 # the weights (not committed)
    python results/seed/ts_effect.py --data-dir DATA   # writes results/seed/ts_effect.csv
"""
from __future__ import annotations

from scored_twice import check_reproduced, scored, stored_runs, write

from methods.base import FITTED_TEMPERATURE


def main() -> None:
    rows = []
    for run in stored_runs(__doc__, lambda r: r["config"]["method_options"].get("temperature") == "fit"):
        record, test, ood = run.source, run.data.test, run.data.ood["fashion_mnist"]
        both = {}
        for name, temperature in (("with_ts", record[FITTED_TEMPERATURE]), ("without_ts", None)):
            if temperature is None:
                delattr(run.model, FITTED_TEMPERATURE)
            else:
                setattr(run.model, FITTED_TEMPERATURE, temperature)
            both[name] = scored(run.method.predict_proba(run.model, test.x).numpy(),
                                run.method.predict_proba(run.model, ood.x).numpy(), test.y.numpy())
        check_reproduced("scaled", both["with_ts"], record)
        for metric, value in both["with_ts"].items():
            rows.append({"variant": record["variant"], "seed": record["seed"], "temperature": record[FITTED_TEMPERATURE],
                         "metric": metric, "with_ts": value, "without_ts": both["without_ts"][metric],
                         "ts_minus_none": value - both["without_ts"][metric]})
    write(rows, "ts_effect", "ts_minus_none")


if __name__ == "__main__":
    main()
