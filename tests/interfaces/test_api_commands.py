"""What each command does, through bench.api alone: the calls a notebook makes instead of `list`,
`ablate`, `report`, `paper-table` and `perf`."""
import pandas as pd
import pytest

from bench import api
from bench.errors import ConfigError
from methods import REGISTRY

TINY = {"seeds": [0], "protocol": {"epochs": 1, "val_size": 50, "early_stop_acc": None}}


def test_catalog_lists_what_list_prints():
    listed = api.listing()
    assert [m.name for m in listed.methods] == list(REGISTRY)
    shared = {name for name, *_ in listed.shared_options}
    assert "checkpoint" in shared and all(not shared & {name for name, *_ in m.options} for m in listed.methods)
    assert listed.ood_sets["mnist"][0] == "fashion_mnist" and "seed" in listed.presets
    assert "rotation" in listed.shifts and "uniform_noise" in listed.ood_set_specs


def test_ablation_then_report_and_paper_table(tiny_data, tmp_path):
    out = tmp_path / "out"
    plan = api.plan("seed", {"methods": ["deep_ensemble", "dare"], "options": {"members": 2, "dare.threshold": [0.1, 0.3]},
                             **TINY}, out=out, data_dir=tiny_data)
    assert api.ablation_axes(plan) == ["threshold"]
    done = api.execute(plan, download=False, progress=False)
    assert (out / "ablation.csv") in api.ablation_report(plan, done, plots=False)
    api.report_grid(plan, done, plots=False, echo=lambda _: None)
    assert (out / "summary.md").is_file()

    (out / "records" / "broken.json").write_text("{")
    with pytest.warns(RuntimeWarning, match="broken.json"):
        reported = api.report(out, plots=False, bootstrap=20, echo=lambda _: None)
    assert reported.files[-1] == out / "bootstrap.csv"
    assert len(reported.bootstrap) == len(pd.read_csv(out / "bootstrap.csv")) > 0
    with pytest.raises(ConfigError, match="no preset of the runs in .* names a published table"):
        api.paper_table(out, echo=lambda _: None, warn=lambda _: None)  # runs of no preset: say which table
    with pytest.raises(ConfigError, match="no finished runs with in-distribution set 'fashion_mnist'"):
        api.paper_table(out, "dare_table3", in_distribution="fashion_mnist", echo=lambda _: None, warn=lambda _: None)


def test_star_dry_run_counts_each_setting(tiny_data, tmp_path):
    plan = api.plan("seed", {"methods": ["deep_ensemble"], "options": {"members": 2}, "design": "star",
                             "vary": ["epochs=2"], **TINY}, out=tmp_path, data_dir=tiny_data)
    settings = api.star_dry_run(plan)
    assert settings["is_base"].tolist() == [True, False] and settings["to_do"].tolist() == [1, 1]
    assert settings["shared"].tolist() == [0, 0] and (settings["reads"] == "").all()
    assert not (tmp_path / "records").exists()  # a dry run writes nothing


def test_bad_input_fails_before_any_work(tiny_data, tmp_path):
    plan = api.plan("seed", {"methods": ["dare"], **TINY}, out=tmp_path, data_dir=tiny_data)
    with pytest.raises(ConfigError, match="nothing to ablate"):
        api.ablation_axes(plan)
    with pytest.raises(ConfigError, match="expected integers >= 1"):
        api.perf(networks=[0, 2], data_dir=tmp_path / "no-data", out=tmp_path)
    with pytest.raises(ConfigError, match="unknown published table .no_such_table."):
        api.paper_table(tmp_path, published="no_such_table")
    assert all(hasattr(api, name) for name in api.__all__)
