"""The star design (bench.design.star): settings parsed and expanded with the base run once and shared,
bad knobs as one line, the dry run, and the whole ablate --design star on tiny data."""
import math

import numpy as np
import pandas as pd
import pytest

from bench import api
from bench.cli.main import main
from bench.errors import ConfigError
from bench.config import load_preset
from bench.design.star import Change, expand_star, parse_vary, preset_settings
from bench.reporting.star_tables import setting_summary, star_table

TINY = ["--methods", "dare", "deep_ensemble", "--seeds", "0", "1", "--epochs", "2", "--val-size", "50",
        "--early-stop-acc", "none", "--lr", "0.005", "-o", "members=2", "--no-download", "-q"]


def _expand(vary, methods=("dare", "deep_ensemble"), options=(), seeds=(0, 1)):
    name, values = load_preset("seed")
    settings = [s for text in vary for s in parse_vary(text)]
    return expand_star(name, values, list(methods), list(seeds), {}, list(options), (), settings)


def test_vary_gives_a_setting_per_value_or_one_compound_setting():
    settings = parse_vary("dare.delta=0.1,0.5")
    assert [s.name for s in settings] == ["dare.delta=0.1", "dare.delta=0.5"]
    assert {s.choice for s in settings} == {"delta"} and settings[0].changes[0] == Change("dare", "delta", "0.1")
    (both,) = parse_vary("epochs=50 early_stop_acc=none")
    assert both.changes == (Change(None, "epochs", "50"), Change(None, "early_stop_acc", "none"))
    assert both.choice == "epochs+early_stop_acc" and not both.is_base
    assert parse_vary("ood_score=mutual_info")[0].score == "mutual_info"
    with pytest.raises(ConfigError, match="one value of each"):
        parse_vary("epochs=10,20 members=3")
    with pytest.raises(ConfigError, match="expected"):
        parse_vary("epochs")


def test_preset_tables_give_settings():
    settings = preset_settings([{"preprocess": ["raw", "standardize"]}, {"hidden": [[100, 100]]},
                                {"choice": "long", "epochs": 50, "dare.checkpoint": "best"}])
    assert [s.name for s in settings] == ["preprocess=raw", "preprocess=standardize", "hidden=100-100",
                                          "epochs=50, dare.checkpoint=best"]
    assert settings[-1].choice == "long"
    (compound,) = preset_settings([{"hidden": [64, 64], "members": 3}])  # a list there is one value
    assert compound.name == "hidden=64-64, members=3"
    with pytest.raises(ConfigError, match="list of tables"):
        preset_settings({"epochs": 10})


def test_the_base_runs_once_and_is_shared():
    design = _expand(["dare.threshold=0.1", "epochs=3", "ood_score=mutual_info"])
    base = {i.run_id for i in design.items["base"]}
    assert len(base) == 4  # 2 methods x 2 seeds
    threshold = design.settings[1]
    # the threshold changes DARE only: the deep ensemble's runs are the base's own
    assert design.shared(threshold) == 2
    de = [i.run_id for i in design.items[threshold.name] if i.method == "deep_ensemble"]
    assert set(de) <= base
    assert design.shared(design.settings[2]) == 0                 # a protocol value changes every run
    assert {i.run_id for i in design.items["ood_score=mutual_info"]} == base   # a score trains nothing
    items = design.all_items()
    assert len(items) == len({i.run_id for i in items}) == 4 + 2 + 4
    frame = design.frame()
    assert frame.groupby("setting", sort=False).size().tolist() == [4, 4, 4, 4]
    assert frame.loc[frame["setting"] == "ood_score=mutual_info", "score"].eq("mutual_info").all()


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown knob 'foo'"):
        _expand(["foo=1"])
    with pytest.raises(ConfigError, match="unknown knob 'dare.dropout'"):
        _expand(["dare.dropout=0.1"])
    with pytest.raises(ConfigError, match="'mc_dropout' is not among the methods"):
        _expand(["mc_dropout.dropout=0.1"])
    with pytest.raises(ConfigError, match="is the base itself"):
        _expand(["members=3"])  # the seed preset's value
    with pytest.raises(ConfigError, match="setting 'epochs=0'.*epochs"):
        _expand(["epochs=0"])
    with pytest.raises(ConfigError, match="unknown score 'nope'"):
        _expand(["ood_score=nope"])
    with pytest.raises(ConfigError, match="is the base itself"):
        _expand(["ood_score=pred_entropy"])  # every method's own score here
    with pytest.raises(ConfigError, match="given twice"):
        _expand(["epochs=3", "epochs=3"])
    with pytest.raises(ConfigError, match="same runs and score as setting 'dare.threshold=0.5'"):
        _expand(["dare.threshold=0.5,0.50"])
    with pytest.raises(ConfigError, match="add it to the methods"):
        _expand(["epochs=3"], methods=("dare",))
    with pytest.raises(ConfigError, match="one configuration per method"):
        _expand(["epochs=3"], options=["dare.threshold=0.1,0.3"])
    with pytest.raises(ConfigError, match="needs settings"):
        _expand([])
    with pytest.raises(ConfigError, match="--vary needs --design star"):
        api.plan("seed", {"vary": ["epochs=3"]})


