"""Selection on validation data: the walk, its early break, what is recorded, and bad input."""
import json
import shutil

import pandas as pd
import pytest

import bench
import bench.execution.executors as executors
from bench.cli.main import main
from bench.config import make_protocol
from bench.design.grid import expand_grid
from bench.design.walks import Selection, Walk

PROTOCOL = make_protocol({"val_size": 50})


def walk_of(scores, grid=(("lam", (0.0, 0.1, 1.0, 10.0)),), early_break=True, tests=None):
    """Feed a walk records with these validation NLLs (and these test accuracies); return it."""
    selection = Selection("anchor_net", {"members": 2}, grid, early_break, PROTOCOL, 0, "custom")
    walk = Walk(selection, selection.candidates())
    tests = tests or [0.5] * len(scores)
    for score, test_acc in zip(scores, tests):
        if walk.done:
            break
        walk.observe({"status": "ok", "val_nll_nats": score, "id_acc": test_acc})
    return walk


def test_the_walk_stops_at_the_first_value_worse_than_the_best_so_far():
    walk = walk_of([0.50, 0.40, 0.45, 0.10])
    assert walk.done and len(walk.scores) == 3  # the fourth value (0.10 would have won) is never trained
    assert walk.best == 1 and walk.scores[1]["lam"] == 0.1
    assert "early break at candidate 3" in walk.stopped
    full = walk_of([0.50, 0.40, 0.30, 0.20])
    assert full.best == 3 and full.stopped == "walked the whole grid"
    tie = walk_of([0.5, 0.4, 0.4, 0.6])  # a tie is not worse: the walk goes on, and the later value
    assert len(tie.scores) == 4 and tie.best == 2  # wins it, as in the paper's code (score <= best)


def test_the_choice_uses_validation_nll_never_test_metrics():
    walk = walk_of([0.50, 0.40, 0.60], tests=[0.99, 0.10, 0.99])  # the worst test accuracy has the best NLL
    assert walk.scores[walk.best]["lam"] == 0.1


def test_the_early_break_can_be_limited_to_some_option_values():
    # the paper's AnchorNet walk: sigma x lam, breaking only inside the sigma = 10 row
    grid = (("sigma", (0.1, 1.0, 10.0)), ("lam", (0.1, 1.0)))
    walk = walk_of([0.5, 0.9, 0.8, 0.3, 0.2, 0.25], grid=grid, early_break={"sigma": 10})
    assert len(walk.scores) == 6 and walk.best == 4  # worse values at sigma 0.1 and 1 did not stop it
    stop = walk_of([0.5, 0.9, 0.8, 0.3, 0.35, 0.2], grid=grid, early_break={"sigma": 10})
    assert len(stop.scores) == 5 and "early break at candidate 5" in stop.stopped  # (10, 0.1) is worse
    never = walk_of([0.5, 0.9, 0.1, 0.2], early_break=False)
    assert len(never.scores) == 4 and never.best == 2


def test_a_failed_candidate_counts_as_worse_and_no_finite_candidate_is_an_error():
    walk = walk_of([0.5])
    walk.observe({"status": "diverged"})
    assert walk.done and walk.best == 0
    nothing = Walk(walk.selection, walk.selection.candidates())
    for _ in range(4):
        nothing.observe({"status": "diverged"})
    assert nothing.best is None and nothing.record(None)["status"] == "error"


