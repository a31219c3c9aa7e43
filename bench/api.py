"""The Python entry point, for notebooks: the same validation, run store and resume as the
command line (which is built on these functions).

    import bench
    runs = bench.run({"methods": ["deep_ensemble", "dare"], "seeds": [0, 1], "options": {"dare.threshold": [0.1, 0.3]},
                      "protocol": {"epochs": 3}}, out="results/notebook", data_dir="../data")
    runs = bench.load("results/seed")           # one row per finished run
    table = bench.summary("results/seed")       # mean, std and n over seeds per config
    tidy = bench.ablation_table("results/ablation")   # the ablation's long table (bench.reporting.ablation module)
    star = bench.star_table("results/sensitivity/paper")  # a star design's tidy table (bench.reporting.star_tables)
    bench.evaluate("results/seed", data_dir="../data")  # score stored weights: OOD suite, shift suite
    shift = bench.shift_table("results/seed")      # the shift suite's metrics, one row per (run, shift, level)

Each command of ``python -m bench`` is a call or two here (bench.cli adds its flags and what it prints): ``report``,
``paper_table``, ``listing``, ``perf``, ``evaluate``; ``run`` and ``ablate`` are ``plan``, ``execute`` and a report.
"""
from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pandas as pd
import torch

from bench import tables as run_tables
from bench.config import (N_CLASSES, Execution, available_presets, load_preset, make_execution, make_protocol,
                          make_run_config, overridden, protocol_help)
from bench.data import ood_sets as ood_suite, shifts as shift_suite
from bench.data.files import load_images, resolve_data_dir
from bench.data.image_cache import readers_cache_dir, resolve_cache_dir
from bench.design.grid import OPTION_FLAG, SELECT_FLAG, Assignment, GridItem, expand_grid
from bench.design.star import (DESIGN_FILE, SCORE_KNOB, expand_star, parse_vary, preset_settings, read_design,
                               write_design)
from bench.errors import BenchError, ConfigError
from bench.execution.executors import Executor, grid_status, run_grid, split_execution
from bench.execution.rescoring import parse_ood_sets, rescore_folder
from bench.models.registry import ARCHITECTURES, Architecture
from bench.options import describe, validate
from bench.provenance import stamp
from bench.reporting import star_tables
from bench.reporting.published import load_published
from bench.reporting.report import report_folder, report_paper_table, rewrite_page, write_bootstrap
from bench.store import RunStore, append_csv
from bench.tables import FolderTables, config_columns, id_datasets, summarize, without_candidates
from bench.training.perf import Work, matmul_peak_gflops, run_pack_perf, run_perf
from methods import BROKEN, REGISTRY, SOURCES, load_entry_points, load_plugin
from methods.base import Method

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


GRID_KEYS = ("methods", "seeds", "protocol", "options", "select", "design", "vary")


def plan(preset: str = "seed", grid: Mapping[str, Any] | Iterable[str] | None = None,
         execution: Mapping[str, Any] | None = None, out: str | Path | None = None,
         data_dir: str | Path | None = None, plugins: Iterable[str | Path] = ()) -> Plan:
    """Validate everything (ConfigError on bad input) and say where the grid will run. ``grid``: what
    to run over the preset (GRID_KEYS: methods, seeds, protocol overrides, options, select, design,
    vary; a list of names: the methods); ``execution``: how (the fields of bench.config.Execution and
    bench.execution.executors.Executor, e.g. {'jobs': 2, 'pack_size': 10}). ``design``: grid (the
    product of every list; the default) or star (the base and one changed choice at a time: ``vary``
    strings as --vary takes them, else the preset's [[star]] tables); default: the preset's."""
    load_entry_points()
    for path in plugins:
        load_plugin(path)
    grid = {"methods": list(grid)} if grid is not None and not isinstance(grid, Mapping) else dict(grid or {})
    unknown = sorted(set(grid) - set(GRID_KEYS))
    if unknown:
        raise ConfigError(f"grid: unknown key {unknown[0]!r} (allowed: {', '.join(GRID_KEYS)})")
    name, values = load_preset(preset)
    design = grid.get("design") or values.get("design", "grid")
    if design not in DESIGNS:
        raise ConfigError(f"design={design!r} is not valid; allowed: {' or '.join(DESIGNS)}")
    methods, seeds = grid.get("methods"), grid.get("seeds")
    args = (name, values, list(methods) if methods else None, list(seeds) if seeds is not None else None,
            dict(grid.get("protocol") or {}), Assignment.many(grid.get("options"), OPTION_FLAG),
            Assignment.many(grid.get("select"), SELECT_FLAG))
    vary, star = grid.get("vary") or (), None
    if design == "star":
        vary = [vary] if isinstance(vary, str) else list(vary)
        settings = [s for text in vary for s in parse_vary(text)] if vary else preset_settings(values.get("star", []))
        star = expand_star(*args, settings)
        configs = star.all_items()
    elif vary:
        raise ConfigError("--vary needs --design star (a grid design varies options through -o lists)")
    else:
        configs = expand_grid(*args)
    run_values, executor = split_execution(execution)
    run_values.check_device(configs)  # fail now, not after the first run
    # the folder: out, else the preset's own `out`, else results/<preset name>
    store = RunStore(Path(out if out is not None else values.get("out") or Path(RESULTS) / name), create=False)
    return Plan(name, values, configs, store, resolve_data_dir(data_dir), run_values, executor, star)


