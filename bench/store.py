"""Where results live: one record file per finished run, written atomically, and tables rebuilt
from the records.

    OUT/records/<run_id>.json       config, status, metrics, timings, library versions
    OUT/predictions/<run_id>.npz    cached per-sample scores that the plots are drawn from
    OUT/runs.csv, OUT/summary.csv   rebuilt from the records after every grid

A record is written to a temporary file and renamed into place (rename is atomic), after its
scores, so a run killed at any moment leaves either a complete record or none. A grid skips runs
whose record is complete; a corrupt or partial record is reported, left out of the tables, and
its run is done again.

Every record says which record schema it follows (``schema``). A reader reads every schema up to
its own and refuses a newer one with one line naming both (BenchError, exit 2), never guessing:
    1  dare-bench 0.1 to 0.3: no ``schema`` field (read as 1)
    2  dare-bench 0.4: ``schema``; ``worker``, the process that trained the run (bench.execution.claims)
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.fileio import NPZ_DAMAGE, atomic_write, read_npz
from bench.evaluation.selective import METRICS as METRIC_NAMES, selective_table, with_selective
from bench.evaluation.columns import ood_table
from bench.provenance import version
from bench.tables import FolderTables, config_columns, records_frame, shift_table, summarize

RECORD_SCHEMA = 2  # what this code writes; it reads 1..RECORD_SCHEMA (the history is in the docstring above)
LEFT_OUT = "; left out of the tables"  # how a corrupt record's problem line ends (RunStore.scan)

# ok: metrics; diverged: non-finite loss/parameters; error: the method raised, its predictions broke
# the contract, or it could not start (e.g. its reference failed)
FINISHED = ("ok", "diverged", "error")
RETRIED = ("error",)  # a grid runs these again (the method may have been fixed); the others are reused
class CorruptRecord(Exception):
    pass


class NewerSchema(BenchError):
    """A record written by a newer dare-bench: read by none of this code's rules, so never redone or left out."""


# Every CSV table is written with 10 significant digits: a float's last bits differ between machines
# (BLAS and SIMD kernels sum in other orders), and a re-render on another machine must be byte-identical.
FLOAT_FORMAT = "%.10g"


def write_csv(frame: pd.DataFrame, path: Path, **kwargs) -> None:
    """A table as CSV at the fixed precision (FLOAT_FORMAT), without the index, written atomically:
    workers sharing a folder rebuild its tables together."""
    text = frame.to_csv(index=False, float_format=FLOAT_FORMAT, **kwargs)
    atomic_write(Path(path), lambda f: f.write(text.encode()))


