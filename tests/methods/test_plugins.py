"""Methods from outside the package: a plugin file (--plugin) and an installed entry point."""
import textwrap

import pandas as pd
import pytest

import methods
from bench.cli.main import main
from bench.conformance import check_method
from bench.errors import ConfigError

PLUGIN = textwrap.dedent('''
    import dataclasses

    from bench.options import is_finite_nonneg, option, parse_float, parse_int
    from methods.base import Method


    @dataclasses.dataclass(frozen=True)
    class WeightDecayEnsemble(Method):
        name = "wd_ensemble"
        summary = "independent members with an L2 penalty on their weights"

        members: int = option(2, parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                              help="number of ensemble members")
        decay: float = option(1e-3, parse=parse_float, check=is_finite_nonneg, allowed="a finite number >= 0",
                              help="weight of the L2 penalty")

        def penalty(self, model, task_loss, batch):
            return self.decay * sum(p.square().flatten(1).sum(1) for p in model.parameters())
''')
TINY = ["--seeds", "0", "--epochs", "2", "--val-size", "50", "--early-stop-acc", "none", "--no-download",
        "--no-plots", "-q"]


@pytest.fixture(autouse=True)
def _clean(clean_registry):
    yield


@pytest.fixture
def plugin_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("elsewhere")  # outside the repository
    path = folder / "my_method.py"
    path.write_text(PLUGIN)
    return path


def test_a_plugin_file_runs_end_to_end_and_lands_in_runs_csv(plugin_file, tiny_data, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--plugin", str(plugin_file), "--methods", "wd_ensemble", "deep_ensemble",
                 "-o", "wd_ensemble.decay=0.01", "-o", "members=2", "--data-dir", str(tiny_data), "--out", str(out),
                 *TINY]) == 0
    runs = pd.read_csv(out / "runs.csv")
    row = runs[runs["method"] == "wd_ensemble"].iloc[0]
    assert row["status"] == "ok" and row["decay"] == 0.01 and row["members"] == 2
    # the penalty changed training: the same members without it end elsewhere
    de = runs[runs["method"] == "deep_ensemble"].iloc[0]
    assert row["param_abs_mean"] < de["param_abs_mean"]
    assert main(["list", "--plugin", str(plugin_file)]) == 0
    listing = capsys.readouterr().out
    assert f"wd_ensemble: independent members with an L2 penalty on their weights [from plugin {plugin_file}]" in listing
    assert "decay = 0.001" in listing
    # report needs no plugin: records carry everything
    assert main(["report", "--out", str(out), "--no-plots"]) == 0


@pytest.mark.slow  # several processes: the full suite runs it, CI's command does not (README, Tests)
def test_a_plugin_method_trains_in_worker_processes(plugin_file, tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--plugin", str(plugin_file), "--methods", "wd_ensemble", "--seeds", "0", "1",
                 "--jobs", "2", "--data-dir", str(tiny_data), "--out", str(out), *TINY[2:]]) == 0
    assert set(pd.read_csv(out / "runs.csv")["status"]) == {"ok"}


def test_an_installed_entry_point_registers_a_method(tmp_path, tiny_data, monkeypatch):
    site = tmp_path / "site"
    (site / "wd_pkg-0.1.dist-info").mkdir(parents=True)
    (site / "wd_pkg.py").write_text(PLUGIN)
    (site / "wd_pkg-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: wd-pkg\nVersion: 0.1\n")
    (site / "wd_pkg-0.1.dist-info" / "entry_points.txt").write_text(
        "[dare_bench.methods]\nwd_ensemble = wd_pkg:WeightDecayEnsemble\n")
    monkeypatch.syspath_prepend(str(site))
    methods._entry_points_loaded = False
    out = tmp_path / "out"
    assert main(["run", "--methods", "wd_ensemble", "--data-dir", str(tiny_data), "--out", str(out), *TINY]) == 0
    assert pd.read_csv(out / "runs.csv")["method"].tolist() == ["wd_ensemble"]
    assert methods.SOURCES["wd_ensemble"] == "entry point wd_ensemble = wd_pkg:WeightDecayEnsemble"


def test_a_plugin_method_passes_the_conformance_checks(plugin_file):
    (name,) = methods.load_plugin(plugin_file)
    check_method(methods.get_method(name))
    check_method(methods.get_method(name), arch="lenet5")  # written for the MLP, it trains LeNet-5 unchanged
    assert methods.load_plugin(plugin_file) == [name]  # loading a file twice is a no-op


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("raise RuntimeError('boom')\n", "failed to import: RuntimeError: boom"),
    ("import nonexistent_module_xyz\n", "failed to import: ModuleNotFoundError"),
    ("x = 1\n", "defines no method"),
    (PLUGIN.replace('"wd_ensemble"', '"dare"'), "method name 'dare' is already registered (built in)"),
    (PLUGIN.replace('"wd_ensemble"', '"my method"'), "must be a Python identifier"),
    (PLUGIN.replace('name = "wd_ensemble"', 'name = ""'), "WeightDecayEnsemble has an empty name"),
])
def test_bad_plugins_are_one_line_and_exit_2(content, message, tmp_path, capsys):
    path = tmp_path / "plugin.py"
    if content is not None:
        path.write_text(content)
    assert main(["list", "--plugin", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("dare-bench: error: plugin ")


def test_two_plugins_with_one_name_clash(plugin_file, tmp_path, capsys):
    other = tmp_path / "copy.py"
    other.write_text(PLUGIN)
    assert main(["list", "--plugin", str(plugin_file), "--plugin", str(other)]) == 2
    assert "method name 'wd_ensemble' is already registered (plugin " in capsys.readouterr().err


def test_an_empty_name_is_rejected():
    class Nameless(methods.Method):
        pass
    with pytest.raises(ConfigError, match="has an empty name"):
        methods.register(Nameless, "test")


def test_abbreviated_flags_are_refused_rather_than_ignored(plugin_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:  # --plug is not --plugin: argparse says so, exit 2
        main(["run", "--plug", str(plugin_file), "--methods", "wd_ensemble", "--dry-run"])
    assert info.value.code == 2 and "unrecognized arguments: --plug" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["run", "--preset"])
    assert info.value.code == 2 and "--preset: expected one argument" in capsys.readouterr().err