def dry_run(p: Plan, force: bool = False) -> pd.DataFrame:
    """The grid's runs (references and selections included), finished or to do, and who claims
    each: the columns of ``bench.execution.executors.grid_status``; trains nothing."""
    return pd.DataFrame(grid_status(p.configs, p.store, force, p.executor.claim_timeout))


@dataclasses.dataclass
class Executed:
    runs: pd.DataFrame    # this grid's runs, in the grid's order
    tables: FolderTables  # the folder's tables (every run in it: what the report shows), built once
    wall: float           # seconds
    failed: pd.DataFrame  # the runs this call ran (selection candidates included) that ended with status error
    ran: int = 0          # how many runs this call ran, selection candidates and selections included
    by_others: dict[str, str] = dataclasses.field(default_factory=dict)  # run id -> the worker that trained it meanwhile
    efficiency: dict | None = None  # what training sustained, against the matmul peak measured at start


def execute(p: Plan, download: bool = True, progress: bool = True, force: bool = False) -> Executed:
    """Run (or reuse) the plan's runs; rebuild runs.csv and summary.csv once. A KeyboardInterrupt
    leaves every finished run saved."""
    existed = p.store.out.exists()
    p.store.ensure()  # an output folder that cannot be made fails before anything trains
    if p.star is not None:  # which runs each setting reads, written before anything trains
        write_design(p.store.out, p.star)
    peak = None
    if (~dry_run(p, force)["finished"]).any():  # something will train: measure the peak it is held against
        if p.execution.threads:
            torch.set_num_threads(p.execution.threads)
        peak = matmul_peak_gflops(2048, repeats=3, device=p.execution.torch_device())  # ~0.3 s on 2 cores
    started = time.perf_counter()
    try:
        grid = run_grid(p.configs, p.data_dir, p.store, p.executor, p.execution, download=download,
                        progress=progress, force=force)
    except BaseException:  # Ctrl-C, a failed cluster job: the tables still show every finished run
        p.store.after_failure(made=not existed)
        raise
    wall = time.perf_counter() - started
    tables = p.store.write_tables()
    runs = failed = folder = tables.runs
    if len(runs):  # methods as given, then options, seeds
        order = {run_id: i for i, run_id in enumerate(grid.run_ids)}
        runs = runs[runs["run_id"].isin(order)].sort_values("run_id", key=lambda s: s.map(order))
        failed = folder[folder["run_id"].isin(grid.ran) & (folder["status"] == "error")]
    efficiency = _efficiency(p, folder, grid.ran, wall, peak) if peak else None  # None: nothing trained
    return Executed(runs.reset_index(drop=True), tables, wall, failed.reset_index(drop=True),
                    len(grid.ran), efficiency=efficiency, by_others=grid.by_others)