def test_select_end_to_end_records_every_candidate_and_the_choice(tiny_data, tmp_path, monkeypatch, capsys):
    real, trained = executors.run_pack, []
    monkeypatch.setattr(executors, "run_pack", lambda p, *a, **k: (trained.extend(c.run_id for c in p), real(p, *a, **k))[1])
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "mod", "--seeds", "0", "1",
            "--epochs", "2", "--val-size", "50", "-o", "members=2", "--select", "mod.lam=0,0.1,1,10,100",
            "--no-download", "--no-plots"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    records = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    selections = [r for r in records if "candidates" in r]
    assert len(selections) == 2 and all(r["status"] == "ok" for r in selections)
    for sel in selections:
        scores = [c["val_nll_nats"] for c in sel["candidates"]]
        best = max(i for i, score in enumerate(scores) if score == min(scores))  # a tie goes to the later
        assert sel["selected"] == f"lam={sel['candidates'][best]['lam']}"
        assert sel["selected_run_id"] == sel["candidates"][best]["run_id"]
        chosen = next(r for r in records if r["run_id"] == sel["selected_run_id"])
        assert sel["id_acc"] == chosen["id_acc"] and sel["auroc_pred_entropy_vs_fashion_mnist"] == \
            chosen["auroc_pred_entropy_vs_fashion_mnist"]  # the chosen run's metrics, copied
        # how the chosen run was made is its own: no pack; the selection's own code, worker and time
        assert not {"pack_id", "pack_runs", "pack_networks"} & set(sel)
        assert sel["harness_version"] == bench.__version__ and sel["worker"] and sel["finished_at"] >= chosen["finished_at"]
        assert all(sel["finished_at"] >= r["finished_at"] for r in records if r["run_id"] in
                   {c["run_id"] for c in sel["candidates"]})  # made once every candidate had finished
        if sel["walk"].startswith("early break"):  # the last candidate scored worse than the best before it
            assert len(scores) < 5 and scores[-1] > min(scores[:-1])
        else:
            assert sel["walk"] == "walked the whole grid" and len(scores) == 5
    assert len(trained) == sum(len(s["candidates"]) for s in selections)  # nothing past the break trained
    assert "select mod seed 0:" in printed and "selected (by seed)" in printed
    runs = pd.read_csv(out / "runs.csv")
    assert (runs["candidate_of"].fillna("") != "").sum() == len(trained)
    # the efficiency row counts the candidates' work once: a selection's record is a copy, not a run
    efficiency = pd.read_csv(out / "efficiency.csv").iloc[0]
    candidates = pd.DataFrame([r for r in records if "candidates" not in r])
    assert efficiency["runs"] == len(trained) == len(candidates)
    assert efficiency["train_tflop"] == pytest.approx(candidates["train_tflop"].sum())
    summary_md = (out / "summary.md").read_text()
    assert "select lam in [0.0, 0.1, 1.0, 10.0, 100.0]" in summary_md and "| mod(checkpoint=none, members=2, lam=" not in summary_md

    trained.clear()  # the same command again: every selection is finished, nothing trains
    assert main(args) == 0 and trained == []
    (out / "summary.md").unlink()
    assert main(["report", "--out", str(out), "--no-plots"]) == 0  # report, too, shows the selection rows
    assert "| mod(checkpoint=none, members=2, lam=" not in (out / "summary.md").read_text()

    copy = tmp_path / "copy"  # the records and tables alone: the selections' records still name their candidates
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("predictions", "selections"))
    assert main(["report", "--out", str(copy), "--no-plots"]) == 0
    for name in ("runs.csv", "paired.csv", "summary.md"):
        assert (copy / name).read_bytes() == (out / name).read_bytes(), name
    pd.testing.assert_frame_equal(pd.read_csv(copy / "summary.csv"), pd.read_csv(out / "summary.csv"),
                                  rtol=1e-8)  # its selective columns from selective.csv's 10 digits
    # a walk over candidates without predictions chooses again from their records, training nothing
    selection = sorted((copy / "records").glob("sel-*.json"))[0]
    chosen = json.loads(selection.read_text())["selected_run_id"]
    selection.unlink()
    (copy / "selective.csv").write_text((copy / "selective.csv").read_text().replace(selection.stem, "gone"))
    before = pd.read_csv(out / "runs.csv").set_index("run_id")
    (copy / "predictions").mkdir(exist_ok=True)  # an older choice's predictions, which the new choice must not keep
    shutil.copy(sorted((out / "predictions").glob("*.npz"))[0], copy / "predictions" / f"{selection.stem}.npz")
    trained.clear()
    assert main([*args[:args.index("--out") + 1], str(copy), *args[args.index("--out") + 2:]]) == 0 and trained == []
    assert json.loads(selection.read_text())["selected_run_id"] == chosen
    assert not (copy / "predictions" / f"{selection.stem}.npz").exists()
    # its selective metrics: the chosen run's rows of the last selective.csv (its own were gone)
    after = pd.read_csv(copy / "runs.csv").set_index("run_id")
    scored = [c for c in before if c.startswith(("id_acc", "auroc_", "augrc_", "aurc_", "smece_"))]
    assert any(c.startswith("augrc_") for c in scored)
    pd.testing.assert_frame_equal(after.loc[before.index, scored], before[scored], rtol=1e-8)


