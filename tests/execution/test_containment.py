"""A failing method is contained, never fatal, never silent: hook signatures checked at
registration, exceptions and broken predictions recorded as status error while the grid goes on,
rules checked before training, and re-rendering that rewrites no byte."""
import hashlib
import json
import re
import textwrap

import numpy as np
import pandas as pd
import pytest

import methods
from bench.cli.main import main
from bench.errors import ConfigError
from bench.evaluation.columns import ood_table
from bench.evaluation.contract import InvalidPredictions, check_own_scores, check_probabilities
from bench.evaluation.columns import ood_column, read_ood_column
from methods.base import Method

TINY = ["--seeds", "0", "--epochs", "1", "--val-size", "50", "--no-download", "--no-plots", "-q"]
HEADER = '''
    import dataclasses

    from bench.options import option, parse_int
    from methods.base import Method


    @dataclasses.dataclass(frozen=True)
    class Broken(Method):
        name = "broken"
        summary = "a method with a bug"
        members: int = option(2, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1", help="members")
'''


@pytest.fixture(autouse=True)
def _clean(clean_registry):
    yield


def plugin(tmp_path, body: str):
    path = tmp_path / "broken.py"
    path.write_text(textwrap.dedent(HEADER) + textwrap.indent(textwrap.dedent(body), "    "))
    return str(path)


def test_a_hook_with_the_older_signature_is_refused_at_registration_with_one_line(tmp_path, capsys):
    path = plugin(tmp_path, '''
        def penalty(self, model, task_loss):
            return None
    ''')
    assert main(["list", "--plugin", path]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.endswith("Broken.penalty(self, model, task_loss) does not match the method API: expected "
                        "penalty(self, model, task_loss, batch)")
    assert "broken" not in methods.REGISTRY


def test_hook_checks_accept_compatible_overrides_and_refuse_a_property_turned_function():
    class Fine(Method):
        name = "fine"
        summary = "overrides with compatible signatures"
        label = "a plain value for a property"

        def penalty(self, model, task_loss, batch, extra=None):  # an extra defaulted parameter is fine
            return None

        def logits(self, model, x, dropout=False):
            return None

    assert methods.hook_problem(Fine, "penalty") is None and methods.hook_problem(Fine, "label") is None
    assert methods.hook_problem(Fine, "logits") is None

    class NoDropout(Method):
        def logits(self, model, x):  # the harness passes dropout= by name
            return None

    class FunctionNotProperty(Method):
        def n_networks(self):
            return 2

    assert "expected logits(self, model, x, dropout=False)" in methods.hook_problem(NoDropout, "logits")
    assert "must be a property" in methods.hook_problem(FunctionNotProperty, "n_networks")
    with pytest.raises(ConfigError, match="n_networks must be a property"):
        methods.register(FunctionNotProperty, "test")


def test_every_builtin_passes_the_hook_checks():
    assert methods.HOOKS and {"penalty", "predict_proba", "check_protocol", "n_networks"} <= set(methods.HOOKS)
    for cls in methods.REGISTRY.values():
        assert [methods.hook_problem(cls, hook) for hook in methods.HOOKS] == [None] * len(methods.HOOKS)


def test_a_method_that_raises_is_recorded_as_error_and_the_grid_goes_on(tiny_data, tmp_path, capsys):
    path = plugin(tmp_path, '''
        def penalty(self, model, task_loss, batch):
            raise ZeroDivisionError("a bug in the plugin")
    ''')
    out = tmp_path / "out"
    args = ["run", "--plugin", path, "--data-dir", str(tiny_data), "--out", str(out), "--methods",
            "deep_ensemble", "broken", "single_network", *TINY]
    assert main(args) == 1  # the grid finished; one run failed
    err = capsys.readouterr().err
    assert "1 of 3 runs failed (status error): broken(checkpoint=none, members=2) seed 0: training: " \
           "ZeroDivisionError: a bug in the plugin" in err
    runs = pd.read_csv(out / "runs.csv")
    assert dict(zip(runs["method"], runs["status"])) == {"broken": "error", "deep_ensemble": "ok",
                                                          "single_network": "ok"}
    failed = runs[runs["status"] == "error"].iloc[0]
    assert failed["error"] == "training: ZeroDivisionError: a bug in the plugin"
    assert pd.isna(failed["id_acc"]) and "traceback" not in runs  # no number, and the traceback stays in the record
    record = json.loads((out / "records" / f"{failed['run_id']}.json").read_text())
    assert "ZeroDivisionError: a bug in the plugin" in record["traceback"] and "in penalty" in record["traceback"]
    summary = pd.read_csv(out / "summary.csv")
    assert summary.loc[summary["method"] == "broken", ["n", "n_error"]].values.tolist() == [[0, 1]]

    # the same command runs the failed run again (the method may have been fixed) and reuses the others
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    assert main(args) == 1
    out_text = capsys.readouterr()
    assert "ended in error last time" in out_text.out + out_text.err
    again = {p.name: p.stat().st_mtime_ns for p in (out / "records").glob("*.json")}
    assert [n for n in stamps if again[n] != stamps[n]] == [f"{failed['run_id']}.json"]


def test_logits_returned_as_probabilities_are_an_error_and_no_metric(tiny_data, tmp_path, capsys):
    path = plugin(tmp_path, '''
        def predict_proba(self, model, x):
            return self.logits(model, x)
    ''')
    out = tmp_path / "out"
    assert main(["run", "--plugin", path, "--data-dir", str(tiny_data), "--out", str(out), "--methods", "broken",
                 *TINY]) == 1
    runs = pd.read_csv(out / "runs.csv")
    assert runs["status"].tolist() == ["error"]
    assert runs["error"][0].startswith("invalid predictions from predict on the test split: values outside [0, 1]")
    assert not [c for c in runs.columns if c.startswith(("id_acc", "id_nll", "auroc_", "val_nll"))]
    assert len(pd.read_csv(out / "ood.csv")) == 0
    assert "| broken(checkpoint=none, members=2) | 0 (+1 error) | pred_entropy | - |" in (out / "summary.md").read_text()


def test_packed_ensemble_gamma_that_does_not_divide_the_classes_is_refused_by_dry_run(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble",
                 "packed_ensemble", "-o", "packed_ensemble.gamma=1,3", "--dry-run", *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("dare-bench: error: method packed_ensemble: gamma=3 must divide the 10 classes "
                   "(the output layer is split into gamma groups too)")
    assert not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--methods", "deep_ensemble", "-o", "checkpoint=best", "--val-size", "0"],
     "method deep_ensemble: checkpoint=best needs a validation split; set val_size > 0"),
    (["--methods", "dare", "-o", "dare.delta=0.25", "-o", "loss=mse", "--val-size", "0"],
     "method dare: delta=0.25 sets tau from the reference's validation loss; set val_size > 0"),
])
def test_methods_check_themselves_against_the_protocol_before_training(args, message, tiny_data, tmp_path, capsys):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path / "out"), "--dry-run", *args]) == 2
    assert capsys.readouterr().err.strip() == f"dare-bench: error: {message}"


