"""config -> data -> method -> training loop -> predictions -> evaluators -> record."""
from __future__ import annotations

import datetime
import hashlib
import time
import traceback

import numpy as np
import torch

from bench import provenance
from bench.config import Execution, RunConfig
from bench.data.loaders import BenchData
from bench.evaluation.metrics import run_metrics
from bench.evaluation.contract import InvalidPredictions, check_own_scores, check_probabilities
from bench.evaluation.columns import ood_column, score_key
from bench.training.packs import packed_method
from bench.training.loop import Diverged, train, train_pack
from bench.training.resume import TrainingSnapshot
from bench.evaluation.scores import DEFAULT_SCORE
from methods.base import ReferenceFailed

TOP_K_IMAGES = 5  # the seed's "top-5 most uncertain test images"


def run_pack(configs: list[RunConfig], data: BenchData | list[BenchData], progress: bool = True,
             execution: Execution = Execution(), references: list[dict[str, dict]] | None = None,
             save_weights=None, snapshot: TrainingSnapshot | None = None) -> list[tuple[dict, dict | None]]:
    """Train a pack of runs (``bench.training.packs``: one protocol; one run alone is a pack of one) as one
    stacked computation, then evaluate each. ``data``: the runs' data, one BenchData for all or one
    per run (seeds with their own splits). ``references[i]`` are the finished
    records of the runs that ``configs[i].references()`` names. Returns per run (record, arrays
    for plots), or (record, None) for a run that diverged (status 'diverged') or failed (status
    'error': the method raised, its predictions broke the contract, or a reference is unusable).
    A failure is contained: the record says why in one line (``error``) and keeps the traceback;
    the other runs and the grid go on. ``save_weights(run_id, state_dict)``, if given, keeps the
    kept weights of every run that finished ok. ``snapshot`` (``pack_id`` names it): where the
    pack's training state is kept every few minutes and resumed from; its caller discards it once
    the records are stored."""
    device = execution.torch_device()
    if execution.threads:
        torch.set_num_threads(execution.threads)
    references = references or [{} for _ in configs]
    datas = data if isinstance(data, list) else [data] * len(configs)
    networks = [c.built_method.n_networks for c in configs]
    pack = {"pack_id": pack_id(configs), "pack_runs": len(configs), "pack_networks": sum(networks)}
    records = [_base_record(c, d, execution, device, pack) for c, d in zip(configs, datas)]
    out: list[tuple[dict, dict | None] | None] = [None] * len(configs)
    bound = []  # (index, method bound to its references)
    for i, config in enumerate(configs):
        try:
            method, values = config.built_method.bind(references[i])
            records[i].update(values)
            bound.append((i, method))
        except ReferenceFailed as exc:
            records[i].update(status="error", error=str(exc), finished_at=now())
            out[i] = records[i], None
        except Exception as exc:  # noqa: BLE001 - a method's bug is this run's result, not the grid's end
            out[i] = _failed(records[i], "binding its references", exc)
    if bound:
        try:
            # a snapshot is named after every run of the pack: a pack with a run that failed to bind is another
            results = _train(configs, bound, datas, progress, execution, device,
                             snapshot if len(bound) == len(configs) else None)
        except Exception as exc:  # noqa: BLE001
            results = [exc] * len(bound)
        for (i, method), result in zip(bound, results):
            if isinstance(result, Diverged):
                records[i].update(status="diverged", diverged_epoch=result.epoch, finished_at=now())
                out[i] = records[i], None
            elif isinstance(result, Exception):
                out[i] = _failed(records[i], "training", result)
            else:
                if result.resumed_epoch:  # went on from a snapshot kept after this epoch (bench.training.resume)
                    records[i].update(resumed_epoch=result.resumed_epoch, resumed_commit=snapshot.resumed_commit)
                out[i] = _score_run(configs[i], method, result, datas[i], device, records[i])
                if save_weights is not None and out[i][0]["status"] == "ok":
                    save_weights(configs[i].run_id, {k: v.cpu() for k, v in result.model.state_dict().items()})
    return out


