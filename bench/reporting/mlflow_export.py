"""A results folder exported to MLflow (``python -m bench export --mlflow URI --out FOLDER``).

One experiment per folder (named by the folder's path, as given), one MLflow run per record:
parameters are the protocol values and the method options, metrics every numeric metric of the
record, tags the dare-bench run id, method, label, variant, seed, status and harness version, and
the record itself is the run's artifact. One more run per folder (tag ``dare_kind = folder``) holds
the folder's tables, page and figures. A run is matched by its dare-bench run id, so exporting a
folder again adds only the runs it did not have. Needs the ``tracking`` extra (mlflow-skinny; the
sqlite store needs SQLAlchemy and Alembic, which the extra brings).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable

from bench.errors import BenchError

RUN_ID_TAG, KIND_TAG = "dare_run_id", "dare_kind"
FOLDER_FILES = ("summary.csv", "runs.csv", "paired.csv", "summary.md", "index.html", "paper_table.md")
# record fields that are no metrics though numeric (they describe the run or how it was executed)
NOT_METRICS = {"seed", "schema", "threads", "pack_runs", "pack_networks"}


@dataclasses.dataclass
class Exported:
    experiment: str
    added: int      # MLflow runs made by this call (the folder's own run included)
    skipped: int    # records the experiment had already


def mlflow_params(record: dict) -> dict[str, str]:
    """The protocol values and method options of a record, as MLflow parameters (strings)."""
    config = record.get("config", {})
    params = {f"protocol.{k}": v for k, v in config.get("protocol", {}).items()}
    params.update({f"method.{k}": v for k, v in config.get("method_options", {}).items()})
    params.update(method=record.get("method"), preset=config.get("preset"))
    return {_key(k): _text(v) for k, v in params.items() if v is not None}


def mlflow_metrics(record: dict) -> dict[str, float]:
    """Every finite numeric top-level value of a record that is a result, not a setting."""
    return {_key(k): float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in NOT_METRICS and math.isfinite(v)}


def mlflow_tags(record: dict) -> dict[str, str]:
    return {RUN_ID_TAG: record["run_id"], KIND_TAG: "run", "method": str(record.get("method")),
            "label": str(record.get("label")), "variant": str(record.get("variant")), "seed": str(record.get("seed")),
            "status": str(record.get("status")), "harness_version": str(record.get("harness_version")),
            "mlflow.runName": f"{record.get('label')} seed {record.get('seed')}"}


def export_folder(out: Path, uri: str, experiment: str | None = None, artifacts: str | None = None,
                  echo: Callable[[str], None] = print) -> Exported:
    """Every record of ``out`` as an MLflow run in ``uri``'s experiment for the folder (``experiment``,
    default the folder's path as given; ``artifacts``: where a new experiment keeps its artifacts,
    default the store's choice, for a sqlite store ./mlruns); BenchError (one line) for a bad URI or an
    unreachable server."""
    client = _client(uri)
    name = experiment or Path(out).as_posix()
    records = [json.loads(p.read_text()) for p in sorted((Path(out) / "records").glob("*.json"))]
    if not records:
        raise BenchError(f"no records in {out} (expected {Path(out) / 'records'}/<run_id>.json)")
    with _one_line(uri):
        experiment_id = _experiment(client, name, artifacts)
        have = _exported(client, experiment_id)
        new = [r for r in records if r["run_id"] not in have]
        for record in new:
            _log_run(client, experiment_id, record, Path(out) / "records" / f"{record['run_id']}.json")
        if "folder" not in have:
            _log_folder(client, experiment_id, Path(out))
    added = len(new) + ("folder" not in have)
    echo(f"exported {len(new)} of {len(records)} records to MLflow experiment {name!r} at {uri}"
         + (f" ({len(records) - len(new)} were there already)" if len(new) < len(records) else ""))
    return Exported(name, added, len(records) - len(new))


def _log_run(client, experiment_id: str, record: dict, path: Path) -> None:
    from mlflow.entities import Metric, Param, RunTag
    run = client.create_run(experiment_id, tags=mlflow_tags(record))
    run_id = run.info.run_id
    params = [Param(k, v) for k, v in sorted(mlflow_params(record).items())]
    metrics = [Metric(k, v, 0, 0) for k, v in sorted(mlflow_metrics(record).items())]
    for i in range(0, max(len(params), len(metrics)), 100):  # MLflow's batch limits: 100 params, 1000 metrics
        client.log_batch(run_id, metrics=metrics[i:i + 100], params=params[i:i + 100], tags=[RunTag("exported", "1")])
    client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, "FINISHED" if record.get("status") == "ok" else "FAILED")


def _log_folder(client, experiment_id: str, out: Path) -> None:
    run = client.create_run(experiment_id, tags={KIND_TAG: "folder", RUN_ID_TAG: "folder",
                                                 "mlflow.runName": f"folder {out.name}"})
    for name in FOLDER_FILES:
        if (out / name).is_file():
            client.log_artifact(run.info.run_id, str(out / name))
    for figure in sorted(out.glob("*.png")):
        client.log_artifact(run.info.run_id, str(figure), "figures")
    client.set_terminated(run.info.run_id, "FINISHED")


def _exported(client, experiment_id: str) -> set[str]:
    """The dare-bench run ids the experiment has (``folder`` for the folder's own run)."""
    have, token = set(), None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        have |= {r.data.tags[RUN_ID_TAG] for r in page if RUN_ID_TAG in r.data.tags}
        token = page.token
        if not token:
            return have


def _experiment(client, name: str, artifacts: str | None) -> str:
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name, artifact_location=artifacts)


def _client(uri: str):
    try:
        from mlflow import MlflowClient  # the optional extra
    except ImportError:
        raise BenchError('export --mlflow needs MLflow: pip install -e ".[tracking]"') from None
    if not re.match(r"^(sqlite|file|https?|postgresql|mysql|databricks)(\+\w+)?:", uri) and not uri.startswith("/"):
        raise BenchError(f"--mlflow {uri!r} is not a tracking URI (e.g. sqlite:///mlflow.db, file:///path/mlruns, "
                         "http://host:5000)")
    # an unreachable server fails in seconds, not after MLflow's minutes of retries (the user's settings win)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    with _one_line(uri):
        return MlflowClient(tracking_uri=uri)


class _one_line:
    """MLflow's and the network's errors as one line (BenchError), never a traceback."""

    def __init__(self, uri: str):
        self.uri = uri

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, BenchError) or not isinstance(exc, Exception):
            return False
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BenchError(f"MLflow at {self.uri}: {first[:300]}") from None


def _key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", str(name))


def _text(value: Any) -> str:
    text = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text[:500]  # the length every MLflow store takes
