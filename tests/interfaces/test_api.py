"""The Python API (bench.run / load / summary / ablation_table): same validation, store and resume as the CLI."""
import pandas as pd
import pytest

import bench
from bench import api
from bench.execution import executors
from bench.errors import BenchError, ConfigError

PROTOCOL = {"epochs": 2, "val_size": 50, "early_stop_acc": None}
QUIET = {"progress": False, "download": False}


def grid(methods, seeds=(0, 1), **more):
    """A tiny grid: 2 epochs, 50 validation images, no early stop."""
    return {"methods": methods, "seeds": list(seeds), "protocol": PROTOCOL, **more}


def test_run_returns_the_grid_as_a_dataframe_and_resumes(tiny_data, tmp_path, monkeypatch):
    out = tmp_path / "out"
    runs = bench.run(grid(["deep_ensemble", "dare"], options={"members": 2, "dare.threshold": [0.1, 0.5]}), out=out,
                     data_dir=tiny_data, execution=QUIET)
    assert isinstance(runs, pd.DataFrame) and len(runs) == 6 and set(runs["status"]) == {"ok"}
    assert sorted(runs.loc[runs["method"] == "dare", "threshold"].unique()) == [0.1, 0.5]
    assert set(runs["members"]) == {2} and set(runs["epochs"]) == {2}
    # the same call again reuses every record: nothing trains
    monkeypatch.setattr(executors, "run_pack", lambda *a, **k: pytest.fail("retrained a finished run"))
    again = bench.run(grid(["deep_ensemble", "dare"], options=["members=2", "dare.threshold=0.1,0.5"]), out=out,
                      data_dir=tiny_data, execution=QUIET)
    assert again["run_id"].tolist() == runs["run_id"].tolist()
    assert again["id_acc"].tolist() == runs["id_acc"].tolist()

    loaded = bench.load(out)
    assert set(loaded["run_id"]) == set(runs["run_id"])
    summary = bench.summary(out)
    assert len(summary) == 3 and set(summary["n"]) == {2}
    dare = summary[(summary["method"] == "dare") & (summary["threshold"] == 0.1)].iloc[0]
    assert dare["id_acc_mean"] == pytest.approx(runs[(runs["method"] == "dare") & (runs["threshold"] == 0.1)]["id_acc"].mean())
    tidy = bench.ablation_table(out)
    assert {"threshold", "metric", "mean", "std", "n"} <= set(tidy.columns)


def test_bad_input_raises_the_cli_s_error(tiny_data, tmp_path):
    with pytest.raises(ConfigError, match="no selected method has an option 'lam'"):
        bench.run(grid(["dare"], options={"lam": 1}), out=tmp_path, data_dir=tiny_data, execution=QUIET)
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        bench.run(["nope"], out=tmp_path, data_dir=tiny_data, execution=QUIET)  # a list: the methods
    with pytest.raises(ConfigError, match="epochs=0 is out of range"):
        bench.run({**grid(["dare"]), "protocol": {"epochs": 0}}, out=tmp_path, data_dir=tiny_data, execution=QUIET)
    with pytest.raises(ConfigError, match=r"grid: unknown key 'seed' \(allowed: methods, seeds, protocol"):
        bench.run({"methods": ["dare"], "seed": [0]}, out=tmp_path, data_dir=tiny_data, execution=QUIET)
    with pytest.raises(ConfigError, match=r"execution: unknown key 'job' \(allowed: claim_timeout, dask_address, device, jobs"):
        bench.run(grid(["dare"]), out=tmp_path, data_dir=tiny_data, execution={"job": 2})
    with pytest.raises(BenchError, match="no records in"):
        bench.load(tmp_path / "empty")


def test_run_with_plots_writes_the_report(tiny_data, tmp_path):
    out = tmp_path / "out"
    bench.run(grid(["deep_ensemble"], seeds=[0], options={"members": 2}), out=out, data_dir=tiny_data, plots=True,
              execution=QUIET)
    assert (out / "comparison.png").is_file() and (out / "summary.md").is_file()


