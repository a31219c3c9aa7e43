"""Training time and work of a results folder, pack by pack, from its records alone:
python results/paper-fmnist-cpu-0.6/packs_from_records.py FOLDER PEAK_GFLOPS > FOLDER/packs.csv

A record's train_seconds is its share of its pack's training, so a pack's time is the sum over its runs.
A selection's record copies its chosen candidate's figures and trained nothing: it is left out. The
last row totals the folder; fraction_of_peak holds the work over the training time against PEAK_GFLOPS.
networks is the pack's size as it started (a diverged run's networks stay in it; its time is its runs')."""
import json
import sys
from pathlib import Path

import pandas as pd

folder, peak = Path(sys.argv[1]), float(sys.argv[2])
records = [json.loads(p.read_text()) for p in sorted((folder / "records").glob("*.json"))]
trained = pd.DataFrame([r for r in records if r.get("status") == "ok" and not r.get("selected_run_id")])
unpacked = int(trained["pack_id"].isna().sum()) if "pack_id" in trained else len(trained)
if unpacked:  # records before packs (dare-bench < 0.3)
    sys.exit(f"{folder}: {unpacked} trained records have no pack_id; this script reads folders trained in packs")
trained["network_epochs"] = trained["epochs_run"].map(lambda e: sum(int(x) for x in str(e).split()))
packs = trained.groupby("pack_id", sort=False).agg(
    methods=("method", lambda m: " ".join(sorted(set(m)))), runs=("run_id", "size"),
    networks=("pack_networks", "first"), train_seconds=("train_seconds", "sum"), train_tflop=("train_tflop", "sum"),
    network_epochs=("network_epochs", "sum"), finished_at=("finished_at", "max"),
    harness_commit=("harness_commit", "first")).sort_values("finished_at").reset_index()
total = {"pack_id": "all", "methods": "all", "runs": packs["runs"].sum(), "networks": packs["networks"].sum(),
         "train_seconds": packs["train_seconds"].sum(), "train_tflop": packs["train_tflop"].sum(),
         "network_epochs": packs["network_epochs"].sum(), "finished_at": packs["finished_at"].max(),
         "harness_commit": " ".join(dict.fromkeys(packs["harness_commit"]))}
packs = pd.concat([packs, pd.DataFrame([total])], ignore_index=True)
packs["gflops"] = packs["train_tflop"] * 1e3 / packs["train_seconds"]
packs["network_epochs_per_s"] = packs["network_epochs"] / packs["train_seconds"]
packs["fraction_of_peak"] = packs["gflops"] / peak
packs.round({"train_seconds": 1, "train_tflop": 3, "gflops": 1, "network_epochs_per_s": 2, "fraction_of_peak": 3}) \
    .to_csv(sys.stdout, index=False)