def test_re_rendering_unchanged_records_rewrites_no_byte(tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    grid = ["--data-dir", str(tiny_data), "--out", str(out), "--seeds", "0", "1", "--epochs", "1", "--val-size",
            "50", "--no-download", "-q", "-o", "members=2", "-o", "mc_dropout.passes=2"]
    assert main(["run", "--methods", "mc_dropout", "deep_ensemble", *grid]) == 0

    def digests():
        return {p.relative_to(out).as_posix(): hashlib.sha1(p.read_bytes()).hexdigest()
                for p in out.rglob("*") if p.is_file()}

    first = digests()
    assert {"summary.md", "runs.csv", "summary.csv", "ood.csv", "comparison.png", "roc_curves.png"} <= set(first)
    # the grid in another order (its tables), then the report command: the same files, byte for byte
    assert main(["run", "--methods", "deep_ensemble", "mc_dropout", *grid, "--no-plots"]) == 0
    assert digests() == first
    assert main(["report", "--out", str(out)]) == 0
    assert digests() == first


def test_predictions_are_checked_against_the_contract():
    good = np.full((2, 3, 4), 0.25)
    check_probabilities(good, 3, 4)
    check_own_scores({"s": np.zeros(3)}, 3)
    bad = [(good[0], "shape (3, 4), expected (samples, 3, 4)"),
           (np.full((2, 3, 5), 0.2), "shape (2, 3, 5), expected (samples, 3, 4)"),
           (np.where(np.eye(4)[None, :3] > 0, np.nan, 0.25), "3 non-finite values"),
           (np.concatenate([good[:, :, :2] + 0.5, good[:, :, 2:] - 0.5], axis=2), "values outside [0, 1]"),
           (good * 0.9996, "rows do not sum to 1 over classes (off by up to 0.0004, tolerance 0.0001)"),
           (good.tolist(), "a list, not a numpy array")]
    for probs, reason in bad:
        with pytest.raises(InvalidPredictions, match=re.escape(reason)):
            check_probabilities(probs, 3, 4)
    check_probabilities(good * 0.99995 + 0.0000125, 3, 4)  # within 1e-4 of 1 is a distribution
    for scores, reason in [({"s": np.zeros(4)}, r"s has shape \(4,\), expected \(3,\)"),
                           ({"s": np.array([0.0, np.inf, 1.0])}, "s has 1 non-finite values"),
                           ([np.zeros(3)], "not a dict")]:
        with pytest.raises(InvalidPredictions, match=reason):
            check_own_scores(scores, 3)


def test_metric_column_names_are_made_and_read_in_one_place():
    for metric, score, ood_set in [("auroc", "pred_entropy", "fashion_mnist"),
                                   ("aupr_in", "one_minus_max_prob", "cifar10_gray28"),
                                   ("aupr_out", "eq35_distance", "mnist"), ("fpr95", "mutual_info", "mnist")]:
        assert read_ood_column(ood_column(metric, score, ood_set)) == (metric, score, ood_set)
    for other in ("id_acc", "ood_mnist_pred_entropy_bits", "auroc_vs_mnist", "speedup_vs_seed_loop", "aupr_x"):
        assert read_ood_column(other) is None
    runs = pd.DataFrame({"run_id": ["a", "b"], "method": ["m", "m"], "variant": ["v", "v"], "seed": [0, 1],
                         "id_acc": [0.9, 0.8], ood_column("auroc", "s", "x"): [0.7, 0.6],
                         ood_column("fpr95", "s", "x"): [0.5, np.nan], ood_column("auroc", "t", "y"): [0.1, 0.2]})
    table = ood_table(runs)
    assert table.columns.tolist() == ["run_id", "method", "variant", "seed", "candidate_of", "score", "ood_set",
                                      "auroc", "fpr95"]
    assert table[["run_id", "score", "ood_set"]].values.tolist() == [["a", "s", "x"], ["a", "t", "y"],
                                                                      ["b", "s", "x"], ["b", "t", "y"]]
    assert table["auroc"].tolist() == [0.7, 0.1, 0.6, 0.2]
    assert table["fpr95"].fillna(-1).tolist() == [0.5, -1, -1, -1]


def test_a_selection_candidate_that_raises_is_named_and_the_walk_goes_on(tiny_data, tmp_path, capsys):
    path = plugin(tmp_path, '''
        boom: int = option(0, parse=parse_int, check=lambda v: v >= 0, allowed="an integer >= 0", help="1 raises")

        def penalty(self, model, task_loss, batch):
            if self.boom == 1:
                raise RuntimeError("boom")
            return None
    ''')
    out = tmp_path / "out"
    assert main(["run", "--plugin", path, "--data-dir", str(tiny_data), "--out", str(out), "--methods", "broken",
                 "--select", "broken.boom=0,1", "--select", "broken.early_break=false", *TINY]) == 1
    assert ("1 of 3 runs failed (status error): broken(checkpoint=none, members=2, boom=1) seed 0: training: "
            "RuntimeError: boom") in capsys.readouterr().err
    runs = pd.read_csv(out / "runs.csv")
    selection = runs[runs["run_id"].str.startswith("sel-")].iloc[0]
    assert selection["status"] == "ok" and selection["selected"] == "boom=0"  # the failed candidate has no score


def test_a_selection_that_met_a_failed_candidate_is_walked_again(tiny_data, tmp_path, capsys):
    body = '''
        boom: int = option(0, parse=parse_int, check=lambda v: v >= 0, allowed="an integer >= 0", help="1 raises")

        def penalty(self, model, task_loss, batch):
            if self.boom == {broken}:
                raise RuntimeError("boom")
            return None
    '''
    out = tmp_path / "out"
    args = ["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "broken",
            "--select", "broken.boom=0,1", "--select", "broken.early_break=false", *TINY]
    assert main([args[0], "--plugin", plugin(tmp_path, body.replace("{broken}", "1")), *args[1:]]) == 1
    capsys.readouterr()
    selection = json.loads(next((out / "records").glob("sel-*.json")).read_text())
    assert selection["failed_candidates"] == 1 and selection["selected"] == "boom=0"
    # the method is fixed: the same command walks the selection again and the failed candidate now counts
    methods.REGISTRY.pop("broken")
    methods._plugin_files.clear()
    assert main([args[0], "--plugin", plugin(tmp_path, body.replace("{broken}", "2")), *args[1:]]) == 0
    assert "met 1 failed candidate runs last time; it is walked again" in "".join(capsys.readouterr())
    selection = json.loads(next((out / "records").glob("sel-*.json")).read_text())
    assert selection["failed_candidates"] == 0 and [c["status"] for c in selection["candidates"]] == ["ok", "ok"]


def test_non_finite_predictions_are_a_divergence_not_an_error(tiny_data, tmp_path, capsys):
    path = plugin(tmp_path, '''
        def predict_proba(self, model, x):
            return super().predict_proba(model, x) * float("nan")
    ''')
    out = tmp_path / "out"
    assert main(["run", "--plugin", path, "--data-dir", str(tiny_data), "--out", str(out), "--methods", "broken",
                 *TINY]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs[["status", "diverged_epoch"]].values.tolist() == [["diverged", 1]]
    assert runs["diverged_reason"][0] == "predict on the test split: 2000 non-finite values"
    assert not [c for c in runs.columns if c.startswith(("id_acc", "auroc_"))]


def test_a_run_without_a_validation_split_is_checked_and_ok(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "deep_ensemble",
                 "--seeds", "0", "--epochs", "1", "--val-size", "0", "--no-download", "--no-plots", "-q"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs["status"].tolist() == ["ok"] and "val_nll_nats" not in runs


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_a_raising_method_in_worker_processes_is_recorded_with_its_traceback(tiny_data, tmp_path, capsys):
    path = plugin(tmp_path, '''
        def penalty(self, model, task_loss, batch):
            raise ZeroDivisionError("a bug in the plugin")
    ''')
    out = tmp_path / "out"
    assert main(["run", "--plugin", path, "--data-dir", str(tiny_data), "--out", str(out), "--methods",
                 "broken", "deep_ensemble", "--jobs", "2", *TINY]) == 1
    records = [json.loads(p.read_text()) for p in (out / "records").glob("*.json")]
    assert sorted(r["status"] for r in records) == ["error", "ok"]
    assert "ZeroDivisionError: a bug in the plugin" in next(r["traceback"] for r in records if r["status"] == "error")


def test_a_bug_in_a_methods_own_checks_is_one_line(tmp_path, capsys):
    path = plugin(tmp_path, '''
        def check_protocol(self, protocol, what):
            return protocol.no_such_value
    ''')
    assert main(["run", "--plugin", path, "--methods", "broken", "--dry-run", "-q"]) == 2
    assert capsys.readouterr().err == ("dare-bench: error: method broken: checking its options raised "
                                       "AttributeError: 'Protocol' object has no attribute 'no_such_value'\n")


def test_a_static_hook_is_checked_without_self():
    class Static(Method):
        @staticmethod
        def penalty(model, task_loss, batch):
            return None

    class StaticTooFew(Method):
        @staticmethod
        def penalty(model, task_loss):
            return None

    assert methods.hook_problem(Static, "penalty") is None
    assert "StaticTooFew.penalty(model, task_loss) does not match" in methods.hook_problem(StaticTooFew, "penalty")


def test_a_broken_entry_point_stops_only_the_commands_that_use_it(tmp_path, tiny_data, monkeypatch, capsys):
    site = tmp_path / "site"
    (site / "pkg-0.1.dist-info").mkdir(parents=True)
    (site / "bad_pkg.py").write_text(textwrap.dedent(HEADER) + textwrap.indent(textwrap.dedent('''
        def penalty(self, model, task_loss):
            return None
    '''), "    "))
    (site / "pkg-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 0.1\n")
    (site / "pkg-0.1.dist-info" / "entry_points.txt").write_text("[dare_bench.methods]\nbroken = bad_pkg:Broken\n")
    monkeypatch.syspath_prepend(str(site))
    methods._entry_points_loaded = False
    assert main(["run", "--methods", "deep_ensemble", "--dry-run", "--data-dir", str(tiny_data), "-q"]) == 0
    assert main(["list"]) == 0
    assert "broken: not loadable: entry point broken = bad_pkg:Broken: Broken.penalty(self, model, task_loss) " \
           "does not match the method API" in capsys.readouterr().out
    assert main(["run", "--methods", "broken", "--dry-run", "-q"]) == 2
    assert capsys.readouterr().err == ("dare-bench: error: entry point broken = bad_pkg:Broken: Broken.penalty(self, "
                                       "model, task_loss) does not match the method API: expected "
                                       "penalty(self, model, task_loss, batch)\n")


def test_the_api_warns_about_failed_runs(tiny_data, tmp_path):
    import bench
    path = plugin(tmp_path, '''
        def penalty(self, model, task_loss, batch):
            raise ZeroDivisionError("a bug in the plugin")
    ''')
    with pytest.warns(RuntimeWarning, match="1 of 1 runs failed .*: broken.* seed 0: training: ZeroDivisionError"):
        runs = bench.run({"methods": ["broken"], "seeds": [0], "protocol": {"epochs": 1, "val_size": 50}},
                         plugins=[path], data_dir=tiny_data, out=tmp_path / "out", execution={"progress": False})
    assert runs["status"].tolist() == ["error"]