def test_plan_dry_run_force_and_plugins(tiny_data, tmp_path, clean_registry):
    from bench import api
    plugin = tmp_path / "plugin_dir" / "tiny_method.py"
    plugin.parent.mkdir()
    plugin.write_text("import dataclasses\nfrom methods.deep_ensemble import DeepEnsemble\n\n\n"
                      "@dataclasses.dataclass(frozen=True)\nclass Tiny(DeepEnsemble):\n    name = 'tiny'\n"
                      "    summary = 'a deep ensemble under another name'\n")
    out = tmp_path / "out"
    plan = api.plan("seed", grid(["tiny"], seeds=[0], options={"members": 2}), out=out, data_dir=tiny_data,
                    plugins=[plugin])
    listed = api.dry_run(plan)
    assert listed[["role", "finished"]].values.tolist() == [["run", False]]
    first = bench.run(grid(["tiny"], seeds=[0], options={"members": 2}), out=out, data_dir=tiny_data,
                      plugins=[plugin], execution=QUIET)
    assert first["method"].tolist() == ["tiny"] and api.dry_run(plan)["finished"].tolist() == [True]
    stamp = next((out / "records").glob("*.json")).stat().st_mtime_ns
    again = bench.run(grid(["tiny"], seeds=[0], options={"members": 2}), out=out, data_dir=tiny_data,
                      plugins=[plugin], force=True, execution=QUIET)
    assert next((out / "records").glob("*.json")).stat().st_mtime_ns != stamp  # force retrained
    assert again["id_acc"].tolist() == first["id_acc"].tolist()  # and the same seed gives the same run


def test_a_presets_out_is_the_default_folder(tmp_path):
    from bench import api
    preset = tmp_path / "mine.toml"
    preset.write_text(f'out = "{tmp_path / "here"}"\nmethods = ["deep_ensemble"]\n')
    assert api.plan(str(preset)).store.out == tmp_path / "here"
    assert api.plan(str(preset), out=tmp_path / "there").store.out == tmp_path / "there"
    assert api.plan("ablate-dare").store.out.as_posix() == "results/ablation"


def test_the_api_passes_python_values_to_the_grid_as_they_are():
    from bench.design.grid import Assignment
    typed = api.plan("seed", {"methods": ["dare", "anchor_net"], "seeds": [0],
                              "options": {"dare.threshold": None, "dare.delta": [0.25, 1], "members": 2},
                              "select": {"anchor_net.sigma": [0.1, 1.0], "anchor_net.early_break": {"sigma": 1.0}}})
    typed_cli = api.plan("seed", {"methods": ["dare", "anchor_net"], "seeds": [0],
                                  "options": ["dare.threshold=none", "dare.delta=0.25,1", "members=2"],
                                  "select": ["anchor_net.sigma=0.1,1", "anchor_net.early_break=sigma=1"]})
    assert [c.run_id for c in typed.configs] == [c.run_id for c in typed_cli.configs]
    assert [c.kind for c in typed.configs] == ["run", "run", "selection"]
    assert typed.configs[2].early_break == {"sigma": 1.0} and typed.configs[2].fixed_options["members"] == 2
    assert Assignment.many({"dare.delta": [0.25, 1]}) == [Assignment("dare", "delta", (0.25, 1))]
    with pytest.raises(ConfigError, match=r"--option 'members': an empty list of values"):
        api.plan("seed", {"methods": ["dare"], "options": {"members": []}})
    with pytest.raises(ConfigError, match=r"--select 'sigma': expected METHOD.NAME"):
        api.plan("seed", {"methods": ["anchor_net"], "select": {"sigma": [1]}})


def test_every_execution_option_is_one_declaration_a_flag_and_a_key(capsys):
    import dataclasses
    import inspect

    from bench.cli.arguments import EXECUTION_OPTIONS
    from bench.cli.main import main
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for cls in EXECUTION_OPTIONS:
        for field in dataclasses.fields(cls):
            flag = field.metadata["flag"] or f"--{field.name.replace('_', '-')}"
            assert flag in text and " ".join(field.metadata["help"].split()[:6]) in text, field.name
    # the flags reach the plan under the declared names
    args = ["--methods", "dare", "--seeds", "0", "--jobs", "2", "--no-vectorize", "--pack-size", "4",
            "--submitit-param", "timeout_min=5", "--submitit-param", "mem_gb=4"]
    from bench.cli.arguments import plan_from
    from bench.cli.main import build_parser
    plan = plan_from(build_parser(None).parse_args(["run", *args]))
    assert (plan.executor.jobs, plan.execution.vectorize, plan.execution.pack_size) == (2, False, 4)
    assert plan.executor.submitit_params == ("timeout_min=5", "mem_gb=4")
    assert len(inspect.signature(api.plan).parameters) <= 8 and len(inspect.signature(bench.run).parameters) <= 8
