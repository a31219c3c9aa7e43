"""config -> data -> method -> training loop -> predictions -> evaluators -> record."""
from __future__ import annotations

import datetime
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from bench.config import Execution, RunConfig
from bench.data import BenchData, load_benchmark_data
from bench.metrics import evaluate
from bench.store import RunStore
from bench.train import Diverged, train

TOP_K_IMAGES = 5  # the seed's "top-5 most uncertain test images"


def run_one(config: RunConfig, data: BenchData, progress: bool = True,
            execution: Execution = Execution()) -> tuple[dict, dict | None]:
    """Train and evaluate one run. Returns (record, arrays for plots) or (record, None) if it diverged."""
    method = config.make_method()
    device = execution.torch_device()
    if execution.threads:
        torch.set_num_threads(execution.threads)
    record = {**config.row(), "device": str(device), "vectorized": execution.vectorize,
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
                  top_images=data.test_images[top].numpy(), top_probs=mean_id[top].astype(np.float32))
    return record, arrays


def run_grid(configs: list[RunConfig], data_dir: Path, store: RunStore, progress: bool = True,
             download: bool = True, execution: Execution = Execution()) -> list[str]:
    """Run every config, storing each as soon as it finishes. Returns the run ids."""
    cache: dict = {}
    run_ids = []
    bar = tqdm(configs, desc="runs", unit="run", disable=None if progress else True)
    for config in bar:
        bar.set_postfix_str(f"{config.variant} seed {config.seed}")
        key = config.protocol
        if key not in cache:
            cache[key] = load_benchmark_data(config.protocol, data_dir, download)
        record, arrays = run_one(config, cache[key], progress=progress, execution=execution)
        store.add(record, arrays)
        run_ids.append(config.run_id)
        if progress:
            tqdm.write(run_line(record, config))
    return run_ids


def run_line(record: dict, config: RunConfig) -> str:
    head = f"{config.variant} seed {config.seed}"
    if record["status"] != "ok":
        return f"{head}: {record['status']} in epoch {record['diverged_epoch']}"
    return (f"{head}: acc {record['id_acc']:.4f}  AUROC(entropy) {record['auroc_pred_entropy']:.4f}"
            f"  epochs {record['epochs_run']}  train {record['train_seconds']:.1f}s")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
