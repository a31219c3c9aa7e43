"""`bench evaluate`: stored runs scored again from their weights, without retraining."""
import io
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from bench.cli.main import main
from bench.data import rendered, shifts

GRID = ["--seeds", "0", "1", "--epochs", "2", "--val-size", "50", "--hidden", "16", "--early-stop-acc", "none",
        "--lr", "0.005", "--no-download", "--no-plots", "-q", "-o", "members=2", "-o", "mc_dropout.passes=3",
        "--methods", "deep_ensemble", "dare", "mc_dropout", "batch_ensemble", "packed_ensemble", "anchor_net",
        "--select", "anchor_net.lam=0.1,1.0"]


@pytest.fixture(scope="module")
def stored(tiny_data, tmp_path_factory):
    """A folder of finished runs with weights (a selection among them), as `run --save-weights` leaves it."""
    out = tmp_path_factory.mktemp("stored") / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *GRID, "--save-weights"]) == 0
    return out


def _records(out):
    return {p.stem: json.loads(p.read_text()) for p in (out / "records").glob("*.json")}


def test_evaluate_reproduces_stored_metrics_exactly_and_adds_sets_and_shifts(stored, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(stored, out)
    before = _records(out)
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
                 "--ood-sets", "inverted,constant,cifar10_gray28", "--shifts", "rotation,stripe"]) == 0
    printed = capsys.readouterr().out
    after = _records(out)
    scored = [r for r in after.values() if "evaluation" in r]
    # every run but the candidates no selection chose; MC dropout too (its masks are re-seeded), and the
    # methods with their own models (BatchEnsemble, Packed-Ensembles)
    assert {r["method"] for r in scored} == {"deep_ensemble", "dare", "mc_dropout", "batch_ensemble", "packed_ensemble",
                                             "anchor_net"}
    for run_id, record in after.items():
        if "evaluation" not in record:
            continue
        assert record["evaluation"]["reproduced_stored_metrics"], record["variant"]
        old = before[run_id]
        for key, value in old.items():  # every stored metric is bit for bit the same
            if isinstance(value, float) and key not in ("eval_seconds",):
                assert record[key] == value or (value != value and record[key] != record[key]), (key, record["variant"])
        assert "auroc_pred_entropy_vs_inverted" in record and "fpr95_one_minus_max_prob_vs_constant" in record
        assert record["scored_ood_sets"] == "fashion_mnist inverted constant"
        assert "cifar10_gray28" in record["ood_skipped"]
        assert [(s["shift"], s["level"]) for s in record["shifts"]] == (
            [("rotation", float(d)) for d in range(15, 181, 15)] + [("stripe", 1.0)])
    assert "reproduced exactly for 12 of 12" in printed  # 10 runs and the 2 chosen candidates
    # a selection takes its chosen candidate's new metrics
    selection = next(r for r in after.values() if r["run_id"].startswith("sel-"))
    chosen = after[selection["selected_run_id"]]
    assert selection["auroc_pred_entropy_vs_inverted"] == chosen["auroc_pred_entropy_vs_inverted"]
    assert selection["shifts"] == chosen["shifts"]
    shift = pd.read_csv(out / "shift.csv")
    assert len(shift) == 13 * 14  # 10 runs, 2 selections and their 2 chosen candidates
    assert set(shift["family"]) == {"rotation", "mnist_c"} and shift["acc"].between(0, 1).all()
    summary = (out / "summary.md").read_text()
    assert "**OOD suite**" in summary and "near: fashion_mnist" in summary and "far: inverted" in summary
    assert "**Under shift**" in summary and "**Paired Δ under shift**" in summary
    for name in ("ood_suite.csv", "shift_summary.csv", "shift_table.csv", "shift_paired.csv"):
        assert (out / name).is_file(), name
    assert not list(out.glob("shift_*.png"))  # --no-plots: the tables only (test_shifts checks the figures)
    paired = pd.read_csv(out / "shift_paired.csv")
    assert set(paired["shift"]) == {"clean", "rotation", "stripe"}
    runs = pd.read_csv(out / "runs.csv")  # the added sets are columns of runs.csv; the shifts are not
    assert "auroc_pred_entropy_vs_inverted" in runs and not any(c.startswith("shift") for c in runs)