def _efficiency(p: Plan, folder: pd.DataFrame, ran: set[str], wall: float, peak: float) -> dict | None:
    """The training matmul work of the runs this call trained, over its wall time, against the peak;
    appended to OUT/efficiency.csv so that efficiency is tracked on real grids. A selection's record
    copies its chosen candidate's cost and trained nothing itself: it is not counted (dare-bench up
    to 0.6.0 counted it, so walks' work was counted twice for the chosen candidates)."""
    trained = folder[folder["run_id"].isin(ran) & (folder["status"] == "ok")] if len(folder) else folder
    if "selected_run_id" in trained:
        trained = trained[trained["selected_run_id"].isna()]
    tflop = float(trained["train_tflop"].sum()) if "train_tflop" in trained else 0.0
    if not tflop:  # nothing trained (e.g. only a selection's record was written)
        return None
    row = {"finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": len(trained), "train_tflop": tflop,
           "wall_seconds": wall, "train_seconds": float(trained["train_seconds"].sum()) if len(trained) else 0.0,
           "matmul_peak_gflops": peak, "fraction_of_peak": tflop * 1e3 / wall / peak if wall else 0.0,
           "device": str(p.execution.torch_device()), "threads": torch.get_num_threads(),
           "pack_size": p.execution.pack_size, "step": p.execution.step, "jobs": p.executor.jobs, **stamp()}
    path = p.store.out / "efficiency.csv"
    append_csv(pd.DataFrame([row]), path)
    return row


def run(grid: Mapping[str, Any] | Iterable[str] | None = None, preset: str = "seed",
        execution: Mapping[str, Any] | None = None, out: str | Path | None = None,
        data_dir: str | Path | None = None, plugins: Iterable[str | Path] = (), force: bool = False,
        plots: bool = False) -> pd.DataFrame:
    """Train and evaluate a grid, exactly like ``python -m bench run``, and return its runs (one row
    per run: config columns, status, metrics). Finished runs in ``out`` are reused unless ``force``.

    grid: {'methods': [...], 'seeds': [...], 'options': {'dare.threshold': [0.1, 0.3], 'members': 5} (a
    list is a grid) or ['dare.threshold=0.1,0.3'], 'select': the same for options selected on the
    validation split, 'protocol': overrides of the preset's values ({'epochs': 3})}, or just the
    methods' names; {'design': 'star', 'vary': ['epochs=10,20']} runs a star design as ``python -m
    bench ablate --design star`` does (star.csv, star_summary.csv, star.md). execution: how (``plan``),
    plus ``download`` (default True) and ``progress`` (default True). plots: also write the folder's
    report: summary.md, the plots and (for a preset with compare_to) the paper table."""
    execution = dict(execution or {})
    download, progress = execution.pop("download", True), execution.pop("progress", True)
    p = plan(preset, grid, execution, out, data_dir, plugins)
    done = execute(p, download, progress, force)
    if p.star is not None:
        star_report(p, done, plots)
    if plots:
        report_grid(p, done, echo=lambda _: None)
    if len(done.failed):
        warnings.warn(f"{len(done.failed)} of {done.ran} runs failed (status error): "
                      + "; ".join(f"{r['variant']} seed {r['seed']}: {r['error']}" for _, r in done.failed.iterrows()),
                      RuntimeWarning, stacklevel=2)
    return done.runs


def star_dry_run(p: Plan, force: bool = False) -> pd.DataFrame:
    """A star plan's settings, the base first: ``items``, how many ``shared`` with the base and ``to_do``, the
    ``runs`` its selections may train; ``reads``: the OOD score it reads if that is all it changes (no training)."""
    table = dry_run(p, force).drop_duplicates("run_id").set_index("run_id")
    rows = []
    for setting in p.star.settings:
        items = p.star.items[setting.name]
        needs = {run.run_id for item in items for run in (item.runs() if item.kind == "selection" else [item])}
        reads = setting.changes and all(change.name == SCORE_KNOB for change in setting.changes)
        rows.append({"setting": setting.name, "choice": setting.choice, "is_base": setting.is_base,
                     "items": len(items), "shared": 0 if setting.is_base else p.star.shared(setting),
                     "to_do": sum(1 for i in items if i.run_id in table.index and not table.loc[i.run_id, "finished"]),
                     "runs": len(needs), "reads": setting.score if reads else ""})
    return pd.DataFrame(rows)


