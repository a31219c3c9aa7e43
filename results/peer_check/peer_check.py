"""The peer check of issue 28's methods: each compared with an independent implementation on the
same data and seeds (the seed protocol: MNIST, 784-256-256-10, Adam 1e-3, batch 256, 5 epochs,
seeds 0-4), from the same trained weights where the method is post hoc.

    pip install -e ".[peers]"
    python results/peer_check/peer_check.py --data-dir DATA      # writes results/peer_check/peer_check.csv

* temperature scaling: a single network and a 3-member deep ensemble trained by the harness's
  loop; their validation logits fitted by bench's ``fit_temperature`` and by torch-uncertainty
  0.13's TemperatureScaler (LBFGS, lr 0.1, 100 iterations, its defaults); the NLL of each.
* Laplace: a 3-member deep ensemble trained by the harness's loop; bench's ``laplace`` post-hoc fit,
  and torch-uncertainty 0.13's LaplaceApprox (laplace-torch underneath, Kronecker last layer, GLM,
  probit) fitted on the same training split with bench's prior precision: the test probabilities.
  ``laplace_prior`` (seed 0): bench's prior precision against laplace-torch's own grid search on the
  validation split, scored per grid point and with its default metric.
* MIMO, SWAG, MultiSWAG, snapshot ensembles: bench's numbers are the committed runs of
  ``results/seed``; the peer trains its own networks here with torch-uncertainty 0.13's parts
  (MIMOBatchFormat, SWAG, CheckpointCollector, with torch's CosineAnnealingWarmRestarts) in a plain
  PyTorch loop (nn.Linear's init, a shuffled DataLoader), on the same splits and seeds: test
  accuracy and AUROC against Fashion-MNIST by predictive entropy, means over the 5 seeds.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
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
    model = train(config.built_method, protocol, data.train, data.n_classes, seed, progress=False, val=data.val).model
    logits = config.built_method.logits(model, data.val.x).numpy()
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


TU = "torch-uncertainty 0.13"


def laplace_rows(seed: int, protocol, data, prior: bool = False) -> list[dict]:
    """bench's Laplace ensemble against torch-uncertainty's LaplaceApprox on the same trained members:
    the test probabilities with bench's prior precision; ``prior``: instead, the prior precision
    against laplace-torch's own grid search on the validation split."""
    from torch_uncertainty.post_processing import LaplaceApprox

    from methods.laplace import loader
    config = make_run_config("laplace", {"members": 3}, protocol, seed, "seed")
    method = config.built_method
    model = train(method, protocol, data.train, data.n_classes, seed, progress=False, val=data.val).model
    values = method.post_fit(model, data.val.x, data.val.y, train=(data.train.x, data.train.y))
    ours = method.predict_proba(model, data.test.x)
    rows = []
    for m, precision in enumerate(float(p) for p in values["laplace_prior_precision"].split()):
        peer = LaplaceApprox("classification", model.as_module(m), optimize_prior_precision=False)
        peer.fit(loader(data.train.x, data.train.y))
        if prior:
            rows += _prior_rows(config.variant, seed, m, precision, peer.la, loader(data.val.x, data.val.y))
            continue
        peer.la.prior_precision = precision
        with torch.no_grad():
            theirs = torch.cat([peer(chunk) for chunk in data.test.x.split(1000)])
        labels = torch.arange(len(data.test.y)), data.test.y
        rows.append(_row("laplace", config.variant, seed,
                         f"member {m}: test NLL; difference: max |p_bench - p_peer| over the test probabilities",
                         float(-ours[m][labels].log().mean()), float(-theirs[labels].log().mean()), 1e-4,
                         f"{TU} LaplaceApprox (laplace-torch), bench's prior precision",
                         difference=float((ours[m] - theirs).abs().max())))
    return rows


def _prior_rows(base: str, seed: int, member: int, precision: float, posterior, val_loader) -> list[dict]:
    """bench's prior precision against laplace-torch's grid search (the same grid, probit GLM predictive):
    with the validation NLL of each grid point, and with laplace-torch's default metric."""
    rows = []
    for name, loss in (("the validation NLL of each grid point", lambda p, y: F.nll_loss(p.log(), y)),
                       ("its default RunningNLLMetric", None)):
        posterior.optimize_prior_precision(pred_type="glm", method="gridsearch", link_approx="probit",
                                           val_loader=val_loader, loss=loss)
        note = "" if loss is not None else (
            "differs: laplace-torch 0.3's _gridsearch never resets its RunningNLLMetric between grid points, so "
            "it picks the minimum of the running mean over the points so far, not of each point's NLL")
        rows.append(_row("laplace_prior", base, seed, f"member {member}: prior precision, laplace-torch grid search "
                         f"scored by {name}", precision, float(posterior.prior_precision), 1e-6 * precision,
                         "laplace-torch 0.3 optimize_prior_precision(method=gridsearch), the same grid", note=note))
    return rows