@pytest.mark.parametrize("args, message", [
    (["--methods", "mod", "--select", "mod.lam="], "--select 'mod.lam=': expected METHOD.NAME=VALUE[,VALUE...]\n"),
    (["--methods", "mod", "--select", "mod.lam=1", "--select", "mod.lam=2"],
     "--select 'mod.lam=2': mod.lam is given twice; give its values once, comma-separated"),
    (["--methods", "mod", "--select", "mod.lam=1e-3,0.1,0.001"], "select mod: the grid of 'lam' lists 0.001 twice"),
    (["--methods", "anchor_net", "--select", "anchor_net.lam=1,2", "--select", "anchor_net.early_break=maybe"],
     "early_break takes true, false or NAME=VALUE[,NAME=VALUE...]"),
    (["--methods", "anchor_net", "--select", "anchor_net.lam=1,2", "--select", "anchor_net.early_break=sigma="],
     "early_break takes true, false or NAME=VALUE[,NAME=VALUE...]"),
    (["--methods", "anchor_net", "--select", "anchor_net.early_break=false"], "select anchor_net: no option to select over"),
    (["--methods", "mod", "--select", "lam=1,2"], "--select 'lam=1,2': expected METHOD.NAME=VALUE"),
    (["--methods", "mod", "--select", "negcorr.lam=1,2"], "method 'negcorr' is not among the selected methods"),
    (["--methods", "mod", "--select", "mod.sigma=1,2"], "select mod: unknown option 'sigma'"),
    (["--methods", "mod", "--select", "mod.lam=-1,2"], "method mod: lam=-1.0 is out of range"),
    (["--methods", "mod", "--select", "mod.lam=a,b"], "select mod: lam=['a', 'b'] is not valid"),
    (["--methods", "mod", "-o", "mod.lam=1", "--select", "mod.lam=1,2"], "option 'lam' is both set (-o) and selected"),
    (["--methods", "mod", "--select", "mod.lam=1,2", "--val-size", "0"], "select mod: selection scores candidates on the validation split"),
])
def test_bad_select_input_is_one_line(args, message, tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--data-dir", str(tmp_path), "--no-download", "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_empty_grid_in_a_preset_is_an_error(tmp_path, capsys):
    preset = tmp_path / "p.toml"
    preset.write_text('methods = ["mod"]\n[select.mod]\nlam = []\n')
    assert main(["run", "--preset", str(preset), "--out", str(tmp_path), "--data-dir", str(tmp_path), "-q"]) == 2
    assert "the grid of 'lam' is empty; select needs at least one value" in capsys.readouterr().err
    preset.write_text('methods = ["anchor_net"]\n[select.anchor_net]\nlam = [1]\nearly_break = {sigma = 10}\n')
    assert main(["run", "--preset", str(preset), "--out", str(tmp_path), "--data-dir", str(tmp_path), "-q"]) == 2
    assert "early_break names 'sigma', which is not a selected option" in capsys.readouterr().err


def test_a_presets_select_table_applies_only_to_the_methods_run():
    from bench.config import load_preset
    name, values = load_preset("paper-fmnist")  # selects for anchor_net, mod and negcorr
    configs = expand_grid(name, values, ["deep_ensemble"], [0], {}, ["loss=ce"])
    assert [c.method for c in configs] == ["deep_ensemble"]


def test_a_preset_select_table_makes_one_selection_per_seed():
    values = {"methods": ["anchor_net"], "seeds": [0, 1],
              "select": {"anchor_net": {"sigma": [0.1, 1, 10], "lam": [0.1, 1, 10], "early_break": {"sigma": 10}}}}
    configs = expand_grid("custom", values, None, None, {}, [])
    assert len(configs) == 2 and all(isinstance(c, Selection) for c in configs)
    candidates = configs[0].candidates()
    assert [(c.method_options["sigma"], c.method_options["lam"]) for c in candidates][:4] == [
        (0.1, 0.1), (0.1, 1.0), (0.1, 10.0), (1.0, 0.1)]
    assert configs[0].run_id != configs[1].run_id and configs[0].run_id.startswith("sel-")


def test_command_line_options_combine_with_a_presets_select_tables(tmp_path, capsys):
    from bench.config import load_preset
    name, values = load_preset("paper-fmnist")
    fixed = expand_grid(name, values, ["mod"], [0], {}, ["mod.lam=1e-3"])  # -o fixes lam: no selection
    assert [type(c).__name__ for c in fixed] == ["RunConfig"] and fixed[0].method_options["lam"] == 1e-3
    replaced = expand_grid(name, values, ["anchor_net"], [0], {}, [], ["anchor_net.lam=0.5,5"])
    assert replaced[0].grid == (("lam", (0.5, 5.0)),) and replaced[0].early_break is True
    seed_name, seed_values = load_preset("seed")  # its dare has threshold = 0.3; --select delta replaces it
    dare = expand_grid(seed_name, seed_values, ["dare"], [0], {}, [], ["dare.delta=0.1,0.25"])[0]
    assert dare.fixed.get("threshold", "absent") in (None, "absent")
    assert all(c.method_options["threshold"] is None for c in dare.candidates())
    preset = tmp_path / "p.toml"
    preset.write_text('methods = ["anchor_net"]\n[select.anchor_net]\nsigma = [1, 10]\nearly_break = {sigma = 100}\n')
    assert main(["run", "--preset", str(preset), "--out", str(tmp_path), "--data-dir", str(tmp_path), "-q"]) == 2
    assert "early_break sigma=100 is not among the grid's values" in capsys.readouterr().err
    a = expand_grid("p", {"methods": ["anchor_net"], "select": {"anchor_net": {"sigma": [1, 10], "early_break": {"sigma": 10}}}}, None, [0], {}, [])
    b = expand_grid("p", {"methods": ["anchor_net"], "select": {"anchor_net": {"sigma": [1, 10], "early_break": {"sigma": 10.0}}}}, None, [0], {}, [])
    assert a[0].run_id == b[0].run_id  # 10 and 10.0 name the same selection


def test_an_interrupted_walk_resumes_without_retraining(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "mod", "--seeds", "0",
            "--epochs", "2", "--val-size", "50", "-o", "members=2", "--select", "mod.lam=0,0.1,1,10,100",
            "--no-download", "--no-plots", "-q"]
    assert main(args) == 0
    selection = next(out.glob("records/sel-*.json"))
    walked = len(json.loads(selection.read_text())["candidates"])
    selection.unlink()  # as if killed after the candidates finished, before the selection's record
    assert main(["report", "--out", str(out), "--no-plots"]) == 0  # an unfinished walk's candidates stay hidden
    assert "| mod(checkpoint=none, members=2, lam=" not in (out / "summary.md").read_text()
    real, trained = executors.run_pack, []
    monkeypatch.setattr(executors, "run_pack", lambda p, *a, **k: (trained.extend(c.run_id for c in p), real(p, *a, **k))[1])
    assert main(args) == 0
    assert trained == [] and len(json.loads(next(out.glob("records/sel-*.json")).read_text())["candidates"]) == walked
    assert main([*args, "--force"]) == 0
    assert len(trained) == walked and len(set(trained)) == walked  # --force: each candidate once


def test_dry_run_lists_the_references_a_selections_candidates_need(tmp_path, capsys):
    args = ["run", "--preset", "paper-fmnist", "--methods", "dare", "--seeds", "0", "--select", "dare.delta=0.1,0.25",
            "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path), "--dry-run"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    references = [line for line in lines if line.endswith("(reference)")]
    assert len(references) == 1 and "deep_ensemble(" in references[0] and "loss=mse" in references[0]
    assert any("(selection: up to 2 candidate runs)" in line for line in lines)
    assert lines[-1] == "1 run in the grid, 1 to do; 1 selection, 1 to do, of up to 2 candidate runs"  # the reference


def test_the_early_break_can_be_given_on_the_command_line_as_in_a_preset():
    from bench.config import load_preset
    name, values = load_preset("paper-fmnist")  # anchor_net: sigma x lam, early_break = {sigma = 10}
    from_preset = expand_grid(name, values, ["anchor_net"], [0], {}, [])[0]
    from_flags = expand_grid(name, values, ["anchor_net"], [0], {}, [], [
        "anchor_net.early_break=sigma=10", "anchor_net.sigma=0.1,1,10", "anchor_net.lam=0.1,1,10"])[0]
    assert from_flags.run_id == from_preset.run_id and from_flags.early_break == {"sigma": 10.0}
    never = expand_grid(name, values, ["anchor_net"], [0], {}, [], ["anchor_net.lam=1,2", "anchor_net.early_break=no"])[0]
    assert never.early_break is False and not any(never.breaks_at(c) for c in never.candidates())


def test_fixing_an_early_break_option_with_o_keeps_the_break_where_the_value_matches():
    from bench.config import load_preset
    name, values = load_preset("paper-fmnist")  # anchor_net: early_break = {sigma = 10}
    at_01 = expand_grid(name, values, ["anchor_net"], [0], {}, ["anchor_net.sigma=0.1"])[0]
    at_10 = expand_grid(name, values, ["anchor_net"], [0], {}, ["anchor_net.sigma=10"])[0]
    assert at_01.grid == (("lam", (0.1, 1.0, 10.0)),)
    assert {c.method_options["sigma"] for c in at_01.candidates()} == {0.1}
    assert not any(at_01.breaks_at(c) for c in at_01.candidates())  # the paper breaks only in the sigma = 10 row
    assert all(at_10.breaks_at(c) for c in at_10.candidates())
