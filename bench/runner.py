"""config -> data -> method -> training loop -> predictions -> evaluators -> record."""
from __future__ import annotations

import datetime
import time

import numpy as np
import torch

from bench import provenance
from bench.config import Execution, RunConfig
from bench.data import BenchData
from bench.metrics import evaluate
from bench.train import Diverged, train
from methods.base import DEFAULT_SCORE, ReferenceFailed

TOP_K_IMAGES = 5  # the seed's "top-5 most uncertain test images"


def run_one(config: RunConfig, data: BenchData, progress: bool = True, execution: Execution = Execution(),
            references: dict[str, dict] | None = None) -> tuple[dict, dict | None]:
    """Train and evaluate one run. ``references`` are the finished records of the runs that
    ``config.references()`` names. Returns (record, arrays for plots), or (record, None) for a run
    that diverged or could not start (status 'diverged' or 'error')."""
    method = config.make_method()
    device = execution.torch_device()
    if execution.threads:
        torch.set_num_threads(execution.threads)
    row = config.row()
    record = {**row, "config_columns": [k for k in row if k not in ("run_id", "seed")],
              "config": config.to_dict(), "ood_skipped": "; ".join(f"{k}: {v}" for k, v in data.ood_skipped.items()),
              "device": str(device), "vectorized": execution.vectorize, "threads": torch.get_num_threads(),
              "torch_version": torch.__version__, "numpy_version": np.__version__, **provenance.stamp()}
    try:
        method, bound_values = method.bind(references or {})
    except ReferenceFailed as exc:
        record.update(status="error", error=str(exc), finished_at=_now())
        return record, None
    record.update(bound_values)
    try:
        result = train(method, config.protocol, data.train, data.n_classes, config.seed,
                       progress=progress, label=f"{config.variant} seed {config.seed}", device=device,
                       vectorize=execution.vectorize, val=data.val)
    except Diverged as exc:
        record.update(status="diverged", diverged_epoch=exc.epoch, finished_at=_now())
        return record, None

    start = time.perf_counter()
    torch.manual_seed(config.seed)  # MC dropout's test-time masks

    def predict(split):  # -> (probabilities, the method's own scores)
        return method.predict(result.model, split.x.to(device))

    p_val = method.predict_proba(result.model, data.val.x.to(device)).cpu().numpy()  # val: no OOD scores
    p_id, own_id = predict(data.test)
    ood = {name: predict(split) for name, split in data.ood.items()}
    if not all(np.isfinite(p).all() for p in (p_val, p_id, *(p for p, _ in ood.values()))):
        record.update(status="diverged", diverged_epoch=max(result.epochs_run), finished_at=_now())
        return record, None
    metrics, scores = evaluate(p_id, data.test.y.numpy(), {n: p for n, (p, _) in ood.items()},
                               p_val, data.val.y.numpy(), own_id, {n: own for n, (_, own) in ood.items()})
    finite_val = [v for v in result.val_loss if np.isfinite(v)]
    record.update(status="ok", **metrics, train_seconds=result.seconds,
                  eval_seconds=time.perf_counter() - start,
                  epochs_run=" ".join(map(str, result.epochs_run)),
                  kept_epochs=" ".join(map(str, result.kept_epochs)),
                  nonfinite_epochs=" ".join(map(str, result.nonfinite_epochs)),
                  nonfinite_members=sum(e > 0 for e in result.nonfinite_epochs),
                  member_val_loss=" ".join(f"{v:.6g}" for v in result.val_loss),
                  # the mean over members of each member's validation task loss after checkpoint restore
                  val_task_loss=float(np.mean(finite_val)) if len(finite_val) == len(result.val_loss) else None,
                  param_abs_mean=float(np.mean(result.param_abs_mean)),
                  history=result.history, finished_at=_now())

    mean_id = p_id.mean(axis=0)
    top = np.argsort(-scores[DEFAULT_SCORE][0], kind="stable")[:TOP_K_IMAGES]
    arrays = {f"id_{score}": s_id.astype(np.float32) for score, (s_id, _) in scores.items()}
    arrays.update({f"ood_{ood_set}_{score}": s.astype(np.float32)
                   for score, (_, per_set) in scores.items() for ood_set, s in per_set.items()})
    arrays.update(id_pred=mean_id.argmax(1).astype(np.int16), id_conf=mean_id.max(1).astype(np.float32),
                  id_label=data.test.y.numpy().astype(np.int16), top_index=top,
                  top_images=data.test_images[top].numpy())
    return record, arrays


def run_line(record: dict) -> str:
    head = f"{record['variant']} seed {record['seed']}"
    if record["status"] == "error":
        return f"{head}: error: {record['error']}"
    if record["status"] != "ok":
        return f"{head}: {record['status']} in epoch {record['diverged_epoch']}"
    score = record["primary_score"]
    aurocs = "  ".join(f"AUROC({score}) vs {s} {record[f'auroc_{score}_vs_{s}']:.4f}"
                       for s in record["ood_sets"].split() if f"auroc_{score}_vs_{s}" in record)
    return (f"{head}: acc {record['id_acc']:.4f}  {aurocs}  epochs {record['epochs_run']}"
            f"  train {record['train_seconds']:.1f}s")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
