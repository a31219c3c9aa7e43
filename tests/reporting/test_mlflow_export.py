"""`bench export --mlflow`: a folder's runs in a real local MLflow store (sqlite), once each."""
import json

import pytest

from bench.cli.main import main

mlflow = pytest.importorskip("mlflow", reason='the tracking extra is not installed: pip install -e ".[tracking]"')

GRID = ["--methods", "deep_ensemble", "--seeds", "0", "1", "--epochs", "1", "--early-stop-acc", "none",
        "-o", "members=2", "--val-size", "50", "--no-download", "-q", "--no-plots"]


def test_export_logs_each_run_once_with_its_params_metrics_tags_and_record(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the store's default artifact root is ./mlruns: never the repository's
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID]) == 0
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    artifacts = (tmp_path / "artifacts").as_uri()
    assert main(["export", "--mlflow", uri, "--out", str(out), "--experiment", "tiny", "--artifacts", artifacts]) == 0
    assert "exported 2 of 2 records" in capsys.readouterr().out
    assert (tmp_path / "artifacts").is_dir()
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    by_id = {r.data.tags["dare_run_id"]: r for r in runs}
    assert len(runs) == 3 and by_id["folder"].data.tags["dare_kind"] == "folder"
    for path in (out / "records").glob("*.json"):
        record = json.loads(path.read_text())
        run = by_id[record["run_id"]]
        assert run.data.tags["seed"] == str(record["seed"]) and run.data.tags["label"] == record["label"]
        assert run.data.tags["harness_version"] == record["harness_version"]
        assert run.data.metrics["id_acc"] == pytest.approx(record["id_acc"])
        assert run.data.params["method.members"] == "2" and run.data.params["protocol.val_size"] == "50"
        assert run.info.status == "FINISHED"
        artifacts = [a.path for a in client.list_artifacts(run.info.run_id)]
        assert artifacts == [path.name]
    assert "summary.csv" in [a.path for a in client.list_artifacts(by_id["folder"].info.run_id)]
    # again: nothing is added twice
    assert main(["export", "--mlflow", uri, "--out", str(out), "--experiment", "tiny"]) == 0
    assert "exported 0 of 2 records" in capsys.readouterr().out
    assert len(client.search_runs([experiment.experiment_id])) == 3


@pytest.mark.parametrize("uri, says", [("not-a-uri", "is not a tracking URI"),
                                       ("http://127.0.0.1:9", "MLflow at http://127.0.0.1:9")])
def test_a_bad_uri_or_an_unreachable_server_is_one_line(tiny_data, tmp_path, capsys, monkeypatch, uri, says):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID[:4], *GRID[5:]]) == 0
    capsys.readouterr()
    assert main(["export", "--mlflow", uri, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
