"""config -> data -> method -> training loop -> predictions -> evaluators -> record."""
from __future__ import annotations

import datetime
import time

import numpy as np
import torch

from bench.config import Execution, RunConfig
from bench.data import BenchData
from bench.metrics import evaluate
from bench.train import Diverged, train

TOP_K_IMAGES = 5  # the seed's "top-5 most uncertain test images"


def run_one(config: RunConfig, data: BenchData, progress: bool = True,
            execution: Execution = Execution()) -> tuple[dict, dict | None]:
    """Train and evaluate one run. Returns (record, arrays for plots) or (record, None) if it diverged."""
    method = config.make_method()
    device = execution.torch_device()
    if execution.threads:
        torch.set_num_threads(execution.threads)
    record = {**config.row(), "config": config.to_dict(), "device": str(device), "vectorized": execution.vectorize,
              "threads": torch.get_num_threads(), "torch_version": torch.__version__,
              "numpy_version": np.__version__}
    try:
        result = train(method, config.protocol, data.train, data.n_classes, config.seed,
                       progress=progress, label=f"{config.variant} seed {config.seed}", device=device,
                       vectorize=execution.vectorize)
    except Diverged as exc:
        record.update(status="diverged", diverged_epoch=exc.epoch, finished_at=_now())
        return record, None

    start = time.perf_counter()
    torch.manual_seed(config.seed)  # MC dropout's test-time masks
    probs = {name: method.predict_proba(result.model, split.x.to(device)).cpu().numpy()
             for name, split in (("val", data.val), ("id", data.test), ("ood", data.ood))}
    if not all(np.isfinite(p).all() for p in probs.values()):
        record.update(status="diverged", diverged_epoch=max(result.epochs_run), finished_at=_now())
        return record, None
    metrics, scores = evaluate(probs["id"], data.test.y.numpy(), probs["ood"],
                               probs["val"], data.val.y.numpy())
    record.update(status="ok", **metrics, train_seconds=result.seconds,
                  eval_seconds=time.perf_counter() - start,
                  epochs_run=" ".join(map(str, result.epochs_run)), finished_at=_now())

    mean_id = probs["id"].mean(axis=0)
    top = np.argsort(-scores["pred_entropy"][0], kind="stable")[:TOP_K_IMAGES]
    arrays = {f"{split}_{name}": (s_id if split == "id" else s_ood).astype(np.float32)
              for name, (s_id, s_ood) in scores.items() for split in ("id", "ood")}
    arrays.update(id_pred=mean_id.argmax(1).astype(np.int16), id_conf=mean_id.max(1).astype(np.float32),
                  id_label=data.test.y.numpy().astype(np.int16), top_index=top,
                  top_images=data.test_images[top].numpy())
    return record, arrays


def run_line(record: dict) -> str:
    head = f"{record['variant']} seed {record['seed']}"
    if record["status"] != "ok":
        return f"{head}: {record['status']} in epoch {record['diverged_epoch']}"
    return (f"{head}: acc {record['id_acc']:.4f}  AUROC(entropy) {record['auroc_pred_entropy']:.4f}"
            f"  epochs {record['epochs_run']}  train {record['train_seconds']:.1f}s")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