def report_grid(p: Plan, done: Executed, plots: bool = True, echo: Callable[[str], None] = print) -> list[Path]:
    """The report of the plan's folder once ``execute`` is done (summary.md, the paper table a
    preset names, ``plots``), of every run in it, from the tables execute rebuilt; what ``run``
    writes last. ``echo`` gets the summary and a line per file. Returns the files written."""
    return report_folder(p.store, done.tables, plots=plots, echo=echo)


def star_report(p: Plan, done: Executed, plots: bool = True) -> list[Path]:
    """A star plan's star.csv, star_summary.csv, star.md and (``plots``) star_forest.png once
    ``execute`` is done (bench.reporting.star_tables). Returns the files written."""
    return star_tables.write_star(p.store.out, done.tables.runs, plots=plots, title=f"star design: preset {p.preset}")


def ablation_axes(p: Plan) -> list[str]:
    """The ablation's axes: the method options that take more than one value in the plan's grid;
    ConfigError when none does."""
    from bench.reporting.ablation import config_axes  # matplotlib (the module imports it): only for an ablation
    axes = config_axes(p.configs)
    if not axes:
        raise ConfigError("nothing to ablate: no method option takes more than one value in this grid "
                          "(give a list, e.g. -o dare.threshold=0.1,0.3 -o members=1,3,5)")
    return axes


def ablation_report(p: Plan, done: Executed, plots: bool = True) -> list[Path]:
    """OUT/ablation.csv and (``plots``) each metric against each axis, and over epochs, of the
    runs ``execute`` returned (bench.reporting.ablation). Returns the files written."""
    from bench.reporting.ablation import write_ablation  # matplotlib (the module imports it): only for an ablation
    histories = {run_id: p.store.load(run_id).get("history", []) for run_id in done.runs["run_id"]}
    return write_ablation(p.store.out, done.runs, done.tables.keys, histories, plots=plots)


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
             device: str = "cpu", threads: int | None = None, plots: bool = False, echo=print,
             cache_dir: str | Path | None = None):
    """Score the runs of ``out`` again from their stored weights, exactly like ``python -m bench
    evaluate`` (bench.execution.rescoring): ``ood_sets`` 'suite', 'none' or comma-separated names; ``shifts``
    'all', 'none', a family or names. ``threads``: torch threads (default: each run's own, which
    exact reproduction needs). ``cache_dir``: where shift levels and letters are kept (default $DARE_BENCH_CACHE,
    else ~/.cache/dare-bench; 'none': off). Rewrites the records, tables and summary.md (``plots``: figures too)."""
    names = shift_suite.parse_shifts(shifts)
    store = RunStore.existing(Path(out))
    records, _ = store.scan(scores=False)  # a run whose scores are damaged is scored, so its dataset counts
    ood = parse_ood_sets(ood_sets, id_datasets(records))
    make_execution({"device": device}).torch_device()  # one line if cuda is asked for and absent
    data = resolve_data_dir(data_dir)
    with readers_cache_dir(cache_dir):  # the letters' reader takes the folder from the environment
        done = rescore_folder(Path(out), data, ood, names, shift_seed, candidates, download, progress, device, echo,
                              threads, resolve_cache_dir(None if cache_dir is None else str(cache_dir)))
    tables = store.write_tables()
    if plots:
        from bench.reporting.figures import write_shift_gallery  # matplotlib: only when a figure is drawn
        write_shift_gallery(store, names, data, shift_seed, ood, echo)
    report_folder(store, tables, plots=plots, echo=echo)  # summary.md too, as run and report --no-plots
    return done


_warning = functools.partial(warnings.warn, category=RuntimeWarning, stacklevel=3)  # names the line calling the API


def _tables(out: str | Path, warn: Callable[[str], None]) -> tuple[RunStore, FolderTables]:
    """(store, its tables) of a results folder, its tables rebuilt; ``warn``: a line per corrupt record."""
    store = RunStore.existing(Path(out))
    tables = store.write_tables()
    for problem in tables.problems:
        warn(problem)
    return store, tables


@dataclasses.dataclass
class Reported:
    files: list[Path]                # every file written, in the order written
    bootstrap: pd.DataFrame | None   # what bootstrap.csv holds, when a bootstrap was asked for


