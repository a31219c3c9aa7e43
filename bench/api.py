"""The Python entry point, for notebooks: the same validation, run store and resume as the
command line (which is built on these functions).

    import bench
    runs = bench.run(methods=["deep_ensemble", "dare"], seeds=[0, 1], options={"dare.threshold": [0.1, 0.3]},
                     protocol={"epochs": 3}, out="results/notebook", data_dir="../data")
    runs = bench.load("results/seed")           # one row per finished run
    table = bench.summary("results/seed")       # mean, std and n over seeds per config
    tidy = bench.ablation_table("results/ablation")   # the ablation's long table (bench.reporting.ablation module)
    star = bench.star_table("results/sensitivity/paper")  # a star design's tidy table (bench.design.star)
    bench.evaluate("results/seed", data_dir="../data")  # score stored weights: OOD suite, shift suite
    shift = bench.shift_table("results/seed")      # the shift suite's metrics, one row per (run, shift, level)
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd
import torch

from bench.config import Execution, make_execution
from bench.data.loaders import resolve_data_dir
from bench.errors import BenchError, ConfigError
from bench.execution.executors import Executor, make_executor, run_grid, with_references
from bench.design.grid import OPTION_FLAG, SELECT_FLAG, Assignment, GridItem, expand_grid
from bench.design.star import expand_star, parse_vary, preset_settings, read_design, write_design
from bench.provenance import stamp
from bench.reporting import star_tables
from bench.config import load_preset
from bench.store import RunStore, config_columns, summarize, without_candidates, write_csv
from methods import load_entry_points, load_plugin

RESULTS = "results"  # a preset's results go to results/<preset> unless out says otherwise


@dataclasses.dataclass
class Plan:
    """A validated grid and where it runs: nothing has trained yet."""
    preset: str
    preset_values: dict[str, Any]
    configs: list[GridItem]
    store: RunStore
    data_dir: Path
    execution: Execution
    executor: Executor
    star: Any = None  # a bench.design.star.StarDesign when the design is star: configs are all its items


DESIGNS = ("grid", "star")


def plan(preset: str = "seed", methods: list[str] | None = None, seeds: list[int] | None = None,
         protocol: Mapping[str, Any] | None = None, options=None, select=None, out: str | Path | None = None,
         data_dir: str | Path | None = None, plugins: Iterable[str | Path] = (), device: str = "auto",
         threads: int | None = None, vectorize: bool = True, jobs: int = 1, dask: str | None = None,
         pack_size: int | str = "auto", submitit: str | None = None, submitit_cluster: str = "auto",
         submitit_params: Iterable[str] = (), save_weights: bool = False, design: str | None = None,
         vary: Iterable[str] = ()) -> Plan:
    """Validate everything (ConfigError on bad input) and say where the grid will run. ``design``:
    grid (the product of every list; the default) or star (the base and one changed choice at a
    time: ``vary`` strings as --vary takes them, else the preset's [[star]] tables; bench.design.star);
    default: the preset's ``design``, else grid."""
    load_entry_points()
    for path in plugins:
        load_plugin(path)
    name, values = load_preset(preset)
    design = design or values.get("design", "grid")
    if design not in DESIGNS:
        raise ConfigError(f"design={design!r} is not valid; allowed: {' or '.join(DESIGNS)}")
    args = (name, values, list(methods) if methods else None, list(seeds) if seeds is not None else None,
            dict(protocol or {}), Assignment.many(options, OPTION_FLAG), Assignment.many(select, SELECT_FLAG))
    star = None
    if design == "star":
        vary = [vary] if isinstance(vary, str) else list(vary)
        settings = ([s for text in vary for s in parse_vary(text)] if vary
                    else preset_settings(values.get("star", [])))
        star = expand_star(*args, settings)
        configs = star.all_items()
    elif vary:
        raise ConfigError("--vary needs --design star (a grid design varies options through -o lists)")
    else:
        configs = expand_grid(*args)
    execution = make_execution({"device": device, "threads": threads, "vectorize": vectorize, "pack_size": pack_size,
                                "save_weights": save_weights})
    execution.torch_device()  # fail now, not after the first run, if cuda is asked for and absent
    bad = [p for p in submitit_params if not str(p).partition("=")[0].strip() or "=" not in str(p)]
    if bad:
        raise ConfigError(f"--submitit-param {bad[0]!r}: expected NAME=VALUE, e.g. timeout_min=120")
    executor = make_executor({"jobs": jobs, "dask_address": dask, "submitit_folder": submitit,
                              "submitit_cluster": submitit_cluster, "submitit_params": tuple(submitit_params)})
    # the folder: out, else the preset's own `out`, else results/<preset name>
    store = RunStore(Path(out if out is not None else values.get("out") or Path(RESULTS) / name), create=False)
    return Plan(name, values, configs, store, resolve_data_dir(data_dir), execution, executor, star)


def dry_run(p: Plan, force: bool = False) -> pd.DataFrame:
    """The grid's runs (references and selections included), finished or to do (``retry``: its
    record says it ended in error, or met a failed candidate); trains nothing."""
    first, then = with_references(p.configs)
    finished, _ = p.store.check([c.run_id for c in first + then])
    rows = []
    for item in first + then:
        role = "reference" if item not in p.configs else item.kind
        rows.append({"run_id": item.run_id, "variant": item.variant, "seed": item.seed, "role": role,
                     "candidates": len(item.runs()) if role == "selection" else 0,
                     "finished": item.run_id in finished and not force,
                     "retry": item.run_id not in finished and p.store.record_path(item.run_id).is_file()})
    return pd.DataFrame(rows)


@dataclasses.dataclass
class Executed:
    runs: pd.DataFrame    # this grid's runs, in the grid's order
    folder: pd.DataFrame  # every run in the folder (what runs.csv holds), which the report shows
    wall: float           # seconds
    keys: list[str]       # the folder's config columns (summary group keys)
    problems: list[str]   # one line per corrupt record in the folder
    failed: pd.DataFrame  # the runs this call ran (selection candidates included) that ended with status error
    ran: int = 0          # how many runs this call ran, selection candidates and selections included
    efficiency: dict | None = None  # what training sustained, against the matmul peak measured at start


def execute(p: Plan, download: bool = True, progress: bool = True, force: bool = False) -> Executed:
    """Run (or reuse) the plan's runs; rebuild runs.csv and summary.csv once. A KeyboardInterrupt
    leaves every finished run saved."""
    p.store.ensure()  # an output folder that cannot be made fails before anything trains
    if p.star is not None:  # which runs each setting reads, written before anything trains
        write_design(p.store.out, p.star)
    peak = None
    if (~dry_run(p, force)["finished"]).any():  # something will train: measure the peak it is held against
        from bench.training.perf import matmul_peak_gflops
        if p.execution.threads:
            torch.set_num_threads(p.execution.threads)
        peak = matmul_peak_gflops(2048, repeats=3, device=p.execution.torch_device())  # ~0.3 s on 2 cores
    started = time.perf_counter()
    try:
        grid = run_grid(p.configs, p.data_dir, p.store, p.executor, p.execution, download=download,
                        progress=progress, force=force)
    except BaseException:  # Ctrl-C, a failed cluster job: the tables still show every finished run
        p.store.write_tables()
        raise
    wall = time.perf_counter() - started
    folder, _, keys, problems = p.store.write_tables()
    runs = failed = folder
    if len(runs):  # methods as given, then options, seeds
        order = {run_id: i for i, run_id in enumerate(grid.run_ids)}
        runs = runs[runs["run_id"].isin(order)].sort_values("run_id", key=lambda s: s.map(order))
        failed = folder[folder["run_id"].isin(grid.ran) & (folder["status"] == "error")]
    efficiency = _efficiency(p, folder, grid.ran, wall, peak) if peak else None  # None: nothing trained
    return Executed(runs.reset_index(drop=True), folder, wall, keys, problems, failed.reset_index(drop=True),
                    len(grid.ran), efficiency)


def _efficiency(p: Plan, folder: pd.DataFrame, ran: set[str], wall: float, peak: float) -> dict | None:
    """The training matmul work of the runs this call ran, over its wall time, against the peak;
    appended to OUT/efficiency.csv so that efficiency is tracked on real grids."""
    trained = folder[folder["run_id"].isin(ran) & (folder["status"] == "ok")] if len(folder) else folder
    tflop = float(trained["train_tflop"].sum()) if "train_tflop" in trained else 0.0
    if not tflop:  # nothing trained (e.g. only a selection's record was written)
        return None
    row = {"finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": len(ran), "train_tflop": tflop,
           "wall_seconds": wall, "train_seconds": float(trained["train_seconds"].sum()) if len(trained) else 0.0,
           "matmul_peak_gflops": peak, "fraction_of_peak": tflop * 1e3 / wall / peak if wall else 0.0,
           "device": str(p.execution.torch_device()), "threads": torch.get_num_threads(),
           "pack_size": p.execution.pack_size, "jobs": p.executor.jobs, **stamp()}
    path = p.store.out / "efficiency.csv"
    write_csv(pd.DataFrame([row]), path, mode="a", header=not path.exists())
    return row


def run(methods: list[str] | None = None, *, preset: str = "seed", seeds: list[int] | None = None,
        protocol: Mapping[str, Any] | None = None, options=None, select=None, out: str | Path | None = None,
        data_dir: str | Path | None = None, plugins: Iterable[str | Path] = (), force: bool = False,
        download: bool = True, progress: bool = True, plots: bool = False, device: str = "auto",
        threads: int | None = None, vectorize: bool = True, jobs: int = 1, dask: str | None = None,
        pack_size: int | str = "auto", save_weights: bool = False, design: str | None = None,
        vary: Iterable[str] = ()) -> pd.DataFrame:
    """Train and evaluate a grid, exactly like ``python -m bench run``, and return its runs (one row
    per run: config columns, status, metrics). Finished runs in ``out`` are reused unless ``force``.
    design='star' (or a preset whose design is star) runs the base and each ``vary`` setting
    (e.g. ['epochs=10,20', 'dare.delta=0.1']) as ``python -m bench ablate --design star`` does, and
    writes its star.csv, star_summary.csv and star.md (``plots``: and star_forest.png).

    options: {'dare.threshold': [0.1, 0.3], 'members': 5} (a list is a grid) or ['dare.threshold=0.1,0.3'].
    select: the same for options selected on the validation split ({'mod.lam': [0, 1e-3, 1e-2]}).
    protocol: overrides of the preset's protocol values ({'epochs': 3, 'hidden': (64, 64)}).
    plots: also write the folder's report: summary.md, the plots and (for a preset with compare_to)
    the paper table, of every run in the folder.
    """
    p = plan(preset, methods, seeds, protocol, options, select, out, data_dir, plugins, device, threads,
             vectorize, jobs, dask, pack_size, save_weights=save_weights, design=design, vary=vary)
    done = execute(p, download, progress, force)
    if p.star is not None:
        star_tables.write_star(p.store.out, done.folder, plots=plots, title=f"star design: preset {p.preset}")
    if plots:
        from bench.reporting.report import report_folder
        report_folder(p.store, done.folder, done.keys, echo=lambda _: None)
    if len(done.failed):
        warnings.warn(f"{len(done.failed)} of {done.ran} runs failed (status error): "
                      + "; ".join(f"{r['variant']} seed {r['seed']}: {r['error']}" for _, r in done.failed.iterrows()),
                      RuntimeWarning, stacklevel=2)
    return done.runs


def _read(out: str | Path, candidates: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """(runs, config columns) of a results folder, from one scan of its records."""
    store = RunStore.existing(Path(out))
    records, _ = store.scan()
    runs, _ = store.runs_table(records)
    return (runs if candidates else without_candidates(runs)), config_columns(records)


def load(out: str | Path, candidates: bool = False) -> pd.DataFrame:
    """Every finished run in a results folder, one row each (what runs.csv holds). A selection's
    candidate runs are left out unless ``candidates``: the selection's own row stands for them."""
    return _read(out, candidates)[0]


def summary(out: str | Path) -> pd.DataFrame:
    """Mean, std and n over seeds per config (what summary.csv holds), candidates left out."""
    return summarize(*_read(out))


def evaluate(out: str | Path, data_dir: str | Path | None = None, ood_sets: str = "suite", shifts: str = "all",
             shift_seed: int = 0, candidates: bool = False, download: bool = True, progress: bool = True,
             device: str = "cpu", threads: int | None = None, plots: bool = False, echo=print):
    """Score the runs of ``out`` again from their stored weights, exactly like ``python -m bench
    evaluate`` (bench.execution.rescoring): ``ood_sets`` 'suite', 'none' or comma-separated names; ``shifts``
    'all', 'none', a family or names. ``threads``: torch threads (default: each run's own, which
    exact reproduction needs). Rewrites the records and the folder's tables (``plots``: and its
    report). Returns what was scored (``bench.execution.rescoring.Evaluated``)."""
    from bench.data import shifts as shift_suite
    from bench.execution.rescoring import evaluate_folder, parse_ood_sets
    from bench.store import id_datasets
    names = shift_suite.parse_shifts(shifts)
    store = RunStore.existing(Path(out))
    records, _ = store.scan()
    ood = parse_ood_sets(ood_sets, id_datasets(records))
    make_execution({"device": device}).torch_device()  # one line if cuda is asked for and absent
    data = resolve_data_dir(data_dir)
    done = evaluate_folder(Path(out), data, ood, names, shift_seed, candidates, download, progress, device, echo,
                           threads)
    folder, _, keys, _ = store.write_tables()
    if plots:
        from bench.reporting.shift_plots import shift_gallery
        from bench.reporting.report import report_folder
        echo(f"wrote {shift_gallery(store.out / 'shift_gallery.png', store, names, data, shift_seed)}")
        report_folder(store, folder, keys, echo=echo)
    return done


def shift_table(out: str | Path, candidates: bool = False) -> pd.DataFrame:
    """The shift suite's metrics of a results folder in long form (what shift.csv holds): one row
    per (run, shift, level); empty until ``evaluate`` has scored the folder."""
    from bench import store as run_store
    store = RunStore.existing(Path(out))
    records, _ = store.scan()
    runs, _ = store.runs_table(records)
    table = run_store.shift_table(records, runs)
    return table if candidates else without_candidates(table)


def star_table(out: str | Path) -> pd.DataFrame:
    """The tidy table of a star design's folder (what star.csv holds; ``bench.reporting.star_tables``)."""
    return star_tables.star_table(read_design(Path(out)), load(out, candidates=True))


def ablation_table(out: str | Path) -> pd.DataFrame:
    """The long ablation table of a results folder (see ``bench.reporting.ablation``)."""
    from bench.reporting import ablation
    return ablation.ablation_table(*_read(out))


__all__ = ["run", "load", "summary", "ablation_table", "star_table", "evaluate", "shift_table", "plan", "execute", "dry_run", "Executed", "BenchError"]
