"""The peer check of issue 28's methods: each compared with an independent implementation on the
same data, seeds and trained weights. Written so far: temperature scaling against
torch-uncertainty 0.13's TemperatureScaler (the `peers` extra), from the same validation logits.

    pip install -e ".[peers]"
    python results/peer_check/peer_check.py --data-dir DATA      # writes results/peer_check/peer_check.csv

Per seed 0-4 of the seed protocol (MNIST, 784-256-256-10, 5 epochs): a single network and a
3-member deep ensemble are trained by the harness's loop; their dropout-free validation logits are
fitted by bench's ``fit_temperature`` and by TemperatureScaler (LBFGS, lr 0.1, 100 iterations, its
defaults), and the NLL of the scaled predictive is computed from each temperature.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, TensorDataset

from bench.config import load_preset, make_protocol, make_run_config
from bench.data.files import resolve_data_dir
from bench.data.loaders import load_benchmark_data
from bench.evaluation.calibration import fit_temperature
from bench.store import write_csv
from bench.training.loop import train

HERE = Path(__file__).parent
TOLERANCE = {"temperature": 1e-3, "nll": 1e-4}


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """NLL of the mean over samples of softmax(logits / T); logits (S, N, K)."""
    z = logits.astype(np.float64) / temperature
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    mean = (p / p.sum(axis=-1, keepdims=True)).mean(axis=0)
    return float(-np.log(mean[np.arange(len(labels)), labels]).mean())


def peer_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """torch-uncertainty's TemperatureScaler fitted on (logits (N, K), labels)."""
    from torch_uncertainty.post_processing import TemperatureScaler
    scaler = TemperatureScaler(model=torch.nn.Identity())
    data = DataLoader(TensorDataset(torch.tensor(logits, dtype=torch.float32), torch.tensor(labels)), batch_size=4096)
    scaler.fit(data, progress=False)
    return float(1 / scaler.inv_temp.item())


def rows_for(method: str, options: dict, seed: int, protocol, data) -> list[dict]:
    config = make_run_config(method, options, protocol, seed, "seed")
    model = train(config.make_method(), protocol, data.train, data.n_classes, seed, progress=False, val=data.val).model
    logits = config.make_method().logits(model, data.val.x).numpy()
    labels = data.val.y.numpy()
    ours = fit_temperature(logits, labels)
    if logits.shape[0] == 1:  # one network: the same definition
        peer, note = peer_temperature(logits[0], labels), ""
    else:  # the peer calibrates member logits pooled as samples; bench calibrates the ensemble's predictive
        peer = peer_temperature(logits.reshape(-1, logits.shape[-1]), np.tile(labels, logits.shape[0]))
        note = ("differs by design: the peer fits T on the members' logits pooled as samples (each member's "
                "NLL); bench fits T on the NLL of the members' averaged softmax, the predictive every metric reads")
    values = {"temperature": (ours, peer), "nll": (nll(logits, labels, ours), nll(logits, labels, peer))}
    return [{"method": "temperature_scaling", "base": config.variant, "seed": seed, "metric": metric,
             "bench": b, "peer": p, "difference": b - p, "tolerance": TOLERANCE[metric],
             "pass": bool(abs(b - p) <= TOLERANCE[metric]) if not note else "", "note": note,
             "peer_implementation": "torch-uncertainty 0.13 TemperatureScaler"}
            for metric, (b, p) in values.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="dataset folder (default: $DARE_BENCH_DATA, else ./data)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    protocol = make_protocol(load_preset("seed")[1]["protocol"])
    rows = []
    for seed in args.seeds:
        data = load_benchmark_data(protocol, resolve_data_dir(args.data_dir), False, seed)
        torch.manual_seed(seed)
        rows += rows_for("single_network", {}, seed, protocol, data)
        rows += rows_for("deep_ensemble", {"members": 3}, seed, protocol, data)
        print(pd.DataFrame(rows[-4:])[["base", "seed", "metric", "bench", "peer", "difference", "pass"]].to_string())
    write_csv(pd.DataFrame(rows), HERE / "peer_check.csv")
    print(f"wrote {HERE / 'peer_check.csv'}")


if __name__ == "__main__":
    main()