def report(out: str | Path, plots: bool = True, bootstrap: int = 0, bootstrap_seed: int = 0,
           echo: Callable[[str], None] = print, warn: Callable[[str], None] = _warning,
           compare_to: str | None = None) -> Reported:
    """Rebuild a results folder's tables, summary.md and (``plots``) plots from its records, exactly
    like ``python -m bench report``; a star design's folder also gets its star tables. ``bootstrap``
    N > 0: also bootstrap.csv, a paired bootstrap over test samples (N resamples, seeded by
    ``bootstrap_seed``) of each seed's difference to the deep ensemble. ``echo``: the summary and a line per
    file written; ``warn``: a line per corrupt record; ``compare_to``: the paper table's published table."""
    load_published(compare_to) if compare_to else None  # a bad name fails before anything is written
    store, tables = _tables(out, warn)
    runs = tables.runs
    files = report_folder(store, tables, plots=plots, echo=echo, compare_to=compare_to)
    if (store.out / DESIGN_FILE).is_file():  # a star design's folder: its tables and forest plot too
        presets = ", ".join(dict.fromkeys(map(str, runs.get("preset", [])))) or store.out.name  # as `ablate` titles it
        star = star_tables.write_star(store.out, runs, plots=plots, title=f"star design: preset {presets}")
        for path in star:
            echo(f"wrote {path}")
        files += star
    table = write_bootstrap(store, runs, tables.keys, bootstrap, bootstrap_seed) if bootstrap else None
    return Reported(files + ([store.out / "bootstrap.csv"] if bootstrap else []), table)


def paper_table(out: str | Path, published: str | None = None, in_distribution: str | None = None,
                echo: Callable[[str], None] = print, warn: Callable[[str], None] = _warning) -> list[Path]:
    """As ``bench paper-table``: OUT/paper_table.csv, .md, .png and the page. ``published``: a name or CSV
    (default: the preset's compare_to); ``in_distribution``: default, OUT's; ``warn``: a line per corrupt record."""
    load_published(published) if published else None  # a bad name fails before anything is read
    store, tables = _tables(out, warn)
    runs = without_candidates(tables.runs)
    return (report_paper_table(store, runs, summarize(runs, tables.keys), published, in_distribution, echo=echo)
            + [rewrite_page(store, runs, tables.keys)])  # the page shows the paper table


def shift_table(out: str | Path, candidates: bool = False) -> pd.DataFrame:
    """The shift suite's metrics of a results folder in long form (what shift.csv holds): one row
    per (run, shift, level); empty until ``evaluate`` has scored the folder."""
    store = RunStore.existing(Path(out))
    records, _ = store.scan()
    runs, _ = store.runs_table(records)
    table = run_tables.shift_table(records, runs)
    return table if candidates else without_candidates(table)


def star_table(out: str | Path) -> pd.DataFrame:
    """The tidy table of a star design's folder (what star.csv holds; ``bench.reporting.star_tables``)."""
    return star_tables.star_table(read_design(Path(out)), load(out, candidates=True))


def ablation_table(out: str | Path) -> pd.DataFrame:
    """The long ablation table of a results folder (see ``bench.reporting.ablation``)."""
    from bench.reporting import ablation  # matplotlib (the module imports it): only for an ablation
    return ablation.ablation_table(*_read(out))


@dataclasses.dataclass
class MethodEntry:
    """A registered method as ``python -m bench list`` shows it."""
    name: str
    summary: str
    joint: bool    # members share batches and one loss
    source: str    # 'built in', or the plugin file or entry point that registered it
    options: list[tuple[str, Any, str, str]]  # (name, default, allowed, help) of the options not every method has


@dataclasses.dataclass
class Listing:
    """What there is to run and score: what ``python -m bench list`` prints."""
    methods: list[MethodEntry]
    broken: dict[str, str]                            # a method name that could not be loaded -> why
    shared_options: list[tuple[str, Any, str, str]]   # the options every method has
    protocol: list[tuple[str, Any, str, str]]         # the protocol values (the protocol flags of `run`)
    ood_sets: dict[str, tuple[str, ...]]              # in-distribution set -> its OOD sets, the default first
    ood_set_specs: dict[str, ood_suite.OodSet]        # every OOD set: group, description
    shifts: dict[str, shift_suite.Shift]              # every shift: family, levels (``evaluate --shifts``)
    presets: list[str]
    architectures: dict[str, Architecture]            # every architecture (``--arch``): its summary and options


