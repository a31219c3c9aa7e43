"""Score stored runs again from their kept weights (``OUT/weights/<run_id>.pt``, written by
``--save-weights``), without retraining: the current evaluators, more OOD sets (``bench.data.ood_sets``)
and the shift suite (``bench.data.shifts``). ``python -m bench evaluate`` is the command.

Each run is predicted again exactly as it was after training (``runner.predict_splits``: the
same order, the same MC-dropout seed), so its stored metrics come back bit for bit; the record says
whether they did. Every added OOD set and every shift level is then predicted under its own seed,
(run seed, set name) or (run seed, shift, level), so a set's numbers do not depend on which others
are scored. Records are rewritten with the added metrics, the shift metrics (``shifts``: one entry
per shift and level) and what they were evaluated with (``evaluation``); the run's cached
predictions gain the added sets' per-sample scores.
"""
from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from bench.data import ood_sets, shifts
from bench import provenance
from bench.config import make_protocol, make_run_config
from bench.data.files import load_images
from bench.data.image_cache import ImageCache
from bench.data.loaders import BenchData, OodUnavailable, load_benchmark_data, ood_images, prepared_split
from bench.training.trunk import featurized
from bench.errors import BenchError, ConfigError, DataError
from bench.evaluation.metrics import run_metrics, shift_metrics
from bench.execution.runner import now, plot_arrays, predict_split, predict_splits
from bench.store import LEFT_OUT, CorruptRecord, RunStore
from bench.tables import parse_skipped
from methods.base import ReferenceFailed

WEIGHTS = "weights"
SHOWN_MISSING = 8  # runs named in the one line about missing weights


@dataclasses.dataclass
class StoredRun:
    """A run to score: the record whose weights are used (``source``: the run itself, or the
    candidate a selection chose) and the records that take its new metrics."""
    source: dict
    targets: list[dict]
    config: object = None
    method: object = None
    model: object = None
    data: BenchData | None = None
    threads: int | None = None


@dataclasses.dataclass
class Evaluated:
    scored: int           # runs scored
    missing: list[str]    # runs without weights: 'variant seed s'
    differing: list[str]  # runs whose re-scored metrics differ from their record
    ood_sets: list[str]
    skipped: dict[str, str]
    shift_sets: int       # (shift, level) pairs scored


def parse_ood_sets(text: str | None, id_datasets: list[str]) -> list[str]:
    """'suite', 'none', or names, comma-separated -> names. Each name given must be an OOD set of
    every ID dataset (``bench.data.ood_sets.check_names``); suite stands for every set of each."""
    if text is None or text.strip() in ("", "none"):
        return []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    for dataset in id_datasets:
        ood_sets.check_names([p for p in parts if p != "suite"], dataset, keywords=("suite",))
    suite = [n for d in id_datasets for n in ood_sets.known_for(d)]
    return list(dict.fromkeys(n for p in parts for n in (suite if p == "suite" else [p])))


def stored_runs(store: RunStore, candidates: bool = False) -> tuple[list[StoredRun], list[str], list[str]]:
    """The finished runs of a folder that have weights, one name per run that has none, and one
    problem line per corrupt record. Selection candidates are scored only where a selection chose
    them (``candidates``: all). A run whose cached predictions are damaged is scored: scoring
    writes them again."""
    records, problems = store.scan(scores=False)
    by_id = {r["run_id"]: r for r in records}
    candidate_of = store.candidates(records)
    runs: dict[str, StoredRun] = {}
    missing = []
    for record in records:
        if record["status"] != "ok" or (candidate_of.get(record["run_id"]) and not candidates):
            continue
        source = by_id.get(record.get("selected_run_id", record["run_id"]))
        if source is None:
            problems.append(f"{record['variant']} seed {record['seed']}: its chosen candidate has no readable record")
            continue
        if not (store.out / WEIGHTS / f"{source['run_id']}.pt").is_file():
            missing.append(f"{record['variant']} seed {record['seed']}")
            continue
        run = runs.setdefault(source["run_id"], StoredRun(source, [source]))
        if record is not source:
            run.targets.append(record)
    return list(runs.values()), missing, problems