def pack_id(configs: list[RunConfig]) -> str:
    """A pack's name: its runs (each run id a hash of the run's whole config), in their order."""
    return hashlib.sha1(" ".join(c.run_id for c in configs).encode()).hexdigest()[:12]


def _base_record(config: RunConfig, data: BenchData, execution: Execution, device, pack: dict) -> dict:
    """What a record says before the run trains: its config and how it executes."""
    row = config.row()
    return {**row, "config_columns": [k for k in row if k not in ("run_id", "seed")],
            "config": config.to_dict(), "ood_skipped": "; ".join(f"{k}: {v}" for k, v in data.ood_skipped.items()),
            "device": str(device), "vectorized": execution.vectorize, "threads": torch.get_num_threads(), **pack,
            "torch_version": torch.__version__, "numpy_version": np.__version__, **provenance.stamp(),
            "worker": provenance.worker_name()}


def _train(configs: list[RunConfig], bound: list, datas: list[BenchData], progress: bool, execution: Execution,
           device, snapshot: TrainingSnapshot | None) -> list:
    """The bound runs' TrainResults (or Diverged): one run through ``train``, several through ``train_pack``."""
    first, data = configs[bound[0][0]], datas[bound[0][0]]
    if len(bound) == 1:
        try:
            return [train(bound[0][1], first.protocol, data.train, data.n_classes, first.seed, progress=progress,
                          label=f"{first.variant} seed {first.seed}", device=device,
                          vectorize=execution.vectorize, val=data.val, step=execution.step, snapshot=snapshot)]
        except Diverged as exc:
            return [exc]
    methods = [method for _, method in bound]
    networks = sum(m.n_networks for m in methods)
    return train_pack([(method, configs[i].seed) for i, method in bound], packed_method(methods, device),
                      first.protocol, [datas[i].train for i, _ in bound], data.n_classes, progress=progress,
                      label=f"pack of {len(bound)} {'/'.join(dict.fromkeys(configs[i].method for i, _ in bound))} runs "
                      f"({networks} networks)", device=device,
                      val=[datas[i].val for i, _ in bound], step=execution.step, snapshot=snapshot)


def _failed(record: dict, stage: str, exc: BaseException) -> tuple[dict, None]:
    """The record of a run whose method raised: the one-line reason and the traceback."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    record.update(status="error", error=f"{stage}: {type(exc).__name__}" + (f": {reason}" if reason else ""),
                  traceback="".join(traceback.format_exception(exc)), finished_at=now())
    return record, None


def _score_run(config: RunConfig, method, result, data: BenchData, device, record: dict) -> tuple[dict, dict | None]:
    """Predict on every split, check the predictions, compute the metrics: the run's finished record."""
    start = time.perf_counter()
    try:
        p_val, (p_id, own_id), ood, fitted = predict_splits(config, method, result.model, data, device)
    except InvalidPredictions as exc:  # non-finite numbers: divergence, a result; anything else: a broken contract
        if exc.nonfinite:
            record.update(status="diverged", diverged_epoch=max(result.epochs_run), diverged_reason=str(exc),
                          finished_at=now())
        else:
            record.update(status="error", error=f"invalid predictions from {exc}", finished_at=now())
        return record, None
    except Exception as exc:  # noqa: BLE001
        return _failed(record, "predicting", exc)
    try:
        metrics, scores = run_metrics(p_id, data.test.y.numpy(), {n: p for n, (p, _) in ood.items()},
                                      p_val, data.val.y.numpy(), own_id, {n: own for n, (_, own) in ood.items()})
        arrays = plot_arrays(p_id, scores, data)
    except Exception as exc:  # noqa: BLE001
        return _failed(record, "evaluating", exc)
    finite_val = [v for v in result.val_loss if np.isfinite(v)]
    cost = config.protocol.arch_spec.fitted(data.in_features, data.n_classes).cost()
    record.update(status="ok", **metrics, **fitted, train_seconds=result.seconds,
                  # by the architecture's layer-shape count, as bench perf's (execution info: efficiency = tflop /
                  # seconds / peak)
                  train_tflop=cost.training_flops_per_sample * len(data.train) * sum(result.epochs_run) / 1e12,
                  eval_seconds=time.perf_counter() - start,
                  epochs_run=" ".join(map(str, result.epochs_run)),
                  kept_epochs=" ".join(map(str, result.kept_epochs)),
                  nonfinite_epochs=" ".join(map(str, result.nonfinite_epochs)),
                  nonfinite_members=sum(e > 0 for e in result.nonfinite_epochs),
                  member_val_loss=" ".join(f"{v:.6g}" for v in result.val_loss),
                  # the mean over members of each member's validation task loss after checkpoint restore
                  val_task_loss=float(np.mean(finite_val)) if len(finite_val) == len(result.val_loss) else None,
                  param_abs_mean=float(np.mean(result.param_abs_mean)), training_step=result.step,
                  history=result.history, finished_at=now())
    return record, arrays