def listing() -> Listing:
    """The registered methods (plugins' too) and their options, protocol values, OOD sets, shifts, presets."""
    load_entry_points()
    shared = describe(Method)
    names = {option_name for option_name, *_ in shared}
    methods = [MethodEntry(name, cls.summary, cls.joint, SOURCES[name], [o for o in describe(cls) if o[0] not in names])
               for name, cls in REGISTRY.items()]
    return Listing(methods, dict(BROKEN), shared, protocol_help(), {dataset: ood_suite.known_for(dataset) for dataset
                   in N_CLASSES}, dict(ood_suite.SETS), dict(shift_suite.SHIFTS), available_presets(), dict(ARCHITECTURES))


def perf(preset: str | None = None, members: int | None = None, epochs: int = 5, batch_size: int | None = None,
         hidden: str | tuple[int, ...] | None = None, id_dataset: str | None = None, device: str = "auto",
         threads: int | None = None, skip_seed_loop: bool = False, networks: Iterable[int] | None = None,
         peak_size: int = 4096, data_dir: str | Path | None = None, out: str | Path = RESULTS,
         log: Callable[[str], None] = print, step: str = "auto", arch: str | None = None) -> pd.DataFrame:
    """Time the training loop, exactly like ``python -m bench perf`` (bench.training.perf), into OUT/perf.csv;
    ``networks`` (e.g. [1, 5, 25]): packs of N one-member deep ensembles per N, their steps run as ``step``
    says, into OUT/perf_packs.csv (an image ``arch``: beside a plain loop of torch modules, into
    perf_packs_<arch>.csv). Returns the table. ``preset``: the work's shape; the arguments override it."""
    values = load_preset(preset)[1] if preset else {}
    shape = {k: v for k, v in values.get("protocol", {}).items() if k in ("batch_size", "hidden", "id_dataset", "arch")}
    given = {"batch_size": batch_size, "hidden": hidden, "id_dataset": id_dataset, "arch": arch}
    protocol = make_protocol(overridden(shape, {**{k: v for k, v in given.items() if v is not None}, "epochs": epochs}))
    if protocol.arch != "mlp" and networks is None:  # the seed-loop comparison is the MLP's
        raise ConfigError(f"arch={protocol.arch}: perf times it with --networks N[,N...] (beside a plain torch loop)")
    members = members or values.get("method_options", {}).get("deep_ensemble", {}).get("members", 3)
    members = make_run_config("deep_ensemble", {"members": members}, protocol, 0).method_options["members"]
    execution = make_execution({"device": device, "threads": threads, "step": step})
    execution.check_device([])
    peak = validate(Work, {"peak_size": peak_size}, "perf")
    networks = None if networks is None else [int(n) for n in networks]
    if networks is not None and (not networks or min(networks) < 1):
        raise ConfigError(f"networks={networks}: expected integers >= 1 such as 1,5,25,50")
    if execution.threads:
        torch.set_num_threads(execution.threads)
    root = resolve_data_dir(data_dir)
    load_images(root, protocol.id_dataset, True, download=False)  # one clear line if the data is missing
    work = Work(members=members, epochs=protocol.epochs, batch_size=protocol.batch_size, hidden=protocol.hidden,
                dataset=protocol.id_dataset, arch=protocol.arch, preset=preset or "", **peak)
    if networks is not None:
        return run_pack_perf(work, root, Path(out), execution.torch_device(), networks, log=log, step=step)
    return run_perf(work, root, Path(out), execution.torch_device(), skip_seed_loop, log=log)


__all__ = ["run", "load", "summary", "ablation_table", "star_table", "evaluate", "shift_table", "report",
           "paper_table", "listing", "perf", "plan", "dry_run", "star_dry_run", "execute", "report_grid", "star_report",
           "ablation_axes", "ablation_report", "Plan", "Executed", "Reported", "Listing", "MethodEntry", "BenchError"]