def _row(method, base, seed, metric, bench, peer, tolerance, implementation, difference=None, note="") -> dict:
    """One check: |difference| <= tolerance, the difference being bench - peer unless given; no check
    where a note says why the two differ."""
    difference = bench - peer if difference is None else difference
    return {"method": method, "base": base, "seed": seed, "metric": metric, "bench": bench, "peer": peer,
            "difference": difference, "tolerance": tolerance, "pass": "" if note else bool(abs(difference) <= tolerance),
            "note": note, "peer_implementation": implementation}


# ---- the peer's own training: a plain loop with torch-uncertainty's parts


def mlp(inputs: int, outputs: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(inputs, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, outputs))


class MIMOMLP(torch.nn.Module):
    """torch-uncertainty's MIMO layout for an MLP: (m b) d -> b (m d) in, b (m k) -> (m b) k out."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads, self.net = heads, mlp(784 * heads, 10 * heads)

    def forward(self, x):
        if not self.training:  # test: the same image for every head
            x = x.repeat(self.heads, 1)
        b = x.shape[0] // self.heads
        out = self.net(x.view(self.heads, b, -1).transpose(0, 1).reshape(b, -1))
        return out.view(b, self.heads, -1).transpose(0, 1).reshape(self.heads * b, -1)


def peer_train(kind: str, seed: int, data, epochs: int = 5) -> np.ndarray:
    """Train the peer's ``kind`` (mimo, swag, multiswag, snapshot) on the seed protocol; returns its
    test and OOD probabilities, (samples, N, K) each."""
    from torch_uncertainty.methods import SWAG, CheckpointCollector
    from torch_uncertainty.transforms import MIMOBatchFormat

    torch.manual_seed(seed)
    members = 3 if kind == "multiswag" else 1
    steps_per_epoch = -(-len(data.train) // 256)
    total = epochs * steps_per_epoch
    outputs = []
    for _ in range(members):
        model = MIMOMLP(3) if kind == "mimo" else mlp(784, 10)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        wrapper, scheduler, batch_format = None, None, None
        if kind in ("swag", "multiswag"):  # 20 moments evenly over the second half, as bench's defaults
            wrapper = SWAG(model, cycle_start=0, cycle_length=1, scale=0.5, max_num_models=20, num_estimators=20)
            start, span = total // 2, total - total // 2
            collect = {start + (i + 1) * span // 20 - 1 for i in range(20)}
        elif kind == "snapshot":
            length = -(-total // 3)
            wrapper = CheckpointCollector(model, save_schedule=[length, 2 * length], use_final_model=True)
            scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=length)
        elif kind == "mimo":
            batch_format = MIMOBatchFormat(3, rho=0.0, batch_repeat=1)
        loader = DataLoader(TensorDataset(data.train.x, data.train.y), batch_size=256, shuffle=True,
                            generator=torch.Generator().manual_seed(seed * 100 + len(outputs)))  # each member its own order
        step, collected = 0, 0
        for _ in range(epochs):
            correct = rows = 0
            model.train()
            for x, y in loader:
                if batch_format is not None:
                    x, y = batch_format((x, y))
                loss = F.cross_entropy(logits := model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                step += 1
                if kind in ("swag", "multiswag") and step - 1 in collect:
                    collected += 1
                    wrapper.update_wrapper(collected)
                elif kind == "snapshot" and step in (length, 2 * length):
                    wrapper.update_wrapper(step)
                correct += int((logits.argmax(-1) == y).sum())
                rows += len(y)
            if kind == "mimo" and correct / rows >= 0.97:  # the protocol's early stop (MIMO: as one model)
                break
        outputs.append(_peer_predict(kind, model, wrapper, data))
    return np.concatenate(outputs, axis=1)


@torch.no_grad()
def _peer_predict(kind: str, model, wrapper, data) -> np.ndarray:
    """(2, samples, N, K): the test split's and the OOD split's probabilities."""
    out = []
    for x in (data.test.x, data.ood["fashion_mnist"].x):
        if kind == "mimo":
            model.eval()
            logits = model(x).view(3, len(x), -1)
        elif kind == "snapshot":
            wrapper.eval()
            logits = wrapper(x).view(-1, len(x), 10)
        else:
            wrapper.eval()
            logits = wrapper.eval_forward(x).view(-1, len(x), 10)
        out.append(logits.softmax(-1).numpy())
    return np.stack(out)


def trained_rows(kinds: list[str], seeds: list[int], protocol, data_dir) -> list[dict]:
    """Accuracy and AUROC of the committed results/seed runs against the peer's, over the seeds."""
    from sklearn.metrics import roc_auc_score

    from bench.store import RunStore
    labels = {"mimo": "MIMO", "swag": "SWAG", "multiswag": "MultiSWAG", "snapshot": "Snapshot ensemble"}
    records = [r for r in RunStore(HERE.parent / "seed").scan()[0] if r.get("status") == "ok"]
    ours_by_kind = {kind: sorted((r for r in records if r["label"] == labels[kind] and r["seed"] in seeds),
                                 key=lambda r: r["seed"]) for kind in kinds}
    for kind, ours in ours_by_kind.items():  # before any training: the committed runs must be there
        if len(ours) != len(seeds):
            raise SystemExit(f"results/seed has {len(ours)} {labels[kind]} runs of seeds {seeds}; run them first")
    peer: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for seed in seeds:
        data = load_benchmark_data(protocol, data_dir, False, seed)
        for kind in kinds:
            probs = peer_train(kind, seed, data)
            mean = probs.mean(axis=1)  # (2, N, K)
            entropy = [-(p * np.log(np.clip(p, 1e-12, None))).sum(-1) for p in mean]
            accuracy = float((mean[0].argmax(-1) == data.test.y.numpy()).mean())
            auroc = roc_auc_score(np.r_[np.zeros(len(entropy[0])), np.ones(len(entropy[1]))], np.r_[entropy[0], entropy[1]])
            peer[kind].append((accuracy, float(auroc)))
            print(f"peer {kind} seed {seed}: acc {accuracy:.4f} AUROC {auroc:.4f}", flush=True)
    rows = []
    for kind in kinds:
        ours = ours_by_kind[kind]
        bench_acc = np.array([r["id_acc"] for r in ours]) * 100
        bench_auroc = np.array([r["auroc_pred_entropy_vs_fashion_mnist"] for r in ours])
        peer_acc = np.array([a for a, _ in peer[kind]]) * 100
        peer_auroc = np.array([a for _, a in peer[kind]])
        sd = float(np.sqrt((bench_auroc.var(ddof=1) + peer_auroc.var(ddof=1)) / 2))
        implementation = {"mimo": f"{TU} MIMOBatchFormat, an MLP in its MIMO layout",
                          "swag": f"{TU} SWAG (scale 0.5, 20 models, 20 estimators)",
                          "multiswag": f"{TU} SWAG x 3 members",
                          "snapshot": f"{TU} CheckpointCollector + torch CosineAnnealingWarmRestarts"}[kind]
        base = ours[0]["variant"]
        seeds_text = f"seeds {seeds[0]}-{seeds[-1]}"
        rows.append(_row(kind, base, seeds_text, "test accuracy (%), mean over seeds", float(bench_acc.mean()),
                         float(peer_acc.mean()), 0.5, implementation))
        rows.append(_row(kind, base, seeds_text, "AUROC vs Fashion-MNIST (pred. entropy), mean over seeds",
                         float(bench_auroc.mean()), float(peer_auroc.mean()), 2 * sd, implementation
                         + "; tolerance: 2 x the pooled sd over seeds"))
    return rows


