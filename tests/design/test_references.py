"""DARE's relative threshold: tau from the reference run of the same protocol and seed, which the grid
runs or reuses first (a failed reference is a recorded error; the paper preset reuses its DE (MSE) rows)."""
import json

import numpy as np
import pandas as pd
import pytest

import bench.execution.executors as executors
from bench.cli.main import main
from bench.design.grid import expand_grid
from bench.config import load_preset
from methods.dare import DARE

QUIET = ["--no-download", "-q", "--no-plots"]


# -- the relative threshold and its reference run ----------------------------------------------------

TINY = ["--epochs", "2", "--val-size", "50", "-o", "members=2"]


def records(out):
    return {r["run_id"]: r for r in (json.loads(p.read_text()) for p in (out / "records").glob("*.json"))}


def count_runs(monkeypatch):
    real, calls = executors.run_pack, []
    monkeypatch.setattr(executors, "run_pack", lambda pack, *a, **k: (calls.extend(c.variant for c in pack),
                                                                     real(pack, *a, **k))[1])
    return calls


def test_tau_is_1_25_times_the_reference_validation_loss_and_the_reference_is_reused(tiny_data, tmp_path,
                                                                                   monkeypatch):
    out = tmp_path / "out"
    calls = count_runs(monkeypatch)
    base = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", *TINY, *QUIET]
    assert main([*base, "--methods", "deep_ensemble", "-o", "loss=mse", "-o", "checkpoint=best"]) == 0
    assert calls == ["deep_ensemble(checkpoint=best, members=2, loss=mse)"]
    calls.clear()
    assert main([*base, "--methods", "dare", "-o", "loss=mse", "-o", "dare.delta=0.25",
                 "-o", "dare.checkpoint=last_below_threshold"]) == 0
    assert calls == ["dare(checkpoint=last_below_threshold, members=2, loss=mse, delta=0.25)"]  # not retrained
    by_method = {r["method"]: r for r in records(out).values()}
    de, dare = by_method["deep_ensemble"], by_method["dare"]
    assert dare["tau_reference_run_id"] == de["run_id"]
    assert de["val_task_loss"] == pytest.approx(np.mean([float(v) for v in de["member_val_loss"].split()]))
    assert dare["tau"] == pytest.approx(1.25 * de["val_task_loss"], rel=1e-12)
    # DARE checkpointed against that tau: each kept epoch is the last one with validation loss <= tau
    for m, kept in enumerate(int(e) for e in dare["kept_epochs"].split()):
        curve = [h["val_loss"] for h in dare["history"] if h["member"] == m]
        assert kept == max((e + 1 for e, v in enumerate(curve) if v <= dare["tau"]), default=0)


def test_a_reference_without_a_finite_validation_loss_cannot_give_tau():
    from methods.base import ReferenceFailed
    method = DARE(members=2, loss="mse", threshold=None, delta=0.25)
    for ref in ({"run_id": "r", "status": "ok", "val_task_loss": None},
                {"run_id": "r", "status": "ok", "val_task_loss": float("nan")}, {"run_id": "r", "status": "ok"}):
        with pytest.raises(ReferenceFailed, match="has no finite validation loss"):
            method.bind({"tau_reference": ref})
    with pytest.raises(ReferenceFailed, match="has no record"):
        method.bind({})
    bound, recorded = method.bind({"tau_reference": {"run_id": "r", "status": "ok", "val_task_loss": 2.0}})
    assert bound.threshold == recorded["tau"] == 2.5 and bound.checkpoint_threshold == 2.5


def test_dry_run_lists_the_reference_runs(tiny_data, tmp_path, capsys):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), "--seeds", "0", *TINY, *QUIET,
                 "--methods", "dare", "-o", "dare.delta=0.25", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "deep_ensemble(checkpoint=best, members=2, loss=ce) seed 0  (reference)" in lines[0]
    assert "dare(" in lines[1] and lines[-1] == "2 runs in the grid, 2 to do"


def test_a_grid_runs_the_reference_first_when_it_is_missing(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    calls = count_runs(monkeypatch)
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", *TINY, *QUIET,
                 "--methods", "dare", "-o", "dare.delta=0.25"]) == 0
    assert [c.split("(")[0] for c in calls] == ["deep_ensemble"] * 2 + ["dare"] * 2
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs["status"]) == {"ok"}
    dare = runs[runs["method"] == "dare"].set_index("seed")
    de = runs[runs["method"] == "deep_ensemble"].set_index("seed")
    np.testing.assert_allclose(dare["tau"], 1.25 * de["val_task_loss"])  # per seed: its own reference


def test_a_failed_reference_gives_a_recorded_error_and_the_grid_goes_on(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    # lr 1e30 makes every run diverge: the reference diverges, DARE cannot compute tau
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", *TINY, *QUIET,
                 "--lr", "1e30", "--methods", "dare", "mc_dropout", "-o", "dare.delta=0.25"]) == 1
    assert "1 of 3 runs failed (status error): dare(" in capsys.readouterr().err
    by_method = {r["method"]: r for r in records(out).values()}
    assert by_method["deep_ensemble"]["status"] == "diverged"
    assert by_method["dare"]["status"] == "error"
    assert "tau reference run" in by_method["dare"]["error"] and "'diverged'" in by_method["dare"]["error"]
    assert "mc_dropout" in by_method  # the rest of the grid went on
    summary = pd.read_csv(out / "summary.csv").set_index("method")
    assert summary.loc["dare", "n_error"] == 1 and summary.loc["dare", "n"] == 0


def test_the_paper_preset_reuses_its_de_mse_rows_as_dares_references():
    name, values = load_preset("paper-fmnist")
    everything = expand_grid(name, values, None, None, {}, [])
    configs = [c for c in everything if c.kind == "run"]
    selections = [c for c in everything if c.kind == "selection"]
    assert len(configs) == 60  # 12 plain rows x 5 seeds
    assert sorted(s.method for s in selections) == ["anchor_net"] * 5 + ["mod"] * 5 + ["negcorr"] * 5
    assert len(selections[0].candidates()) == 9 and selections[0].early_break == {"sigma": 10.0}
    assert {c.built_method.label for c in configs} == {"DE (NLL)", "DE (MSE)", "DARE", "MC dropout", "RDE",
                                                        "Single network", "BatchEnsemble", "Packed-Ensembles",
                                                        "MIMO", "MultiSWAG", "Laplace ensemble", "Snapshot ensemble"}
    ids = {c.run_id for c in configs}
    refs = [ref for c in configs for ref in c.references().values()]
    assert len(refs) == 5 and all(ref.run_id in ids for ref in refs)
    p = configs[0].protocol
    assert (p.preprocess, p.split_seed, p.init, p.adam_eps, p.hidden, p.batch_size, p.epochs, p.ood_sets) == (
        "raw255", "run", "glorot", 1e-7, (100, 100, 100), 128, 50, ("mnist", "cifar10_gray28"))