def test_evaluate_twice_gives_the_same_records_the_second_time_from_the_shift_cache(stored, tiny_data, tmp_path,
                                                                                     monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    shutil.copytree(stored, out)
    args = ["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
            "--ood-sets", "uniform_noise", "--shifts", "fog"]

    def records():
        found = _records(out)
        for record in found.values():
            record.pop("evaluation", None), record.pop("finished_at", None)
        return found
    assert main([*args, "--cache-dir", str(cache)]) == 0
    first = records()
    assert len(list(cache.glob("shift-fog-*.npz"))) == 5  # one entry per level, shared by every run
    with monkeypatch.context() as patch:  # the second call draws nothing
        patch.setattr(shifts, "_plasma_fractal", lambda *a, **k: pytest.fail("fog drawn again"))
        assert main([*args, "--cache-dir", str(cache)]) == 0
    assert records() == first
    assert main([*args, "--cache-dir", "none"]) == 0  # drawn afresh: the same
    assert records() == first
    rendered.letters.cache_clear()  # as in a new process: the letters go to --cache-dir's folder too
    session_cache = os.environ["DARE_BENCH_CACHE"]
    assert main([*args[:-4], "--ood-sets", "letters", "--shifts", "none", "--cache-dir", str(cache)]) == 0
    assert len(list(cache.glob("letters-10000-seed0-*.npz"))) == 1
    assert os.environ["DARE_BENCH_CACHE"] == session_cache  # as it was before the call


def test_a_run_without_weights_is_named_in_one_line(stored, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(stored, out)
    runs = pd.read_csv(out / "runs.csv")
    dare = runs[runs["method"] == "dare"].iloc[0]
    (out / "weights" / f"{dare['run_id']}.pt").unlink()
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
                 "--ood-sets", "none", "--shifts", "none"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "no stored weights" in line]
    assert len(lines) == 1 and f"seed {dare['seed']}" in lines[0] and "--save-weights" in lines[0]
    assert "evaluation" not in json.loads((out / "records" / f"{dare['run_id']}.json").read_text())


def test_evaluate_writes_damaged_scores_again_and_names_a_corrupt_record(stored, tiny_data, tmp_path, capsys):
    from test_resume import damage_a_member
    out = tmp_path / "out"
    shutil.copytree(stored, out)
    runs = pd.read_csv(out / "runs.csv")
    damaged = runs[runs["method"] == "dare"]["run_id"].iloc[0]
    selection = _records(out)[runs[runs["selected"].notna()]["run_id"].iloc[0]]
    broken = selection["selected_run_id"]  # the candidate a selection chose
    scores = out / "predictions" / f"{damaged}.npz"
    before = scores.read_bytes()
    for path in (out / "predictions").glob("*.npz"):  # every one: the folder's datasets still count
        damage_a_member(path)
    (out / "records" / f"{broken}.json").write_text("{")
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
                 "--ood-sets", "suite", "--shifts", "none"]) == 0
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith("warning:")] == [
        f"warning: record {out / 'records' / f'{broken}.json'} is corrupt (not valid JSON (a partial write?)); not scored",
        f"warning: {selection['variant']} seed {selection['seed']}: its chosen candidate has no readable record; "
        "not scored"]
    assert "no stored weights" not in printed  # the selection has weights: its candidate's record is what is wrong
    record = json.loads((out / "records" / f"{damaged}.json").read_text())
    assert record["evaluation"]["reproduced_stored_metrics"] and "auroc_pred_entropy_vs_inverted" in record
    with np.load(scores) as rewritten, np.load(io.BytesIO(before)) as original:
        assert all(np.array_equal(rewritten[k], original[k], equal_nan=True) for k in original.files)


def test_evaluate_without_any_weights_is_one_line_and_exit_2(stored, tmp_path, tiny_data, capsys):
    out = tmp_path / "out"
    shutil.copytree(stored, out, ignore=shutil.ignore_patterns("weights"))
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("dare-bench: error: no run in") and "--save-weights" in err[-1]


def test_an_added_set_does_not_depend_on_what_else_is_scored(stored, tiny_data, tmp_path):
    shifts_of = {}
    for name, args in (("alone", ["--ood-sets", "constant", "--shifts", "fog"]),
                       ("with_others", ["--ood-sets", "uniform_noise,constant", "--shifts", "zigzag,fog"])):
        out = tmp_path / name
        shutil.copytree(stored, out)
        assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q",
                     "--no-plots", *args]) == 0
        shifts_of[name] = {r["run_id"]: ({k: v for k, v in r.items() if k.endswith("_vs_constant")},
                                         [s for s in r["shifts"] if s["shift"] == "fog"])
                           for r in _records(out).values() if "evaluation" in r}
    # MC dropout included: its masks are per set; zigzag, scored before fog, draws from its own generator too
    assert shifts_of["alone"] == shifts_of["with_others"]