PARTS = ("temperature", "laplace", "laplace_prior", "trained")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="dataset folder (default: $DARE_BENCH_DATA, else ./data)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="which checks to run; the rows of the others are kept from the existing CSV")
    parser.add_argument("--kinds", nargs="+", default=["mimo", "swag", "multiswag", "snapshot"],
                        help="the trained peers of --parts trained")
    args = parser.parse_args()
    protocol = make_protocol(load_preset("seed")[1]["protocol"])
    data_dir = resolve_data_dir(args.data_dir)
    rows: list[dict] = []
    for seed in args.seeds if {"temperature", "laplace", "laplace_prior"} & set(args.parts) else []:
        data = load_benchmark_data(protocol, data_dir, False, seed)
        torch.manual_seed(seed)
        if "temperature" in args.parts:
            rows += rows_for("single_network", {}, seed, protocol, data)
            rows += rows_for("deep_ensemble", {"members": 3}, seed, protocol, data)
        if "laplace" in args.parts:
            rows += laplace_rows(seed, protocol, data)
        if "laplace_prior" in args.parts and seed == args.seeds[0]:  # laplace-torch's grid search is slow: one seed
            rows += laplace_rows(seed, protocol, data, prior=True)
        print(pd.DataFrame(rows)[["method", "seed", "metric", "difference", "pass"]].tail(8).to_string(), flush=True)
    if rows:
        save(rows)
    if "trained" in args.parts:
        save(trained_rows(args.kinds, args.seeds, protocol, data_dir))


def save(rows: list[dict]) -> None:
    """Write the rows into peer_check.csv, in place of the earlier rows of the same methods."""
    table = pd.DataFrame(rows)
    path = HERE / "peer_check.csv"
    if path.exists():
        kept = pd.read_csv(path)
        table = pd.concat([kept[~kept["method"].isin(set(table["method"]))], table], ignore_index=True)
    write_csv(table, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
