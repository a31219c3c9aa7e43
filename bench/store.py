"""Where results live. Each finished run is one JSON line in ``runs.jsonl`` (appended and flushed
as soon as the run ends, so nothing finished is lost) plus its cached scores in
``predictions/<run_id>.npz``. The CSV tables are always rebuilt from the records."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError

RECORDS = "runs.jsonl"
# Columns that are not config: never group keys of the summary.
NON_CONFIG = {"run_id", "seed", "status", "diverged_epoch", "epochs_run", "train_seconds",
              "eval_seconds", "device", "vectorized", "threads", "torch_version", "numpy_version",
              "finished_at"}


class RunStore:
    def __init__(self, out_dir: Path):
        self.out = Path(out_dir)
        self.predictions = self.out / "predictions"
        try:
            self.predictions.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot create output folder {self.out}: {exc.strerror}") from None

    def add(self, record: dict, arrays: dict[str, np.ndarray] | None) -> None:
        if arrays is not None:  # scores first: a record never points at missing scores
            tmp = self.predictions / f".{record['run_id']}.tmp.npz"
            np.savez_compressed(tmp, **arrays)
            os.replace(tmp, self.predictions / f"{record['run_id']}.npz")
        with open(self.out / RECORDS, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def load_arrays(self, run_id: str) -> dict[str, np.ndarray]:
        with np.load(self.predictions / f"{run_id}.npz") as z:
            return dict(z)

    def runs(self) -> pd.DataFrame:
        """All records, the newest per run_id. A truncated last line (a killed write) is skipped."""
        path = self.out / RECORDS
        rows = []
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame(rows).drop_duplicates("run_id", keep="last").reset_index(drop=True)

    def write_tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        runs = self.runs()
        summary = summarize(runs)
        runs.to_csv(self.out / "runs.csv", index=False)
        summary.to_csv(self.out / "summary.csv", index=False)
        return runs, summary


def metric_columns(runs: pd.DataFrame) -> list[str]:
    return [c for c in runs.columns
            if c.startswith(("id_", "ood_", "val_", "auroc_", "aupr_", "fpr95_")) or c == "train_seconds"
            if c not in ("ood_dataset", "ood_split", "id_dataset")]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and n over seeds for each config (every config column but the seed).

    Only runs with status ok enter the statistics; diverged ones are counted in n_diverged.
    """
    if runs.empty:
        return pd.DataFrame()
    metrics = metric_columns(runs)
    keys = [c for c in runs.columns if c not in NON_CONFIG and c not in metrics]
    ok = runs["status"] == "ok"
    masked = runs[keys].assign(_ok=ok, _seed=runs["seed"].where(ok), **{m: runs[m].where(ok) for m in metrics})
    grouped = masked.groupby(keys, dropna=False, sort=False)
    out = grouped["_ok"].agg(n="sum", n_diverged=lambda s: int((~s).sum()))
    out["seeds"] = grouped["_seed"].agg(lambda s: " ".join(str(int(v)) for v in sorted(s.dropna())))
    if metrics:
        stats = grouped[metrics].agg(["mean", "std"])
        stats.columns = [f"{m}_{stat}" for m, stat in stats.columns]
        out = out.join(stats)
    return out.reset_index()