def test_evaluating_again_keeps_what_an_earlier_call_added(stored, tiny_data, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(stored, out)
    base = ["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots"]
    assert main([*base, "--ood-sets", "inverted", "--shifts", "stripe"]) == 0
    first = _records(out)
    assert main([*base, "--ood-sets", "constant", "--shifts", "zigzag"]) == 0
    for run_id, record in _records(out).items():
        if "evaluation" not in record:
            continue
        assert record["scored_ood_sets"] == "fashion_mnist inverted constant"
        assert record["auroc_pred_entropy_vs_inverted"] == first[run_id]["auroc_pred_entropy_vs_inverted"]
        assert [s["shift"] for s in record["shifts"]] == ["stripe", "zigzag"]
        assert record["shifts"][0] == first[run_id]["shifts"][0]
        import numpy as np
        with np.load(out / "predictions" / f"{record.get('selected_run_id', run_id)}.npz") as cached:
            assert "ood_inverted_pred_entropy" in cached and "ood_constant_pred_entropy" in cached


def test_unusable_weights_and_bad_input_are_one_line(stored, tiny_data, tmp_path, capsys):
    import bench
    from bench.errors import ConfigError
    out = tmp_path / "out"
    shutil.copytree(stored, out)
    runs = pd.read_csv(out / "runs.csv")
    run_id = runs.loc[runs["method"] == "deep_ensemble", "run_id"].iloc[0]
    (out / "weights" / f"{run_id}.pt").write_bytes(b"not a torch file")
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
                 "--ood-sets", "none", "--shifts", "none"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "cannot be scored" in line]
    assert len(lines) == 1 and "cannot be loaded (UnpicklingError)" in lines[0]
    with pytest.raises(ConfigError, match="shift seed -1"):
        bench.evaluate(out, data_dir=tiny_data, shift_seed=-1, progress=False)
    assert main(["evaluate", "--out", str(out), "--shift-seed", "x"]) == 2
    assert main(["evaluate", "--out", str(tmp_path / "nothing")]) == 2
    assert main(["evaluate", "--out", str(out), "--ood-sets", "mnist", "--data-dir", str(tiny_data)]) == 2
    assert "not known for in-distribution mnist" in capsys.readouterr().err


def test_lenet_runs_are_scored_again_from_their_weights(tiny_data, tmp_path, capsys):
    """`--arch lenet5`: run and ablate train LeNet-5 members, evaluate rebuilds them from their weights."""
    out = tmp_path / "out"
    grid = ["--seeds", "0", "--epochs", "1", "--val-size", "50", "--arch", "lenet5", "--early-stop-acc", "none",
            "--no-download", "--no-plots", "-q", "-o", "members=2", "-o", "mc_dropout.passes=2",
            "--methods", "deep_ensemble", "mc_dropout", "batch_ensemble", "laplace"]
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), *grid, "--save-weights"]) == 0
    before = _records(out)
    assert {r["config"]["protocol"]["arch"] for r in before.values()} == {"lenet5"}
    assert all("hidden" not in r["config"]["protocol"] for r in before.values())
    capsys.readouterr()
    assert main(["evaluate", "--out", str(out), "--data-dir", str(tiny_data), "--no-download", "-q", "--no-plots",
                 "--ood-sets", "inverted", "--shifts", "rotation"]) == 0
    assert "reproduced exactly for 4 of 4" in capsys.readouterr().out
    after = _records(out)
    for run_id, record in after.items():
        assert record["evaluation"]["reproduced_stored_metrics"], record["variant"]
        assert record["id_acc"] == before[run_id]["id_acc"] and record["id_nll_nats"] == before[run_id]["id_nll_nats"]
        assert "auroc_pred_entropy_vs_inverted" in record and len(record["shifts"]) == 12
    ablated = tmp_path / "ablated"
    assert main(["ablate", "--data-dir", str(tiny_data), "--out", str(ablated), "--seeds", "0", "--epochs", "1",
                 "--val-size", "50", "--arch", "lenet5", "--no-download", "--no-plots", "-q",
                 "--methods", "deep_ensemble", "-o", "members=1,2"]) == 0
    assert set(pd.read_csv(ablated / "runs.csv")["arch"]) == {"lenet5"}
