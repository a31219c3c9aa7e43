"""config -> data -> method -> training loop -> predictions -> evaluators -> record."""
from __future__ import annotations

import datetime
import time
import traceback

import numpy as np
import torch

from bench import provenance
from bench.config import Execution, RunConfig
from bench.data import BenchData
from bench.metrics import InvalidPredictions, check_own_scores, check_probabilities, evaluate, ood_column, score_key
from bench.train import Diverged, train
from methods.base import DEFAULT_SCORE, ReferenceFailed

TOP_K_IMAGES = 5  # the seed's "top-5 most uncertain test images"


def run_one(config: RunConfig, data: BenchData, progress: bool = True, execution: Execution = Execution(),
            references: dict[str, dict] | None = None) -> tuple[dict, dict | None]:
    """Train and evaluate one run. ``references`` are the finished records of the runs that
    ``config.references()`` names. Returns (record, arrays for plots), or (record, None) for a run
    that diverged (status 'diverged') or failed (status 'error': the method raised, its predictions
    broke the contract, or a reference is unusable). A failure is contained: the record says why
    in one line (``error``) and keeps the traceback; the grid goes on."""
    device = execution.torch_device()
    if execution.threads:
        torch.set_num_threads(execution.threads)
    row = config.row()
    record = {**row, "config_columns": [k for k in row if k not in ("run_id", "seed")],
              "config": config.to_dict(), "ood_skipped": "; ".join(f"{k}: {v}" for k, v in data.ood_skipped.items()),
              "device": str(device), "vectorized": execution.vectorize, "threads": torch.get_num_threads(),
              "torch_version": torch.__version__, "numpy_version": np.__version__, **provenance.stamp()}
    stage = ["binding its references"]  # where a failure happened, for its one-line reason
    try:
        arrays = _train_and_evaluate(config, data, progress, execution, device, references or {}, record, stage)
    except ReferenceFailed as exc:
        record.update(status="error", error=str(exc), finished_at=_now())
        return record, None
    except Diverged as exc:
        record.update(status="diverged", diverged_epoch=exc.epoch, finished_at=_now())
        return record, None
    except InvalidPredictions as exc:  # non-finite numbers: divergence, a result; anything else: a broken contract
        if exc.nonfinite:
            record.update(status="diverged", diverged_epoch=exc.epoch, diverged_reason=str(exc), finished_at=_now())
        else:
            record.update(status="error", error=f"invalid predictions from {exc}", finished_at=_now())
        return record, None
    except Exception as exc:  # noqa: BLE001 - a method's bug is this run's result, not the grid's end
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        record.update(status="error", error=f"{stage[0]}: {type(exc).__name__}" + (f": {reason}" if reason else ""),
                      traceback=traceback.format_exc(), finished_at=_now())
        return record, None
    return record, arrays


def _train_and_evaluate(config: RunConfig, data: BenchData, progress: bool, execution: Execution, device,
                        references: dict[str, dict], record: dict, stage: list[str]) -> dict:
    """Bind, train, predict, check the predictions, evaluate; fills ``record`` (status ok) and
    returns the arrays for plots. ``stage[0]`` names the step under way."""
    method, bound_values = config.make_method().bind(references)
    record.update(bound_values)
    stage[0] = "training"
    result = train(method, config.protocol, data.train, data.n_classes, config.seed,
                   progress=progress, label=f"{config.variant} seed {config.seed}", device=device,
                   vectorize=execution.vectorize, val=data.val)
    stage[0] = "predicting"
    start = time.perf_counter()
    torch.manual_seed(config.seed)  # MC dropout's test-time masks
    p_val = method.predict_proba(result.model, data.val.x.to(device))  # val: no OOD scores
    p_val = p_val.cpu().numpy() if isinstance(p_val, torch.Tensor) else p_val
    try:
        p_id, own_id = _predict(method, result.model, data.test, data.n_classes, device, "test split")
        ood = {name: _predict(method, result.model, split, data.n_classes, device, f"OOD set {name}")
               for name, split in data.ood.items()}
        check_probabilities(p_val, len(data.val), data.n_classes, "predict_proba on the validation split")
    except InvalidPredictions as exc:
        exc.epoch = max(result.epochs_run)  # for a divergence: the last epoch trained
        raise
    stage[0] = "evaluating"
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
    return _plot_arrays(p_id, scores, data)


def _predict(method, model, split, n_classes: int, device, where: str) -> tuple[np.ndarray, dict]:
    """The method's (probabilities, own scores) on a split, checked against the contract."""
    probs, own = method.predict(model, split.x.to(device))
    check_probabilities(probs, len(split), n_classes, f"predict on the {where}")
    check_own_scores(own, len(split), f"own_scores on the {where}")
    return probs, own


def _plot_arrays(p_id: np.ndarray, scores: dict, data: BenchData) -> dict[str, np.ndarray]:
    """Per-sample scores and the top-uncertain images: what the plots are drawn from."""
    mean_id = p_id.mean(axis=0)
    top = np.argsort(-scores[DEFAULT_SCORE][0], kind="stable")[:TOP_K_IMAGES]
    arrays = {score_key(score): s_id.astype(np.float32) for score, (s_id, _) in scores.items()}
    arrays.update({score_key(score, ood_set): s.astype(np.float32)
                   for score, (_, per_set) in scores.items() for ood_set, s in per_set.items()})
    arrays.update(id_pred=mean_id.argmax(1).astype(np.int16), id_conf=mean_id.max(1).astype(np.float32),
                  id_label=data.test.y.numpy().astype(np.int16), top_index=top,
                  top_images=data.test_images[top].numpy())
    return arrays


def run_line(record: dict) -> str:
    head = f"{record['variant']} seed {record['seed']}"
    if record["status"] == "error":
        return f"{head}: error: {record['error']}"
    if record["status"] != "ok":
        return f"{head}: {record['status']} in epoch {record['diverged_epoch']}"
    score = record["primary_score"]
    aurocs = "  ".join(f"AUROC({score}) vs {s} {record[ood_column('auroc', score, s)]:.4f}"
                       for s in record["ood_sets"].split() if ood_column("auroc", score, s) in record)
    return (f"{head}: acc {record['id_acc']:.4f}  {aurocs}  epochs {record['epochs_run']}"
            f"  train {record['train_seconds']:.1f}s")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
