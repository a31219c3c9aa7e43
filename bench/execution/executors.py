"""Where the runs of a grid execute: in this process, in local worker processes, on a Dask
cluster (all three through joblib, so no scheduler is written here), or as submitit jobs. Each task
claims its pack's runs in the folder (``bench.execution.claims``), trains those it holds and writes
each record (atomically) before returning, so a finished run is on disk even if the process that
asked for it dies, and commands started on several machines against one folder split the grid.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from joblib import Parallel, delayed, parallel_config
from tqdm.auto import tqdm

from bench.config import Execution, RunConfig, make_execution
from bench.data.files import check_dataset_files
from bench.data.loaders import load_benchmark_data, prepare_ood_sets
from bench.training.trunk import featurized
from bench.errors import BenchError, ConfigError
from bench.options import option, parse_float, parse_int, parse_str, validate
from bench.training.packs import make_packs, pack_limit
from bench.training.resume import TrainingSnapshot
from bench.execution.claims import DEFAULT_TIMEOUT, Claim, Claims, RunsToDo
from bench.execution.runner import now, pack_id, run_line, run_pack
from bench.store import CorruptRecord, RunStore
from methods import load_plugin, plugin_files
from bench.design.grid import GridItem
from bench.design.walks import Walk
from bench.provenance import commit, other_versions, stamp, version, worker_name

DEFAULT_JOB_MINUTES = 24 * 60  # submitit's own default (5 min on SLURM, 2 locally) would kill a pack


def run_and_store(pack: list[RunConfig], data_dir: Path, out_dir: Path, execution: Execution,
                  download: bool, progress: bool, plugins: tuple[Path, ...], todo: RunsToDo,
                  claim_timeout: float) -> list[dict]:
    """One task, the same in every executor: a pack of runs (``bench.training.packs``; one protocol).
    Load the plugin files that define methods (a worker process starts without them); claim the
    pack's runs and keep those this worker holds and that no worker has finished meanwhile; load
    each run's data (cached per process and split) and the records of the runs they depend on;
    train, evaluate, store each run's record and release its claim as the pack ends."""
    for path in plugins:
        load_plugin(path)
    store = RunStore(out_dir)
    records = []
    with Claims(out_dir, claim_timeout, log=tqdm.write).holding() as claims:
        held = [c for c in pack if claims.acquire(c.run_id)]
        mine = [c for c in held if todo.needs(c.run_id)]  # claimed, then looked again: never trained twice
        for config in held:
            if config not in mine:
                claims.release(config.run_id)
        if not mine:
            return records
        references = [_references(store, config) for config in mine]
        # a protocol with a frozen trunk: every split as its features (bench.training.trunk)
        data = [featurized(c.protocol, c.seed, load_benchmark_data(c.protocol, data_dir, download, c.seed), out_dir,
                           execution.torch_device(), progress) for c in mine]
        save = store.add_weights if execution.save_weights else None
        key = pack_id(mine)
        snapshot = TrainingSnapshot(store.snapshot_path(key), key, execution.snapshot_every)
        for record, arrays in run_pack(mine, data, progress=progress, execution=execution, references=references,
                                       save_weights=save, snapshot=snapshot):
            store.add(record, arrays)
            claims.release(record["run_id"])
            records.append(record)
        if all(r["status"] != "error" for r in records):  # stored, none to train again: nothing left to resume
            snapshot.discard()
    return records


def _references(store: RunStore, config: RunConfig) -> dict[str, dict]:
    references = {}
    for role, ref in config.references().items():
        try:
            references[role] = store.load(ref.run_id)
        except (FileNotFoundError, CorruptRecord):
            pass  # the method reports a missing reference as a recorded error
    return references