def predict_splits(config: RunConfig, method, model, data: BenchData,
                   device) -> tuple[np.ndarray, tuple, dict, dict]:
    """A trained run's predictions, checked against the contract, in the one order that makes
    MC dropout's test-time masks reproducible (``bench evaluate`` repeats it from stored weights):
    the method's post-hoc fit (``Method.post_fit``), seed, validation split, test split, the
    protocol's OOD sets. Returns (validation probabilities, (test probabilities, own scores),
    {OOD set: (probabilities, own scores)}, the post-hoc fit's values to record)."""
    train = (data.train.x.to(device), data.train.y) if method.post_fit_uses_train else None
    fitted = method.post_fit(model, data.val.x.to(device), data.val.y, train=train)
    torch.manual_seed(config.seed)  # MC dropout's test-time masks
    p_val = method.predict_proba(model, data.val.x.to(device))  # val: no OOD scores
    p_val = p_val.cpu().numpy() if isinstance(p_val, torch.Tensor) else p_val
    test = predict_split(method, model, data.test, data.n_classes, device, "test split")
    ood = {name: predict_split(method, model, split, data.n_classes, device, f"OOD set {name}")
           for name, split in data.ood.items()}
    check_probabilities(p_val, len(data.val), data.n_classes, "predict_proba on the validation split")
    return p_val, test, ood, fitted


def predict_split(method, model, split, n_classes: int, device, where: str) -> tuple[np.ndarray, dict]:
    """The method's (probabilities, own scores) on a split, checked against the contract."""
    probs, own = method.predict(model, split.x.to(device))
    check_probabilities(probs, len(split), n_classes, f"predict on the {where}")
    check_own_scores(own, len(split), f"own_scores on the {where}")
    return probs, own


def plot_arrays(p_id: np.ndarray, scores: dict, data: BenchData) -> dict[str, np.ndarray]:
    """Per-sample scores and the top-uncertain images: what the plots are drawn from."""
    mean_id = p_id.mean(axis=0)
    top = np.argsort(-scores[DEFAULT_SCORE][0], kind="stable")[:TOP_K_IMAGES]
    arrays = {score_key(score): s_id.astype(np.float32) for score, (s_id, _) in scores.items()}
    arrays.update({score_key(score, ood_set): s.astype(np.float32)
                   for score, (_, per_set) in scores.items() for ood_set, s in per_set.items()})
    labels = data.test.y.numpy()
    arrays.update(id_pred=mean_id.argmax(1).astype(np.int16), id_conf=mean_id.max(1).astype(np.float32),
                  id_p_true=mean_id[np.arange(len(labels)), labels].astype(np.float32),  # NLL per sample
                  id_label=labels.astype(np.int16), top_index=top,
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


def now() -> str:
    """The UTC time, to the second, that a record says it was finished at."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