def test_run_on_a_star_preset_points_at_ablate(capsys):
    assert main(["run", "--preset", "sensitivity-seed", "--dry-run"]) == 2
    assert "is a star design: run it with `python -m bench ablate" in capsys.readouterr().err


def test_unknown_knob_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["ablate", "--preset", "seed", "--design", "star", "--vary", "nonsense=1", "--dry-run",
                 "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "unknown knob 'nonsense'" in err
    assert not (tmp_path / "x").exists()


def test_dry_run_lists_settings_and_their_runs(tmp_path, capsys):
    out = tmp_path / "star"
    assert main(["ablate", "--preset", "seed", "--design", "star", "--vary", "dare.delta=0.25",
                 "--vary", "epochs=3", "--out", str(out), "--dry-run", *TINY]) == 0
    text = capsys.readouterr().out
    assert "setting base [base]: 4 items, 4 to do" in text
    assert "setting dare.delta=0.25 [delta]: 4 items, 2 shared with the base" in text
    assert "setting epochs=3 [epochs]: 4 items, 0 shared with the base, 4 to do" in text
    assert "2 settings besides the base" in text
    # base 4, DARE with delta 2, its reference (the deep ensemble with checkpoint best) 2, epochs 4
    assert "12 runs in the grid, 12 to do" in text
    assert not out.exists()


def test_preset_star_designs_are_valid():
    for preset, settings in (("sensitivity-paper", 19), ("sensitivity-seed", 14)):
        plan = api.plan(preset)
        assert plan.star is not None and len(plan.star.settings) == settings + 1, preset
        assert plan.store.out.as_posix().endswith(f"results/sensitivity/{preset.split('-')[1]}")


def test_star_table_by_hand():
    # two settings, two seeds: AUROC values chosen so the paired differences are known
    def run(rid, method, seed, auroc, acc, kept="", epochs="", checkpoint="none"):
        return {"run_id": rid, "method": method, "label": method, "seed": seed, "status": "ok",
                "primary_score": "pred_entropy", "ood_sets": "x", "id_acc": acc, "id_nll_nats": 0.1,
                "id_ece": 0.01, "auroc_pred_entropy_vs_x": auroc, "auroc_mutual_info_vs_x": auroc - 0.1,
                "kept_epochs": kept, "epochs_run": epochs, "checkpoint": checkpoint}
    runs = pd.DataFrame([run("d0", "deep_ensemble", 0, 0.80, 0.90), run("d1", "deep_ensemble", 1, 0.82, 0.91),
                         run("a0", "dare", 0, 0.85, 0.89, "3 0", "5 5", "last_below_threshold"),
                         run("a1", "dare", 1, 0.89, 0.90, "5 2", "5 5", "last_below_threshold"),
                         run("e0", "dare", 0, 0.70, 0.88), run("e1", "dare", 1, 0.74, 0.88)])
    design = pd.DataFrame([
        {"order": 0, "setting": "base", "choice": "base", "is_base": True, "score": "", "method": m, "run_id": r}
        for m, r in (("deep_ensemble", "d0"), ("deep_ensemble", "d1"), ("dare", "a0"), ("dare", "a1"))] + [
        {"order": 1, "setting": "x=1", "choice": "x", "is_base": False, "score": "", "method": m, "run_id": r}
        for m, r in (("deep_ensemble", "d0"), ("deep_ensemble", "d1"), ("dare", "e0"), ("dare", "e1"))] + [
        {"order": 2, "setting": "ood_score=mutual_info", "choice": "ood_score", "is_base": False,
         "score": "mutual_info", "method": m, "run_id": r}
        for m, r in (("deep_ensemble", "d0"), ("deep_ensemble", "d1"), ("dare", "a0"), ("dare", "a1"))])
    table = star_table(design, runs)
    paired = table[(table["kind"] == "paired") & (table["metric"] == "auroc")].set_index("setting")
    assert math.isclose(paired.loc["base", "mean"], 0.06) and paired.loc["base", "n"] == 2
    half = 12.706204736174707 * np.std([0.05, 0.07], ddof=1) / math.sqrt(2)  # t(0.975, 1)
    assert math.isclose(paired.loc["base", "low"], 0.06 - half, rel_tol=1e-9)
    assert math.isclose(paired.loc["x=1", "mean"], -0.09)
    assert math.isclose(paired.loc["ood_score=mutual_info", "mean"], 0.06)  # both shifted by 0.1
    assert paired.loc["ood_score=mutual_info", "score"] == "mutual_info"
    kept = table[(table["kind"] == "checkpoint") & (table["setting"] == "base")].set_index("metric")
    assert kept.loc["members_checkpoint_kept", "total"] == 3 and kept.loc["members_checkpoint_kept", "out_of"] == 4
    assert kept.loc["members_restored_earlier", "total"] == 2  # epochs 3 and 2 of 5; 5 of 5 is the last
    assert table[(table["kind"] == "checkpoint") & (table["setting"] == "x=1")].empty  # no rule: no counts
    summary = setting_summary(table).set_index("setting")
    assert math.isclose(summary.loc["x=1", "dare_moved"], 0.72 - 0.87)
    assert summary.loc["x=1", "same_sign_as_base"] == False  # noqa: E712 - numpy bool
    assert math.isclose(summary.loc["base", "acc_difference"], -0.01)
    assert summary.loc["base", "checkpoint_kept"] == "3/4"
    assert math.isclose(summary.loc["ood_score=mutual_info", "deep_ensemble_pred_entropy_auroc"], 0.81)
    assert summary["first_set"].all()


def test_ablate_star_end_to_end(tiny_data, tmp_path, capsys):
    out = tmp_path / "star"
    args = ["ablate", "--preset", "seed", "--design", "star", "--vary", "dare.threshold=0.5", "--vary", "epochs=3",
            "--vary", "ood_score=mutual_info", "--data-dir", str(tiny_data), "--out", str(out), *TINY]
    assert main(args) == 0
    assert len(list((out / "records").glob("*.json"))) == 4 + 2 + 4  # the base once, shared
    table = pd.read_csv(out / "star.csv")
    paired = table[(table["kind"] == "paired") & (table["metric"] == "auroc")]
    assert list(paired["setting"]) == ["base", "dare.threshold=0.5", "epochs=3", "ood_score=mutual_info"]
    assert set(paired["n"]) == {2} and paired["low"].notna().all()
    assert (out / "star_forest.png").stat().st_size > 0
    assert "### dare − deep_ensemble: AUROC vs each setting's first OOD set" in (out / "star.md").read_text()
    assert not list(out.glob("comparison*.png"))  # the folder's report: tables only
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["status"]) == {"ok"} and "auroc_geo_mean_entropy_vs_fashion_mnist" in runs
    # again: nothing trains, the tables come back the same
    assert main(args) == 0
    assert "10 of 10 runs already finished" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_csv(out / "star.csv"), table)
    assert api.star_table(out).shape[0] == len(table)