def at_csv_precision(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """``frame`` with ``columns`` rounded as FLOAT_FORMAT writes them (the value a CSV reads back)."""
    rounded = frame.copy()
    for column in columns:
        if column in rounded and len(rounded):
            rounded[column] = [float(FLOAT_FORMAT % v) if isinstance(v, float) else v for v in rounded[column]]
    return rounded


def as_written(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as ``pd.read_csv`` reads back what ``write_csv`` writes of it (without the disk)."""
    return pd.read_csv(io.StringIO(frame.to_csv(index=False, float_format=FLOAT_FORMAT)))


def append_csv(frame: pd.DataFrame, path: Path) -> None:
    """Rows appended to a CSV table; the header only by the writer that creates the file (an
    exclusive create: two workers finishing together write it once)."""
    try:
        with open(path, "x") as f:
            frame.to_csv(f, index=False, float_format=FLOAT_FORMAT)
    except FileExistsError:
        with open(path, "a") as f:
            frame.to_csv(f, index=False, float_format=FLOAT_FORMAT, header=False)


# Each predictions file is read once per process: the check that a record's scores are readable reads
# and keeps them, and every table and figure after it is handed the kept arrays. An entry is keyed by
# the file's path, size, mtime and inode, so a file written again is read again; the oldest entries
# go beyond _CACHE_BYTES (the largest committed folder holds about 190 MB of arrays).
_ARRAYS: dict[tuple, dict[str, np.ndarray]] = {}
_CACHE_BYTES = 2 * 1024 ** 3


class UnreadableScores(ValueError):
    """A predictions file that is there but cannot be read whole (a missing one is FileNotFoundError)."""


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a predictions file (an .npz archive), every member read in full so that its CRC is
    checked (bench.fileio.read_npz: not in the middle of a report); UnreadableScores if it is not a
    whole, readable archive."""
    stat = path.stat()  # FileNotFoundError: no cache (a folder copied without predictions/)
    try:
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if key in _ARRAYS:
            return _ARRAYS[key]
        arrays = read_npz(path)
        for array in arrays.values():
            array.flags.writeable = False  # shared by every reader in this process
    except NPZ_DAMAGE as exc:
        raise UnreadableScores(f"{type(exc).__name__}: {exc}") from None
    _ARRAYS[key] = arrays
    while len(_ARRAYS) > 1 and sum(a.nbytes for v in _ARRAYS.values() for a in v.values()) > _CACHE_BYTES:
        del _ARRAYS[next(iter(_ARRAYS))]
    return arrays


class RunStore:
    def __init__(self, out_dir: Path, create: bool = True):
        """``create=False``: make no folder until something is written (a dry run writes nothing)."""
        self.out = Path(out_dir)
        self.records = self.out / "records"
        self.predictions = self.out / "predictions"
        if create:
            self.ensure()

    def ensure(self) -> None:
        """Create the folders now: a folder that cannot be created fails before anything trains."""
        try:
            self.records.mkdir(parents=True, exist_ok=True)
            self.predictions.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create output folder {self.out}: {exc.strerror}") from None

    def after_failure(self, made: bool) -> None:
        """After a grid stopped (Ctrl-C, a failed job, missing data): the tables show every finished run;
        a folder this call ``made`` that holds no run is removed, not left with empty tables."""
        with contextlib.suppress(OSError):  # on a full disk the tables wait for the next command
            if any(self.records.glob("*.json")):
                self.write_tables()
            elif made:
                for folder in (self.records, self.predictions, self.out):
                    folder.rmdir()

    @classmethod
    def existing(cls, out: Path) -> "RunStore":
        """A results folder that must already hold records (BenchError otherwise)."""
        if not any((Path(out) / "records").glob("*.json")):
            raise BenchError(f"no records in {out} (expected {Path(out) / 'records'}/<run_id>.json)")
        return cls(out)

    def record_path(self, run_id: str) -> Path:
        return self.records / f"{run_id}.json"

    def predictions_path(self, run_id: str) -> Path:
        return self.predictions / f"{run_id}.npz"

    def snapshot_path(self, pack_id: str) -> Path:
        """OUT/partial/<pack_id>.pt: an unfinished pack's training state (bench.training.resume), gone
        once its records are stored. Not committed."""
        return self.out / "partial" / f"{pack_id}.pt"

    def add(self, record: dict, arrays: dict[str, np.ndarray] | None) -> None:
        self.ensure()
        run_id = record["run_id"]
        record["schema"] = RECORD_SCHEMA
        if arrays is not None:  # scores first: a record written with its scores never points at missing ones
            atomic_write(self.predictions_path(run_id), lambda f: np.savez_compressed(f, **arrays))
        blob = json.dumps(record, indent=1).encode()
        atomic_write(self.record_path(run_id), lambda f: f.write(blob))

    def add_weights(self, run_id: str, state: dict) -> None:
        """OUT/weights/<run_id>.pt: a run's kept weights (torch.save of its model's state_dict), so
        that later evaluators can score the run again without retraining. Not committed."""
        import torch
        folder = self.out / "weights"
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / f"{run_id}.pt", lambda f: torch.save(state, f))

    def load(self, run_id: str, scores: bool = True) -> dict:
        """The record of a finished run; raises FileNotFoundError or CorruptRecord(reason). A finished
        run's cached predictions, where present, must be readable (``scores=False``: not looked at,
        for ``bench evaluate``, which writes them again); where absent (a folder copied without
        predictions/: a crash cannot leave a record without them) the record stands for its metrics
        alone (``without_predictions``)."""
        path = self.record_path(run_id)
        text = path.read_text()
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            raise CorruptRecord("not valid JSON (a partial write?)") from None
        if not isinstance(record, dict) or record.get("run_id") != run_id:
            raise CorruptRecord("its run_id does not match its file name")
        schema = record.get("schema", 1)
        if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
            raise CorruptRecord(f"its schema {schema!r} is not a record schema")
        if schema > RECORD_SCHEMA:
            raise NewerSchema(f"record {path} has record schema {schema} (written by dare-bench "
                              f"{record.get('harness_version', '?')}); this dare-bench {version()} reads schemas 1 to "
                              f"{RECORD_SCHEMA}: upgrade dare-bench to read this folder")
        if record.get("status") not in FINISHED:
            raise CorruptRecord(f"unknown status {record.get('status')!r}")
        if not isinstance(record.get("config_columns"), list):
            raise CorruptRecord("no config_columns (written by an older dare-bench?)")
        if record["status"] == "ok":
            if not isinstance(record.get("id_acc"), (int, float)):
                raise CorruptRecord("status ok but no metrics")
            cached = self.predictions_path(run_id)
            if scores and cached.exists():
                try:
                    read_arrays(cached)
                except UnreadableScores:
                    raise CorruptRecord(f"its scores {cached} are unreadable") from None
        return record

    def check(self, run_ids: list[str]) -> tuple[dict[str, dict], list[str]]:
        """({run id: its complete record, for a grid to reuse}, one line per record it will not reuse:
        a corrupt one, or a run that ended in error, which runs again). A finished run without its
        cached predictions is reused (``without_predictions`` names them)."""
        finished, problems = {}, []
        for run_id in run_ids:
            try:
                record = self.load(run_id)
            except FileNotFoundError:
                continue
            except CorruptRecord as exc:
                problems.append(f"record {self.record_path(run_id)} is corrupt ({exc}); its run will be redone")
                continue
            if record["status"] in RETRIED:
                problems.append(f"{record.get('variant', run_id)} seed {record.get('seed')} ended in error last "
                                f"time ({record.get('error')}); it runs again")
            elif record.get("failed_candidates"):
                problems.append(f"{record.get('variant', run_id)} seed {record.get('seed')} met "
                                f"{record['failed_candidates']} failed candidate runs last time; it is walked again")
            else:
                finished[run_id] = record
        return finished, problems

    def scan(self, scores: bool = True) -> tuple[list[dict], list[str]]:
        """Every complete record in the store, and one problem line per corrupt one. A finished run
        whose cached predictions are absent (e.g. a folder copied without predictions/) is read for
        the metrics its record holds (``without_predictions``); ``scores``: as ``load``'s."""
        records, problems = [], []
        for path in sorted(self.records.glob("*.json")):
            try:
                records.append(self.load(path.stem, scores))
            except CorruptRecord as exc:
                problems.append(f"record {path} is corrupt ({exc}){LEFT_OUT}")
        return records, problems

    def has_predictions(self, run_id: str) -> bool:
        """Whether a run's cached predictions are in the store."""
        return self.predictions_path(run_id).is_file()

    def without_predictions(self, records: list[dict]) -> list[str]:
        """The finished runs among ``records`` whose cached predictions are absent."""
        return [r["run_id"] for r in records if r["status"] == "ok" and not self.has_predictions(r["run_id"])]

    def drop_predictions(self, run_id: str) -> None:
        """Remove a run's cached predictions (a selection re-chosen from candidates without theirs:
        the old file would be another candidate's)."""
        self.predictions_path(run_id).unlink(missing_ok=True)

    def load_arrays(self, run_id: str) -> dict[str, np.ndarray]:
        """A run's cached predictions, read once per process (``read_arrays``); read-only arrays."""
        return read_arrays(self.predictions_path(run_id))

    def add_selection(self, selection_id: str, candidate_ids: list[str]) -> None:
        """Note, before its walk trains anything, which runs are a selection's candidates, so that
        the tables know them as candidates even while the walk is unfinished."""
        self.ensure()
        folder = self.out / "selections"
        folder.mkdir(exist_ok=True)
        blob = json.dumps({"selection": selection_id, "candidates": candidate_ids}).encode()
        atomic_write(folder / f"{selection_id}.json", lambda f: f.write(blob))

    def candidates(self, records: list[dict]) -> dict[str, list[str]]:
        """run id -> the selections it is a candidate of: from the manifests in OUT/selections and
        the candidates that the selections among ``records`` walked (a folder copied without
        selections/ still knows its candidates)."""
        listed: list[tuple[str, list]] = []
        for path in sorted((self.out / "selections").glob("*.json")):
            try:
                manifest = json.loads(path.read_text())
            except json.JSONDecodeError:
                continue  # a torn manifest is rewritten when its walk runs again
            listed.append((manifest.get("selection", path.stem), manifest.get("candidates", [])))
        listed += [(r["run_id"], [c.get("run_id") for c in r["candidates"] if isinstance(c, dict)])
                   for r in records if isinstance(r.get("candidates"), list)]
        out: dict[str, list[str]] = {}
        for selection, run_ids in listed:
            for run_id in run_ids:
                if run_id and selection not in out.setdefault(run_id, []):
                    out[run_id].append(selection)
        return out

    def runs_table(self, records: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(one row per record with the selective-prediction columns, the selective table in long
        form): the selective metrics come from each run's cached predictions, not the record, so
        every stored run has them without retraining (bench.evaluation.selective). A run whose
        predictions are absent keeps its rows of the folder's last selective.csv, if any."""
        runs = records_frame(records, self.candidates(records))
        # at the precision selective.csv keeps: a folder without predictions/ (a light clone) reads the
        # same values back from it, so its tables come out byte for byte as the full folder's
        selective = at_csv_precision(selective_table(runs, self.load_arrays), METRIC_NAMES)
        by_id = {r["run_id"]: r for r in records}
        # whose rows stand for a run without predictions: its own, or a selection's chosen run's
        # (the selection's own rows may be of an earlier choice)
        sources = {run_id: by_id[run_id].get("selected_run_id") or run_id for run_id in self.without_predictions(records)}
        carried = self._last_selective(sources, runs, selective.columns)
        if len(carried):
            order = {run_id: i for i, run_id in enumerate(runs["run_id"])}
            parts = [part for part in (selective, carried) if len(part)]  # an empty part would make the metrics objects
            selective = (pd.concat(parts, ignore_index=True)
                         .sort_values("run_id", key=lambda ids: ids.map(order), kind="stable", ignore_index=True))
        return with_selective(runs, selective), selective

    def _last_selective(self, sources: dict[str, str], runs: pd.DataFrame, columns: pd.Index) -> pd.DataFrame:
        """For each run id of ``sources``, the rows of its source run (``sources[run_id]``) in the
        folder's last selective.csv, labelled as the run's own (``runs``), in ``columns`` (a column
        the file lacks is empty); none when there is no such file or it cannot be read."""
        path = self.out / "selective.csv"
        if not sources or not path.is_file():
            return pd.DataFrame(columns=columns)
        try:
            last = pd.read_csv(path, dtype={"run_id": str, "score": str})
        except (OSError, ValueError, pd.errors.ParserError):  # (an empty file is a ValueError)
            return pd.DataFrame(columns=columns)
        if not {"run_id", "score"} <= set(last.columns):
            return pd.DataFrame(columns=columns)
        rows = last[last["run_id"].isin(set(sources.values()))].reindex(columns=columns)
        labels = runs.set_index("run_id")
        parts = [rows[rows["run_id"] == source].assign(
                     run_id=run_id, **{c: labels.at[run_id, c] for c in ("method", "variant", "seed") if c in columns})
                 for run_id, source in sources.items()]
        return pd.concat(parts, ignore_index=True).astype({c: float for c in columns if c in METRIC_NAMES})

    def write_tables(self) -> FolderTables:
        """runs.csv, summary.csv, ood.csv (the OOD metrics in long form), selective.csv (the
        selective-prediction metrics from each run's cached predictions) and, once ``bench evaluate``
        has scored the shift suite, shift.csv, from every record. A run without its predictions (a
        folder copied without predictions/) keeps its record's metrics and its rows of the last
        selective.csv; one problem line says how many such runs there are. Returns the tables written."""
        self.ensure()
        records, problems = self.scan()
        if problems and not records:  # every record corrupt: keep the tables as they are
            first = problems[0].removesuffix(LEFT_OUT)
            raise BenchError(f"no record in {self.records} can be read, so no table was rewritten: {len(problems)} "
                             f"are corrupt, the first: {first}")
        runs, selective = self.runs_table(records)
        missing = self.without_predictions(records)
        if missing:
            finished = sum(r["status"] == "ok" for r in records)
            carried = len(set(missing) & set(selective["run_id"]))
            problems.append(f"{len(missing)} of {finished} finished run{'s' if finished != 1 else ''} have no cached predictions in "
                            f"{self.predictions} (a folder copied without them?): their metrics come from their "
                            f"records and, for {carried} of them, their selective-prediction metrics from the last "
                            f"selective.csv; no figure that needs predictions is redrawn with them, no bootstrap "
                            f"resamples them")
        keys = config_columns(records)
        summary = summarize(runs, keys)
        write_csv(runs, self.out / "runs.csv")
        write_csv(summary, self.out / "summary.csv")
        write_csv(ood_table(runs), self.out / "ood.csv")
        write_csv(selective, self.out / "selective.csv")
        shift = shift_table(records, runs)
        if len(shift) or (self.out / "shift.csv").exists():
            write_csv(shift, self.out / "shift.csv")
        # the reports read the shift table as shift.csv holds it (values at its precision, types as read)
        return FolderTables(runs, summary, as_written(shift), keys, problems)
