"""uncertainty-baselines' Deterministic row from the ensembles' members, scored one by one.

A 10-member deep ensemble's member m of seed s draws its init and data order from the streams
(s, m), as a single network of seed s does for m = 0, and computes the same in any pack up to fused
Adam's rounding of a tensor's last elements (docs/architectures.md: member 0 of two packs of two or
more networks agree bitwise; the last member of a pack, or a run alone, can differ). This script checks
that on the stored weights where both are here (member 0 of each seed's ensemble against the single
network of that seed, every parameter, bitwise: equal unless the single network was the last of its
pack; it prints how many checks it could make), then scores each
member alone on the ID test split: accuracy, NLL and ECE with 10 bins of its own softmax. The
members are 10 single networks per seed: with 3 seeds, 30 draws of the Deterministic row instead of
3, beside the published value with the verdict rule of bench.reporting.verdicts.

Needs the folder's weights (`run --save-weights`; git-ignored, so on the machine that trained them).
A seed whose ensemble weights are not on this machine keeps the rows an earlier run of this script
wrote for it in members_alone.csv (printed as such).

    python results/ub-lenet-mnist/members_alone.py [FOLDER]    # -> FOLDER/members_alone.csv
"""
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from bench.config import make_protocol
from bench.data.files import resolve_data_dir
from bench.data.loaders import load_benchmark_data
from bench.evaluation.catalog import mean_accuracy, mean_ece_ub, mean_nll
from bench.reporting.published import load_published
from bench.reporting.verdicts import format_verdict, verdict

FOLDER = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
METRICS = {"nll_nats": (mean_nll, 1), "accuracy_pct": (mean_accuracy, 100), "ece_10_bins_ub": (mean_ece_ub, 1)}


def records(method: str) -> dict[int, dict]:
    found = [json.loads(p.read_text()) for p in sorted((FOLDER / "records").glob("*.json"))]
    return {r["seed"]: r for r in found if r["method"] == method and r["status"] == "ok"
            and (FOLDER / "weights" / f"{r['run_id']}.pt").is_file()}


def weights(record: dict) -> dict[str, torch.Tensor]:
    return torch.load(FOLDER / "weights" / f"{record['run_id']}.pt", map_location="cpu", weights_only=True)


@torch.no_grad()
def member_rows(record: dict) -> list[dict]:
    protocol = make_protocol(record["config"]["protocol"])
    data = load_benchmark_data(protocol, resolve_data_dir(None), download=False, seed=record["seed"])
    members = record["members"]
    model = protocol.arch_spec.build(record["seed"], list(range(members)))
    model.load_state_dict(weights(record))
    rows = []
    for m in range(members):
        probs = model.as_module(m)(data.test.x).softmax(-1).double().numpy()[None]
        labels = data.test.y.numpy()
        rows.append({"seed": record["seed"], "member": m, "run_id": record["run_id"],
                     **{name: scale * f(probs, labels) for name, (f, scale) in METRICS.items()}})
    return rows


def kept_rows(scored_seeds: set[int]) -> list[dict]:
    path = FOLDER / "members_alone.csv"
    if not path.is_file():
        return []
    earlier = pd.read_csv(path)
    earlier = earlier[~earlier["seed"].isin(scored_seeds)]
    for seed in sorted(set(earlier["seed"])):
        print(f"seed {seed}: its ensemble's weights are not here: its rows are kept from members_alone.csv")
    return earlier.to_dict("records")


def main() -> None:
    ensembles, singles = records("deep_ensemble"), records("single_network")
    checks = 0
    for seed in sorted(set(ensembles) & set(singles)):
        de, alone = weights(ensembles[seed]), weights(singles[seed])
        checks += 1
        print(f"seed {seed}: member 0 of the ensemble equals the single network, bitwise: "
              f"{all(torch.equal(de[k][0], alone[k][0]) for k in alone)}")
    print(f"{checks} bitwise checks (member 0 of a seed's ensemble against its single network"
          + (")" if checks else "): no seed has both networks' weights here"))
    scored = [row for seed in sorted(ensembles) for row in member_rows(ensembles[seed])]
    table = pd.DataFrame(kept_rows(set(ensembles)) + scored).sort_values(["seed", "member"])
    table.to_csv(FOLDER / "members_alone.csv", index=False, float_format="%.10g")
    published = load_published("ub_lenet5")
    dataset = ensembles[min(ensembles)]["id_dataset"]
    cells = published.cells[(published.cells["in_distribution"] == dataset) & (published.cells["method"] == "Deterministic")]
    for _, cell in cells.iterrows():
        values = table[cell["metric"]]
        result = verdict(values.mean(), values.std(ddof=1), len(values), cell["mean"], resolution=cell["resolution"])
        print(f"{cell['metric']}: {values.mean():.4f} ± {values.std(ddof=1):.4f} ({len(values)} members) "
              f"vs published {cell['mean']}: {format_verdict(result, 3)}")


if __name__ == "__main__":
    main()