def load_run(store: RunStore, run: StoredRun, data_dir: Path, download: bool, device) -> None:
    """Config, method (bound to its references' records), data and model with the stored weights.
    Raises BenchError (one line) when the record or its weights cannot be used."""
    config_dict = run.source["config"]
    try:
        protocol = make_protocol(dict(config_dict["protocol"]))
        config = make_run_config(config_dict["method"], config_dict["method_options"], protocol, config_dict["seed"],
                                 config_dict.get("preset", "custom"))
    except (ConfigError, KeyError, TypeError) as exc:
        raise BenchError(f"its config is not valid here ({exc})") from None
    if config.run_id != run.source["run_id"]:
        raise BenchError(f"its config gives run id {config.run_id} (written by another dare-bench version)")
    method = config.built_method
    references = {}
    for role, ref in config.references().items():
        try:
            references[role] = store.load(ref.run_id, scores=False)  # its metrics bind the method, not its scores
        except (FileNotFoundError, CorruptRecord):
            pass
    try:
        method, _ = method.bind(references)
    except ReferenceFailed:
        pass  # predictions do not depend on a reference (it sets training thresholds)
    data = featurized(protocol, config.seed, load_benchmark_data(protocol, data_dir, download, config.seed), store.out)
    model = method.build_model(config.seed, list(range(method.n_networks)),
                               protocol.arch_spec.fitted(data.in_features, data.n_classes))
    path = store.out / WEIGHTS / f"{run.source['run_id']}.pt"
    try:
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file: this run is not scored, say why
        raise BenchError(f"its weights {path} cannot be loaded ({type(exc).__name__})") from None
    # the training split is not needed to predict unless the post-hoc fit uses it (Laplace): do not
    # hold one copy per run otherwise (the loader's cache keeps a few)
    run.config, run.method, run.model = config, method, model.to(device)
    run.data = data if method.post_fit_uses_train else dataclasses.replace(
        data, train=dataclasses.replace(data.train, x=data.train.x[:0], y=data.train.y[:0]))
    run.threads = run.source.get("threads")


def _stream(*parts) -> int:
    """A torch seed from a run seed and names: each added set's MC-dropout masks are its own."""
    return zlib.crc32(" ".join(map(str, parts)).encode())


def _named(lines: list[str], what: str) -> str:
    shown = ", ".join(lines[:SHOWN_MISSING]) + (f" and {len(lines) - SHOWN_MISSING} more"
                                                if len(lines) > SHOWN_MISSING else "")
    return f"{len(lines)} runs {what}: {shown}"


@dataclasses.dataclass
class Rescoring:
    """What scoring the runs of one folder shares: where and how, the OOD sets asked for, and the
    added OOD sets loaded so far (once per ID dataset) with the reasons of those that are not."""
    store: RunStore
    data_dir: Path
    download: bool
    device: torch.device
    threads: int | None  # torch threads; None: each run's own
    progress: bool
    ood: list[str]
    cache: ImageCache  # the shift suite's levels, drawn once and read back (bench.data.image_cache)
    loaded: dict[tuple[str, str], tuple | None] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)


def rescore_folder(out: Path, data_dir: Path, ood: list[str], shift_names: list[str], shift_seed: int = 0,
                   candidates: bool = False, download: bool = True, progress: bool = True,
                   device: str = "cpu", echo=print, threads: int | None = None,
                   cache_dir: Path | None = None) -> Evaluated:
    """Score every stored run of ``out`` again (see the module docstring); rewrites its records and
    cached predictions: once the OOD sets are scored, and again after the shift suite. Sets and
    shift levels scored by an earlier call are kept (OOD sets are scored again with them, so the
    cached predictions stay complete). ``threads``: torch threads; default each run's own (its
    record's ``threads``: the kernels, so the floats, can depend on it). ``cache_dir``: where the
    shift suite's levels are kept between calls (None: drawn every time). The tables and plots are
    rendered by the caller (``bench report``'s way)."""
    if not isinstance(shift_seed, int) or isinstance(shift_seed, bool) or shift_seed < 0:
        raise ConfigError(f"shift seed {shift_seed!r}: expected an integer >= 0")
    for name in shift_names:
        shifts.get_shift(name)
    context = Rescoring(RunStore.existing(Path(out)), Path(data_dir), download, torch.device(device), threads,
                        progress, ood, ImageCache(cache_dir, lambda line: echo(f"warning: {line}")))
    runs, not_scored = _loaded_runs(context, out, candidates, echo)
    differing, scored_sets = [], []
    evaluated_at = now()  # in every record written
    for run in tqdm(runs, desc="re-scoring runs", unit="run", disable=not progress):
        scored, differs = _rescore_run(context, run, evaluated_at)
        scored_sets += scored
        if differs:
            differing.append(f"{run.source['variant']} seed {run.source['seed']} ({differs})")
    levels = [(name, level) for name in shift_names for level in shifts.get_shift(name).levels]
    rows = _score_shifts(context, runs, levels, shift_seed)
    if levels:
        _write_shifts(context.store, runs, rows, shift_seed)
    return Evaluated(len(runs), not_scored, differing, list(dict.fromkeys(scored_sets)), context.skipped,
                     len(levels))


