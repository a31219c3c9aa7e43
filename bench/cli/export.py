"""`export`: a results folder's runs logged to MLflow (bench.reporting.mlflow_export)."""
from __future__ import annotations

import argparse
from pathlib import Path

from bench.cli.arguments import DEFAULT_REPORT_OUT, add_command
from bench.errors import BenchError


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    export = add_command(sub, "export", help="log every run of a results folder to MLflow",
                         description="Log each run of OUT as an MLflow run (parameters: the protocol values and "
                         "method options; metrics: every metric of its record; tags: dare-bench run id, method, "
                         "label, variant, seed, status, harness version; artifact: its record), in one experiment "
                         "per folder, plus one run holding the folder's tables, page and figures. Exporting again "
                         "adds only the runs the experiment lacks (matched by run id). Needs the tracking extra: "
                         'pip install -e ".[tracking]".')
    export.add_argument("--mlflow", metavar="URI", required=True,
                        help="MLflow tracking URI: sqlite:///mlflow.db (a local store), file:///path/mlruns, or a "
                        "server, http://host:5000")
    export.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder whose records are exported")
    export.add_argument("--experiment", help="experiment name (default: OUT as given, e.g. results/seed)")
    export.add_argument("--artifacts", metavar="URI", help="where a new experiment keeps its artifacts (default: the "
                        "store's choice; for a sqlite store MLflow's ./mlruns under the current folder)")
    return export


def run(args: argparse.Namespace) -> int:
    from bench.reporting.mlflow_export import export_folder  # the optional extra: only for this command
    if not (Path(args.out) / "records").is_dir():
        raise BenchError(f"no records in {args.out} (expected {Path(args.out) / 'records'}/<run_id>.json)")
    export_folder(Path(args.out), args.mlflow, args.experiment, args.artifacts)
    return 0
