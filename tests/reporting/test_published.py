"""Published tables as a registry (bench.reporting.published) and each cell's verdict
(bench.reporting.verdicts): hand-computed intervals, refusals, and cards that agree with the presets."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from bench import api
from bench.config import available_presets, load_preset
from bench.errors import ConfigError
from bench.reporting.paper import build_paper_table, figure_rows, format_markdown
from bench.reporting.published import PUBLISHED_METRICS, available_tables, load_published, option_text
from bench.reporting.verdicts import INSIDE, NOT_COMPARABLE, OUTSIDE, format_verdict, verdict

T_975_2 = 4.302652729911275  # Student's t, 0.975 quantile, 2 degrees of freedom
T_975_8 = 2.306004135033371  # ... 8 degrees of freedom


def test_a_single_published_number_is_judged_by_the_harness_spread_as_one_more_run():
    # 3 seeds, sd 0.002: prediction interval for one run, widened by the published rounding (0.016 -> 0.0005)
    cell = verdict(0.020, 0.002, 3, 0.016, resolution=0.0005)
    half = T_975_2 * 0.002 * math.sqrt(1 / 3 + 1) + 0.0005
    assert cell["verdict"] == INSIDE and cell["verdict_diff"] == pytest.approx(0.004)
    assert (cell["verdict_low"], cell["verdict_high"]) == pytest.approx((0.004 - half, 0.004 + half))
    assert cell["verdict_note"] == "published seed count not given: taken as one run"
    tight = verdict(0.020, 0.0002, 3, 0.016, resolution=0.0005)
    half = T_975_2 * 0.0002 * math.sqrt(4 / 3) + 0.0005
    assert tight["verdict"] == OUTSIDE and tight["verdict_low"] == pytest.approx(0.004 - half)
    assert format_verdict(tight, 3) == f"OUTSIDE: Δ +0.004 [{0.004 - half:+.3f}, {0.004 + half:+.3f}]"


def test_a_published_mean_and_sd_over_seeds_is_compared_by_welch():
    # equal sds and seed counts: Welch's degrees of freedom are 2(n - 1) = 8, the standard error sd * sqrt(2 / n)
    cell = verdict(88.0, 1.0, 5, 87.0, 1.0, 5, resolution=0.05)
    half = T_975_8 * math.sqrt(2 / 5) + 0.05
    assert (cell["verdict"], cell["verdict_note"]) == (INSIDE, "")
    assert (cell["verdict_low"], cell["verdict_high"]) == pytest.approx((1 - half, 1 + half))
    assert verdict(90.0, 0.2, 5, 87.2, 0.2, 5, resolution=0.05)["verdict"] == OUTSIDE


@pytest.mark.parametrize("args, why", [
    ((0.9, 0.01, 1, 0.8), "one seed: no spread to judge by"),
    ((0.9, 0.01, 3, math.nan), "not published"),
    ((math.nan, math.nan, 0, 0.8), "no finished harness runs"),
])
def test_a_cell_without_what_a_verdict_needs_is_not_comparable_and_says_why(args, why):
    cell = verdict(*args)
    assert (cell["verdict"], cell["verdict_note"]) == (NOT_COMPARABLE, why) and math.isnan(cell["verdict_low"])
    assert format_verdict(cell, 1) == f"n/c: {why}"


def test_the_uncertainty_baselines_table_maps_its_names_and_keeps_its_units():
    table = load_published("ub_lenet5")
    assert table.label("Ensemble (size=10)") == "DE (NLL)" and table.label("Deterministic") == "Single network"
    cells = table.cells.set_index(["in_distribution", "method", "metric"])
    assert cells.loc[("mnist", "Ensemble (size=10)", "ece_10_bins_ub"), "mean"] == 0.005  # a fraction, as published
    assert cells.loc[("fashion_mnist", "Deterministic", "nll_nats"), "resolution"] == pytest.approx(0.0005)
    assert math.isnan(cells.loc[("mnist", "Deterministic", "ece_10_bins_ub"), "mean"])  # "-" in the README
    assert set(table.cells["source"]) == {"uncertainty-baselines baselines/mnist/README.md (62d8d927)"}


def test_a_row_is_put_beside_its_published_cells_in_the_published_unit():
    summary = pd.DataFrame([{"label": "DE (NLL)", "variant": "deep_ensemble(members=10)", "id_dataset": "mnist",
                             "arch": "lenet5_same", "ood_sets": "fashion_mnist", "primary_score": "pred_entropy", "n": 3,
                             "id_acc_mean": 0.9935, "id_acc_std": 0.0005, "id_nll_nats_mean": 0.0190,
                             "id_nll_nats_std": 0.0010, "id_ece_10_bins_ub_mean": 0.004, "id_ece_10_bins_ub_std": 0.001}])
    table = build_paper_table(summary, load_published("ub_lenet5"), "mnist").set_index(["label", "quantity"])
    assert list(dict.fromkeys(table.index.get_level_values(1))) == ["ID NLL (nats)", "ID accuracy", "ID ECE (UB's 10 bins)"]
    acc = table.loc[("DE (NLL)", "ID accuracy")]
    assert (acc["harness_mean"], acc["paper_mean"]) == pytest.approx((99.35, 99.4))
    nll = table.loc[("DE (NLL)", "ID NLL (nats)")]
    half = T_975_2 * 0.001 * math.sqrt(4 / 3) + 0.0005
    assert nll["verdict_high"] == pytest.approx(0.003 + half) and nll["verdict"] == INSIDE
    refined = table.loc[("Refined VI", "ID accuracy")]  # the card says why the harness has no such row
    assert refined["verdict"] == NOT_COMPARABLE and refined["verdict_note"].startswith("not a method of the harness")
    assert table.loc[("VI", "ID accuracy"), "verdict_note"] == "not run in this folder"
    md = format_markdown(build_paper_table(summary, load_published("ub_lenet5"), "mnist"))
    assert "| DE (NLL) | `deep_ensemble(members=10)` |  | 0.019 ± 0.001 (3) | 0.016 | inside: Δ +0.003" in md


def test_a_published_table_with_an_unknown_metric_or_card_key_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("in_distribution,ood_set,method,metric,mean,std,n_seeds,source\nmnist,,X,brier,0.1,,,here\n")
    with pytest.raises(ConfigError, match="unknown metric brier"):
        load_published(str(bad))
    bad.write_text("in_distribution,ood_set,method,metric,mean,std,n_seeds,source\nmnist,,X,nll_nats,0.1,,,here\n")
    (tmp_path / "bad.toml").write_text('titel = "typo"\n')
    with pytest.raises(ConfigError, match="unknown key titel"):
        load_published(str(bad))
    with pytest.raises(ConfigError, match="unknown published table 'nope'"):
        load_published("nope")
    (tmp_path / "bad.toml").write_text('[protocol]\narchitecture = "mlp"\n')
    with pytest.raises(ConfigError, match="names architecture, not a protocol field"):
        load_published(str(bad))
    (tmp_path / "bad.toml").write_text('[options.Y]\nmembers = 5\n')
    with pytest.raises(ConfigError, match=r"\[options\] names Y, not a method of its table \(methods: X\)"):
        load_published(str(bad))


@pytest.mark.parametrize("rows, message", [
    (["mnist,,X,nll_nats,0.1,,,"], "row 2 cites no source"),
    (["mnist,,X,nll_nats,0.1,,,here", "mnist,,Y,nll_nats,0.2,,,here", "mnist,,X,nll_nats,0.3,,,there"],
     r"row 4 repeats the cell \(X, nll_nats, mnist, ood_set=-\)"),
])
def test_a_published_cell_without_a_source_or_given_twice_is_refused(tmp_path, rows, message):
    bad = tmp_path / "cells.csv"
    bad.write_text("in_distribution,ood_set,method,metric,mean,std,n_seeds,source\n" + "\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match=message):
        load_published(str(bad))


def test_rows_of_other_networks_than_the_published_ones_stand_beside_it_without_a_verdict():
    row = {"label": "DE (NLL)", "id_dataset": "mnist", "ood_sets": "fashion_mnist", "primary_score": "pred_entropy",
           "n": 3, "id_acc_mean": 0.9935, "id_acc_std": 0.0005}
    summary = pd.DataFrame([{**row, "variant": "a", "arch": "lenet5_same"}, {**row, "variant": "b", "arch": "lenet5"},
                            {**row, "variant": "c"}])  # c: no arch column value, so the default (mlp)
    table = build_paper_table(summary, load_published("ub_lenet5"), "mnist")
    table["variant"] = table["variant"].str.split().str[0]  # the differing protocol value is named after it
    acc = table[table["quantity"] == "ID accuracy"].set_index("variant")
    assert acc.loc["a", "verdict"] == INSIDE
    for variant, arch in [("b", "lenet5"), ("c", "mlp")]:
        assert acc.loc[variant, "verdict"] == NOT_COMPARABLE and acc.loc[variant, "harness_mean"] == pytest.approx(99.35)
        assert acc.loc[variant, "verdict_note"] == f"networks differ from the published ones (arch={arch}, published lenet5_same)"
    # the published number is there but the runs' records lack the metric (records older than it)
    nll = table[table["quantity"] == "ID NLL (nats)"].set_index("variant")
    assert nll.loc["a", "verdict_note"].startswith("not in these runs' records")


def test_a_row_with_other_method_options_than_the_card_pins_gets_no_verdict():
    row = {"label": "DE (NLL)", "id_dataset": "mnist", "ood_sets": "fashion_mnist", "primary_score": "pred_entropy",
           "n": 3, "id_acc_mean": 0.9943, "id_acc_std": 0.0005, "arch": "lenet5_same"}
    summary = pd.DataFrame([{**row, "variant": "ten", "members": 10.0}, {**row, "variant": "five", "members": 5.0},
                            {**row, "label": "VI", "variant": "vi", "members": 1}])
    table = build_paper_table(summary, load_published("ub_lenet5"), "mnist")
    acc = table[table["quantity"] == "ID accuracy"]
    acc = acc.set_index(acc["variant"].str.split().str[0])
    assert acc.loc["ten", "verdict"] == INSIDE and acc.loc["vi", "verdict"] != NOT_COMPARABLE  # VI: members = 1, as pinned
    assert acc.loc["five", "verdict"] == NOT_COMPARABLE
    assert acc.loc["five", "verdict_note"] == "method options differ from the published row's (members=5, published 10)"
    names, other = figure_rows(table)
    assert list(other[:3]) == [False, True, False] and names[1].endswith("\n(other options: n/c)")
    assert option_text(10.0) == option_text(10) == "10" and option_text(0.5) == "0.5"  # a card's 10.0 is 10


def test_the_dare_table_judges_the_papers_mlp_and_not_lenet_members_or_heads_on_a_trunk():
    row = {"label": "DE (NLL)", "id_dataset": "fashion_mnist", "ood_sets": "mnist", "primary_score": "pred_entropy",
           "n": 5, "id_acc_mean": 0.89, "id_acc_std": 0.002}
    summary = pd.DataFrame([{**row, "variant": "mlp", "hidden": "100-100-100"},
                            {**row, "variant": "wide", "hidden": "256-256"},
                            {**row, "variant": "lenet", "arch": "lenet5", "hidden": ""},
                            {**row, "variant": "trunk", "trunk": "lenet5", "hidden": "100-100-100"}])
    table = build_paper_table(summary, load_published("dare_table3"), "fashion_mnist")
    table["variant"] = table["variant"].str.split().str[0]
    notes = table[table["quantity"] == "ID accuracy"].set_index("variant")["verdict_note"]
    assert notes["mlp"] == "" and notes["wide"].endswith("(hidden=256-256, published 100-100-100)")
    assert notes["lenet"].endswith("(arch=lenet5, published mlp)")  # hidden is no option of lenet5: not named
    assert notes["trunk"].endswith("(trunk=lenet5, published none)")
    names, other = figure_rows(build_paper_table(summary, load_published("dare_table3"), "fashion_mnist"))
    assert list(other)[:4] == [False, True, True, True] and not any(other[4:])  # then the published rows not run
    assert "(other networks" not in names[0] and all(n.endswith("\n(other networks: n/c)") for n in names[1:4])


@pytest.mark.parametrize("name", available_tables())
def test_every_card_names_presets_that_compare_to_it_and_labels_that_those_presets_train(name, tmp_path):
    table = load_published(name)
    assert table.title and table.link and table.presets and set(table.cells["metric"]) <= set(PUBLISHED_METRICS)
    labels = set()
    for preset in table.presets:
        assert load_preset(preset)[1]["compare_to"] == name
        labels |= {item.runs()[0].built_method.label for item in api.plan(preset, out=tmp_path / preset).configs}
    expected = {table.label(m) for m in set(table.cells["method"]) - set(table.not_run)}
    assert expected <= labels, f"{name}: no preset trains {sorted(expected - labels)}"


def test_every_preset_that_compares_to_a_table_is_named_by_its_card():
    for preset in available_presets():
        name = load_preset(preset)[1].get("compare_to")
        if name:
            assert preset in load_published(name).presets, f"{preset} compares to {name}, whose card does not name it"


def test_a_preset_changes_protocol_values_for_one_method_alone_and_the_command_line_overrides_them(tmp_path):
    configs = api.plan("ub-lenet-mnist", out=tmp_path / "a").configs
    assert {c.method: c.protocol.epochs for c in configs} == {"single_network": 25, "deep_ensemble": 25, "vi": 153}
    assert len({c.protocol.arch for c in configs}) == 1  # the rest of the protocol is the preset's
    short = api.plan("ub-lenet-mnist", {"protocol": {"epochs": 2}}, out=tmp_path / "b").configs
    assert {c.protocol.epochs for c in short} == {2}