def _loaded_runs(context: Rescoring, out: Path, candidates: bool, echo) -> tuple[list[StoredRun], list[str]]:
    """The folder's runs to score, loaded, and one line per run that cannot be (no weights, or
    weights or a config that cannot be used), each kind said in one line. BenchError when none can."""
    store = context.store
    runs, missing, problems = stored_runs(store, candidates)
    for problem in problems:
        echo(f"warning: {problem.removesuffix(LEFT_OUT)}; not scored")
    if missing:
        echo(_named(missing, f"have no stored weights ({store.out / WEIGHTS}/<run_id>.pt; train them with "
                             "--save-weights) and are not scored"))
    usable, broken = [], []
    for run in tqdm(runs, desc="loading runs", unit="run", disable=not context.progress, leave=False):
        try:
            load_run(store, run, context.data_dir, context.download, context.device)
            usable.append(run)
        except BenchError as exc:
            if isinstance(exc, DataError):
                raise  # the data folder, not the run: every run would fail alike
            broken.append(f"{run.source['variant']} seed {run.source['seed']}: {exc}")
    if broken:
        echo(_named(broken, "cannot be scored"))
    if not usable:
        raise BenchError(f"no run in {out} has usable stored weights ({store.out / WEIGHTS}/<run_id>.pt); train "
                         "with --save-weights")
    return usable, missing + broken


def _rescore_run(context: Rescoring, run: StoredRun, evaluated_at: str) -> tuple[list[str], str]:
    """Predict one run again as after training, add the OOD sets asked for and those of earlier
    calls, and write its records (scored at ``evaluated_at``). Returns the OOD sets scored and how its metrics differ from the
    stored ones ('' when they came back identical)."""
    _threads(run, context.threads)
    p_val, (p_id, own_id), ood_pred, _ = predict_splits(run.config, run.method, run.model, run.data, context.device)
    earlier = str(run.source.get("scored_ood_sets") or "").split()
    for name in dict.fromkeys(earlier + context.ood):
        if name not in ood_pred and name != run.config.protocol.id_dataset:
            _predict_added_set(context, run, name, ood_pred)
    metrics, scores = run_metrics(p_id, run.data.test.y.numpy(), {n: p for n, (p, _) in ood_pred.items()}, p_val,
                                  run.data.val.y.numpy(), own_id, {n: own for n, (_, own) in ood_pred.items()})
    differs = _differences(run.source, metrics)
    scored = list(ood_pred)
    _write_scores(context, run, metrics, plot_arrays(p_id, scores, run.data), scored, differs, evaluated_at)
    return scored, differs


def _predict_added_set(context: Rescoring, run: StoredRun, name: str, ood_pred: dict) -> None:
    """Add the run's predictions on the OOD set ``name`` to ``ood_pred``, under the set's own seed;
    a set that cannot be had is noted in ``context.skipped`` and left out."""
    key = (run.config.protocol.id_dataset, name)
    if key not in context.loaded:
        try:
            context.loaded[key] = ood_images(context.data_dir, name, run.data.test_images,
                                             context.download and not ood_sets.SETS[name].optional)
        except OodUnavailable as exc:
            context.loaded[key] = None
            context.skipped[name] = str(exc)
    if context.loaded[key] is None:
        return
    torch.manual_seed(_stream(run.config.seed, name))
    ood_pred[name] = predict_split(run.method, run.model, prepared_split(run.data, *context.loaded[key]),
                                   run.data.n_classes, context.device, f"OOD set {name}")