@dataclasses.dataclass(frozen=True)
class Executor:
    """jobs == 1 and no dask address: in this process. jobs > 1: local worker processes (loky).
    dask_address: a Dask scheduler address ('tcp://host:8786'), or 'local' for a LocalCluster of
    ``jobs`` single-threaded worker processes on this machine."""
    jobs: int = option(1, parse_int, "an integer >= 1", check=lambda v: v >= 1,
                       help="runs at a time in local worker processes (1: in this process); each worker gets "
                       "cores // jobs threads unless threads is given")
    dask_address: str | None = option(None, lambda v: None if v is None else parse_str(v),
                                      "a scheduler address such as tcp://host:8786, or local", flag="--dask",
                                      check=lambda v: v is None or bool(v),
                                      help="run on a Dask cluster: its scheduler, or local to start one of jobs worker "
                                      "processes here. Workers must see the data folder and OUT")
    submitit_folder: str | None = option(None, lambda v: None if v is None else parse_str(v), "a folder",
                                         check=lambda v: v is None or bool(v), flag="--submitit",
                                         help="run each pack as a submitit job (a SLURM job array where srun is "
                                         "available, local subprocesses otherwise); job files and logs in this folder "
                                         "(on a cluster: a shared filesystem). pip install -e '.[cluster]'")
    submitit_cluster: str = option("auto", parse_str, "auto, slurm, local or debug",
                                   check=lambda v: v in ("auto", "slurm", "local", "debug"),
                                   help="where submitit jobs run; auto: SLURM where srun is available, else local")
    submitit_params: tuple[str, ...] = option((), lambda v: tuple(parse_str(x) for x in v), "NAME=VALUE strings",
                                              flag="--submitit-param",
                                              help="submitit job parameters, e.g. timeout_min=240, slurm_partition=gpu, "
                                              "gpus_per_node=1, slurm_array_parallelism=16; the flag repeats")
    claim_timeout: float = option(DEFAULT_TIMEOUT, parse_float, "a number of seconds > 0",
                                  check=lambda v: v > 0 and math.isfinite(v),
                                  help="several commands may share one OUT: each claims the runs it trains in "
                                  "OUT/claims, touches its claims every tenth of this time and waits for runs that "
                                  "others claim; a claim without a heartbeat for this long is taken over (its worker "
                                  "died). Give every worker the same value")

    @property
    def in_process(self) -> bool:
        return self.jobs == 1 and self.dask_address is None and self.submitit_folder is None

    def worker_execution(self, execution: Execution) -> Execution:
        """Workers share the cores: unless told, each gets cores // jobs threads."""
        if self.in_process or execution.threads:
            return execution
        return dataclasses.replace(execution, threads=max(1, (os.cpu_count() or 1) // self.jobs))

    def map(self, packs: list[list[RunConfig]], data_dir: Path, out_dir: Path, execution: Execution,
            download: bool, progress: bool, todo: RunsToDo) -> Iterator[dict]:
        """Run every pack; yield each record this worker wrote as its pack finishes (in completion
        order). A run that another worker claimed or finished meanwhile yields nothing."""
        if self.in_process:
            for pack in packs:
                yield from run_and_store(pack, data_dir, out_dir, execution, download, progress, (), todo,
                                         self.claim_timeout)
            return
        if self.submitit_folder is not None:
            if packs:
                yield from self._submitit_map(packs, data_dir, out_dir, execution, download, progress, todo)
            return
        execution = self.worker_execution(execution)
        plugins = tuple(plugin_files())
        # workers write to this process's stderr: several bars would garble a terminal, so they
        # report only into a log (their epoch lines, bench.training.loop.EpochLines)
        lines = progress and not sys.stderr.isatty()
        tasks = (delayed(run_and_store)(p, data_dir, out_dir, execution, download, lines, plugins, todo,
                                        self.claim_timeout) for p in packs)
        with self._backend() as (backend, n_jobs):
            with parallel_config(backend=backend, n_jobs=n_jobs):
                for records in Parallel(return_as="generator_unordered")(tasks):
                    yield from records

    def _submitit_map(self, packs: list[list[RunConfig]], data_dir: Path, out_dir: Path, execution: Execution,
                      download: bool, progress: bool, todo: RunsToDo) -> Iterator[dict]:
        """One submitit job per pack (a SLURM job array where SLURM is); records as jobs finish. A
        job that ends without its records (killed, out of memory, time limit) leaves its runs to the
        next command, which resumes them; the others go on."""
        try:  # optional (the 'cluster' extra): imported only when asked for
            import submitit
        except ImportError:
            raise BenchError("--submitit needs submitit: pip install -e '.[cluster]'") from None
        executor = submitit.AutoExecutor(folder=Path(self.submitit_folder) / "%j",
                                         cluster=None if self.submitit_cluster == "auto" else self.submitit_cluster)
        params = {k: _number(v) for k, v in (p.split("=", 1) for p in self.submitit_params)}
        executor.update_parameters(**{"timeout_min": DEFAULT_JOB_MINUTES, **params})
        if executor.cluster != "slurm" and not execution.threads:  # local jobs run at once: share the cores
            execution = dataclasses.replace(execution, threads=max(1, (os.cpu_count() or 1) // len(packs)))
        plugins = tuple(plugin_files())  # a job's output is its log file: its epoch lines go there
        n = len(packs)
        jobs = executor.map_array(run_and_store, packs, [data_dir] * n, [out_dir] * n, [execution] * n,
                                  [download] * n, [progress] * n, [plugins] * n, [todo] * n, [self.claim_timeout] * n)
        failed = []
        for job in submitit.helpers.as_completed(jobs):
            try:
                yield from job.result()
            except submitit.core.utils.UncompletedJobError as exc:
                failed.append(f"job {job.job_id}: {str(exc).strip().splitlines()[0]}")
        if failed:
            raise BenchError(f"{len(failed)} of {n} submitit jobs ended without their records ({'; '.join(failed)}); "
                             f"logs in {self.submitit_folder}; the same command resumes their runs")

    @contextlib.contextmanager
    def _backend(self):
        if self.dask_address is None:
            yield "loky", self.jobs
            return
        try:  # optional (the 'cluster' extra): imported only when asked for
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise BenchError("--dask needs dask.distributed: pip install -e '.[cluster]'") from None
        if self.dask_address == "local":
            with LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster):
                yield "dask", -1
        else:
            try:
                client = Client(self.dask_address, timeout=10)
            except (OSError, TimeoutError, ValueError) as exc:
                raise BenchError(f"cannot reach the Dask scheduler at {self.dask_address}: {exc}") from None
            with client:
                yield "dask", -1


def _number(text: str):
    """'120' -> 120, '0.5' -> 0.5, 'gpu' -> 'gpu': a submitit parameter's value."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def split_execution(values: Mapping[str, Any] | None) -> tuple[Execution, Executor]:
    """An execution mapping split into its Execution and Executor halves, each validated."""
    values = dict(values or {})
    own = {f.name for f in dataclasses.fields(Execution)}
    theirs = {f.name for f in dataclasses.fields(Executor)}
    unknown = sorted(set(values) - own - theirs)
    if unknown:
        raise ConfigError(f"execution: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(own | theirs))})")
    bad = [p for p in values.get("submitit_params", ()) if not str(p).partition("=")[0].strip() or "=" not in str(p)]
    if bad:
        raise ConfigError(f"--submitit-param {bad[0]!r}: expected NAME=VALUE, e.g. timeout_min=120")
    return (make_execution({k: v for k, v in values.items() if k in own}),
            make_executor({k: v for k, v in values.items() if k in theirs}))


def make_executor(values: dict) -> Executor:
    return Executor(**validate(Executor, values, "execution"))


def with_references(configs: list[RunConfig]) -> tuple[list[RunConfig], list[RunConfig]]:
    """(runs that depend on nothing, including every run that others depend on; the dependent runs).
    References are added to the grid even when not asked for, so the grid runs or reuses them first."""
    dependent = [c for c in configs if c.references()]
    independent = {c.run_id: c for c in configs if not c.references()}
    for config in dependent:
        for ref in config.references().values():
            if ref.references():
                raise BenchError(f"{config.variant}: its reference {ref.variant} depends on another run")
            independent.setdefault(ref.run_id, ref)
    return list(independent.values()), dependent


def grid_status(items: list[GridItem], store: RunStore, force: bool = False,
                claim_timeout: float = DEFAULT_TIMEOUT) -> list[dict]:
    """One row per run of the grid (references added, selections included): finished or to do,
    ``retry`` (its record says it ended in error, or met a failed candidate), ``no_predictions`` (finished,
    reused without its cached predictions) and, for a run to do,
    the worker that claims it (``claimed_by``, ``heartbeat_s``; ``stale``: why the grid will take it over)."""
    first, then = with_references(items)
    finished, _ = store.check([c.run_id for c in first + then])
    bare = set(store.without_predictions(list(finished.values())))  # reused without their cached predictions
    claims = Claims(store.out, claim_timeout)
    rows = []
    for item in first + then:
        role = "reference" if item not in items else item.kind
        done = item.run_id in finished and not force
        claim = None if done else claims.read(item.run_id)
        rows.append({"run_id": item.run_id, "variant": item.variant, "seed": item.seed, "role": role,
                     "candidates": len(item.runs()) if role == "selection" else 0, "finished": done,
                     "retry": item.run_id not in finished and store.record_path(item.run_id).is_file(),
                     "no_predictions": done and item.run_id in bare,
                     "claimed_by": claim.worker if claim else "",
                     "heartbeat_s": claim.heartbeat_age if claim else float("nan"),
                     "stale": claim.why_stale(claim_timeout) if claim and claim.stale(claim_timeout) else ""})
    return rows


@dataclasses.dataclass
class GridRun:
    run_ids: list[str]   # the grid's runs (references and selections included), finished before or now
    ran: set[str]        # the runs this call ran (selection candidates and selections included)
    by_others: dict[str, str] = dataclasses.field(default_factory=dict)  # run id -> the worker that trained it


def run_grid(items: list[GridItem], data_dir: Path, store: RunStore, executor: Executor = Executor(),
             execution: Execution = Execution(), download: bool = True, progress: bool = True,
             force: bool = False, log=None) -> GridRun:
    """Run every grid item not already finished in ``store`` (all of them with force), the runs
    that others depend on first, then walk every selection (``bench.design.walks``). A run that ended in
    error before is run again, and a selection that met a failed candidate is walked again. Runs that
    other workers claim in the same folder are left to them and waited for (``bench.execution.claims``)."""
    log = log or (lambda line: tqdm.write(line))
    items = list({c.run_id: c for c in items}.values())  # a grid may name a run twice
    selections = [c for c in items if c.kind == "selection"]
    plain = [c for c in items if c.kind == "run"]
    first, then = with_references(plain)
    everything = first + then
    finished = _reusable(store, everything + selections, force, log)
    phases = [[c for c in phase if force or c.run_id not in finished] for phase in (first, then)]
    walks = [Walk(s, s.runs()) for s in selections if force or s.run_id not in finished]
    for w in walks:
        store.add_selection(w.selection.run_id, [c.run_id for c in w.candidates])
    todo = phases[0] + phases[1]
    if len(todo) + len(walks) < len(everything) + len(selections):
        log(f"{len(everything) + len(selections) - len(todo) - len(walks)} of {len(everything) + len(selections)} "
            f"runs already finished in {store.records}: skipped (--force redoes them)")
    if len(everything) > len(plain):
        log(f"{len(everything) - len(plain)} reference runs added: runs of the grid depend on them")
    _check_data(data_dir, todo + [c for w in walks for c in w.candidates], download, log)
    candidates = [run for phase in with_references([c for w in walks for c in w.candidates]) for run in phase]
    runs_to_do = RunsToDo.at_start(store, [c.run_id for c in everything + candidates], force)
    bar = tqdm(total=len(todo) + len(walks), desc="runs", unit="run", disable=None if progress else True)
    run = _Runner(executor, data_dir, store, execution, download, progress, runs_to_do, log, bar,
                  Claims(store.out, executor.claim_timeout, log))
    for phase in phases:
        run(phase)
        bar.update(len(phase))
    _walk(walks, run, store, bar.update, progress, log)
    bar.close()
    # the candidates stay in runs.csv and summary.csv; the grid's own rows are the selections
    return GridRun([c.run_id for c in everything] + [s.run_id for s in selections],
                   run.done_now | {w.selection.run_id for w in walks}, run.trained_by_others())


def _reusable(store: RunStore, items: list, force: bool, log) -> dict[str, dict]:
    """The finished records the grid may reuse (say so when another version wrote them)."""
    finished, problems = store.check([c.run_id for c in items])
    for problem in problems:
        log(f"warning: {problem}")
    if not force:
        missing = store.without_predictions(list(finished.values()))
        if missing:
            log(f"warning: {len(missing)} of the grid's finished runs have no cached predictions in "
                f"{store.predictions} (a folder copied without them?): reused as they are, their tables from their "
                f"records; --force trains the grid again")
        older = other_versions(list(finished.values()))
        if older:
            log(f"note: reusing {sum(older.values())} finished runs written by another dare-bench version or commit ("
                + ", ".join(f"{n} by {v}" for v, n in older.items()) + f"; this is {version()}"
                + (f" at {commit()[:8]}" if commit() else "") + "); "
                "--force redoes them")
    return finished


def _check_data(data_dir: Path, configs: list[RunConfig], download: bool, log) -> None:
    """Fail in the first second, not in a worker: the datasets the runs need, and their OOD sets."""
    for dataset in dict.fromkeys(c.protocol.id_dataset for c in configs):
        check_dataset_files(data_dir, dataset, download)
    for name, why in prepare_ood_sets(data_dir, (s for c in configs for s in c.protocol.ood_sets), download).items():
        log(f"note: OOD set {name} skipped: {why}")


@dataclasses.dataclass
class _Runner:
    """Runs (or reuses) batches of configs, references first; with force, each at most once per grid.
    Runs that other workers hold are waited for; a batch returns when every run of it has a record."""
    executor: Executor
    data_dir: Path
    store: RunStore
    execution: Execution
    download: bool
    progress: bool
    todo: RunsToDo
    log: object
    bar: tqdm
    claims: Claims  # this process only looks: its tasks claim
    done_now: set = dataclasses.field(default_factory=set)
    wanted: set = dataclasses.field(default_factory=set)  # every run that needed training while this grid ran

    def __call__(self, batch: list[RunConfig]) -> None:
        for phase in with_references(batch):
            self._phase(list(dict((c.run_id, c) for c in phase).values()))

    def _phase(self, configs: list[RunConfig]) -> None:
        waiting_for: set[str] = set()
        while True:
            todo = [c for c in configs if c.run_id not in self.done_now and self.todo.needs(c.run_id)]
            self.wanted.update(c.run_id for c in todo)
            if not todo:
                break
            held = self.claims.held_by_others([c.run_id for c in todo], take_over_stale=True)
            free = [c for c in todo if c.run_id not in held]
            if free and self._train(free):
                continue
            # nothing to claim, or others claimed it first: look again after a pause, never in a busy loop
            if held and set(held) != waiting_for:  # said when the runs waited for change, not at every look
                waiting_for = set(held)
                self._say_waiting(held)
            time.sleep(min(2.0, self.claims.interval))
        self.bar.set_postfix_str("")

    def _train(self, configs: list[RunConfig]) -> int:
        """Train the runs as packs (each task claims its pack's runs first); how many this worker trained."""
        trained = 0
        limit = pack_limit(self.execution, [c.protocol for c in configs])
        if self.execution.pack_size == "auto" and self.executor.jobs > 1:  # leave work for every worker
            networks = sum(c.built_method.n_networks for c in configs)
            limit = min(limit, max(1, math.ceil(networks / self.executor.jobs)))
        for record in self.executor.map(make_packs(configs, limit), self.data_dir, self.store.out, self.execution,
                                        self.download, self.progress, self.todo):
            self.done_now.add(record["run_id"])
            trained += 1
            if self.progress:
                self.log(run_line(record))
        return trained

    def _say_waiting(self, held: dict[str, Claim]) -> None:
        count = collections.Counter(claim.worker for claim in held.values())
        latest = {worker: min(c.heartbeat_age for c in held.values() if c.worker == worker) for worker in count}
        who = "; ".join(f"{worker} holds {n} (heartbeat {latest[worker]:.0f} s ago)" for worker, n in count.items())
        self.bar.set_postfix_str(f"waiting for {len(held)} claimed by " + ", ".join(count))
        if self.progress:
            self.log(f"waiting for {len(held)} run{'' if len(held) == 1 else 's'} claimed by other workers: {who}")

    def trained_by_others(self) -> dict[str, str]:
        """The runs that needed training during this grid and that another worker trained."""
        out = {}
        for run_id in sorted(self.wanted - self.done_now):
            try:
                out[run_id] = self.store.load(run_id).get("worker", "another worker")
            except (FileNotFoundError, CorruptRecord):
                continue
        return out


def _walk(walks: list, run: _Runner, store: RunStore, advance, progress: bool, log) -> None:
    """Walk every selection, one candidate per selection per round, the rounds of all seeds together
    (with packs, a round's candidates of one method pack across seeds). With packs, the candidates
    every walk trains whatever the scores (``Walk.certain``: up to its first possible early break)
    train first, all at once; the walk's rule is then applied to their records in the walk's
    order, so the choice is the sequential walk's, and nothing is trained that it would not train."""
    ahead = [c for w in walks if pack_limit(run.execution, [w.selection.protocol]) > 1 for c in w.certain()]
    if ahead:
        run(ahead)
    while any(not w.done for w in walks):
        active = [w for w in walks if not w.done]
        run([w.next_candidate() for w in active])  # a candidate trained ahead is not trained again
        for w in active:
            w.observe(store.load(w.next_candidate().run_id))
            if not w.done:
                continue
            chosen = store.load(w.scores[w.best]["run_id"]) if w.best is not None else None
            record = w.record(chosen)
            record.update(**stamp(), worker=worker_name(), finished_at=now())  # what made this selection, when
            has_arrays = chosen is not None and store.has_predictions(chosen["run_id"])  # (not in a copied folder)
            if not has_arrays:
                store.drop_predictions(record["run_id"])
            store.add(record, store.load_arrays(chosen["run_id"]) if has_arrays else None)
            advance()
            if progress:
                log(f"select {w.selection.method} seed {w.selection.seed}: " + "; ".join(
                    f"{', '.join(f'{n}={c[n]}' for n, _ in w.selection.grid)} val NLL "
                    + ("-" if c["val_nll_nats"] is None else f"{c['val_nll_nats']:.4f}") for c in w.scores)
                    + f" -> {record.get('selected', 'nothing')} ({w.stopped})")