def _write_scores(context: Rescoring, run: StoredRun, metrics: dict, arrays: dict, scored: list[str],
                  differs: str, evaluated_at: str) -> None:
    """The run's new metrics into each record that takes them, with what they were scored with and
    whether the stored metrics came back; the OOD sets are saved before the (long) shift suite starts."""
    for record in run.targets:
        notes = parse_skipped(record.get("ood_skipped"))
        notes = {n: why for n, why in notes.items() if n not in scored}
        notes.update({n: why for n, why in context.skipped.items() if n in context.ood})
        record.update(metrics, scored_ood_sets=" ".join(scored),
                      ood_skipped="; ".join(f"{k}: {v}" for k, v in notes.items()),
                      evaluation={**record.get("evaluation", {}), "evaluated_at": evaluated_at, **provenance.stamp(),
                                  "ood_sets": scored, "generated_ood_seed": ood_sets.SEED,
                                  "weights_of": run.source["run_id"], "device": str(context.device),
                                  "threads": torch.get_num_threads(), "reproduced_stored_metrics": not differs})
        context.store.add(record, arrays)


def _score_shifts(context: Rescoring, runs: list[StoredRun], levels: list[tuple[str, float]],
                  shift_seed: int) -> list[list[dict]]:
    """Each run's rows of the shift suite: one per (shift, level), each level predicted under its own
    seed, with the share of never-lit pixels that the shift lights."""
    rows: list[list[dict]] = [[] for _ in runs]
    dead = {}  # per ID dataset: the pixels that are 0 in every training image (weights that data never constrains)
    for name, level in tqdm(levels, desc="shift suite", unit="level", disable=not context.progress):
        generated, lit = {}, {}
        for i, run in enumerate(runs):
            dataset = run.config.protocol.id_dataset
            if not shifts.get_shift(name).applies_to(dataset):  # a dataset shift of other classes: no row
                continue
            if dataset not in generated:
                images, labels = shifts.shifted_set(run.data.test_images.numpy(), run.data.test.y.numpy(), name,
                                                    level, shift_seed, context.cache)
                if dataset not in dead:
                    dead[dataset] = load_images(context.data_dir, dataset, True,
                                                context.download)[0].amax(dim=0).numpy() == 0
                lit[dataset] = float((images[:, dead[dataset]] > 0).mean()) if dead[dataset].any() else 0.0
                generated[dataset] = torch.from_numpy(images), torch.as_tensor(labels)
            _threads(run, context.threads)
            split = prepared_split(run.data, *generated[dataset])
            torch.manual_seed(_stream(run.config.seed, name, level))
            probs, _ = predict_split(run.method, run.model, split, run.data.n_classes, context.device,
                                     f"shift {name} {level:g}")
            rows[i].append({"shift": name, "level": level, "shift_seed": shift_seed, "dead_pixels_lit": lit[dataset],
                            **shift_metrics(probs, split.y.numpy())})
    return rows


def _write_shifts(store: RunStore, runs: list[StoredRun], rows: list[list[dict]], shift_seed: int) -> None:
    """Each run's shift rows into its records: one row per (shift, level), the latest; rows of
    other levels from earlier calls are kept."""
    for run, new_rows in zip(runs, rows):
        for record in run.targets:
            fresh = {(r["shift"], r["level"]) for r in new_rows}
            kept = [r for r in record.get("shifts", []) if (r["shift"], r["level"]) not in fresh]
            record["shifts"] = kept + new_rows
            evaluation = record["evaluation"]
            evaluation["shifts"] = list(dict.fromkeys(r["shift"] for r in record["shifts"]))
            evaluation["shift_seed"] = shift_seed
            store.add(record, None)  # the cached predictions were written with the OOD sets


def _threads(run: StoredRun, threads: int | None) -> None:
    wanted = threads or run.threads
    if wanted and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


def _differences(record: dict, metrics: dict) -> str:
    """'' when every metric the record holds comes back identical, else how many differ and by how much."""
    common = [k for k, v in metrics.items() if isinstance(record.get(k), (int, float))]
    gaps = [abs(metrics[k] - record[k]) for k in common
            if not (metrics[k] == record[k] or (np.isnan(metrics[k]) and np.isnan(record[k])))]
    return f"{len(gaps)} of {len(common)} metrics differ, by up to {max(gaps):.3g}" if gaps else ""
