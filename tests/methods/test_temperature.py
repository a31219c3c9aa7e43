"""Temperature scaling, the post-hoc step every method can take (``temperature=fit``), and the
implicit options that keep recorded runs' ids."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bench.models.registry import ArchSpec
from bench.cli.main import main
from bench.config import make_protocol, make_run_config
from bench.evaluation.calibration import fit_temperature
from methods.base import FITTED_TEMPERATURE

ROOT = Path(__file__).resolve().parents[2]


def nll(logits: np.ndarray, labels: np.ndarray, t: float) -> float:
    z = logits / t
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    return float(-np.log(p.mean(axis=0)[np.arange(len(labels)), labels]).mean())


def test_one_network_two_classes_by_hand():
    # logits (0, 1) for every sample, label 1 in a share q of them: softmax(1/T) must give p1 = q,
    # so 1/T = log(q / (1 - q)); q = 0.8: T = 1 / log 4
    labels = np.array([1] * 8 + [0] * 2)
    logits = np.tile([0.0, 1.0], (1, 10, 1))
    assert fit_temperature(logits, labels) == pytest.approx(1 / np.log(4), abs=1e-6)


def test_the_fit_is_the_nll_minimum_of_the_averaged_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 4, size=(3, 500, 10))
    truth = np.exp(logits.mean(axis=0) / 2)  # labels drawn from a softmax at temperature 2: overconfident logits
    labels = np.array([rng.choice(10, p=row / row.sum()) for row in truth])
    t = fit_temperature(logits, labels)
    assert 1 < t < 10
    for step in (1e-3, -1e-3):  # a minimum: both neighbours are worse
        assert nll(logits, labels, t) <= nll(logits, labels, t * (1 + step))
    # the averaged softmax, not the members' mean NLL: pooling the members as samples gives another T
    pooled = fit_temperature(logits.reshape(1, -1, 10), np.tile(labels, 3))
    assert abs(pooled - t) > 1e-2


def test_an_option_added_later_keeps_the_ids_of_committed_runs():
    checked = 0
    for path in sorted((ROOT / "results" / "seed" / "records").glob("*.json")):
        record = json.loads(path.read_text())
        config = record["config"]
        if "select" in config:
            continue
        rebuilt = make_run_config(config["method"], config["method_options"], make_protocol(config["protocol"]),
                                  config["seed"], config["preset"])
        assert rebuilt.run_id == record["run_id"]
        # recorded before the option existed, or with its default: no trace of it in the config
        checked += "temperature" not in config["method_options"] and "temperature" not in rebuilt.variant
    assert checked >= 20
    fitted = make_run_config("deep_ensemble", {"temperature": "fit"}, make_protocol({}), 0)
    plain = make_run_config("deep_ensemble", {"temperature": "none"}, make_protocol({}), 0)
    assert plain.run_id == make_run_config("deep_ensemble", {}, make_protocol({}), 0).run_id != fitted.run_id
    assert fitted.variant == "deep_ensemble(checkpoint=none, temperature=fit, members=3, loss=ce)"


def test_post_fit_divides_every_prediction_by_the_fitted_temperature():
    config = make_run_config("deep_ensemble", {"temperature": "fit", "members": 2}, make_protocol({}), 0)
    method = config.built_method
    model = method.build_model(0, [0, 1], ArchSpec.mlp(6, (5,), 3, config.protocol.init))
    x, y = torch.randn(40, 6), torch.randint(0, 3, (40,))
    raw = method.logits(model, x)
    values = method.post_fit(model, x, y)
    t = values[FITTED_TEMPERATURE]
    assert t == getattr(model, FITTED_TEMPERATURE) == pytest.approx(fit_temperature(raw.numpy(), y.numpy()))
    torch.testing.assert_close(method.predict_proba(model, x), (raw / t).softmax(-1))
    assert method.post_fit(model, x, y)[FITTED_TEMPERATURE] == t  # fitted again from the raw logits: the same
    untouched = make_run_config("deep_ensemble", {"members": 2}, make_protocol({}), 0).built_method
    assert untouched.post_fit(model, x, y) == {} and not hasattr(model, FITTED_TEMPERATURE)  # no T carried over
    torch.testing.assert_close(untouched.logits(model, x), raw)


def test_temperature_rows_end_to_end(tiny_data, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-q", "--methods", "single_network",
                 "deep_ensemble", "-o", "temperature=none,fit", "-o", "members=2", "--seeds", "0", "--epochs", "2",
                 "--val-size", "50", "--no-download", "--no-plots"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    fitted, plain = runs[runs["temperature"] == "fit"], runs[runs["temperature"] != "fit"]
    assert len(fitted) == 2 and plain[FITTED_TEMPERATURE].isna().all()
    assert sorted(fitted["label"]) == ["DE (NLL) + TS", "Single network + TS"]  # never matched as a plain row
    for _, row in fitted.iterrows():  # the same training, scaled predictions: the NLL the fitted T gives
        twin = plain[plain["method"] == row["method"]].iloc[0]
        assert row["id_acc"] == twin["id_acc"] or row["method"] != "single_network"  # T keeps one net's argmax
        assert row["id_nll_nats"] != twin["id_nll_nats"] and row[FITTED_TEMPERATURE] != 1.0
    assert len(pd.read_csv(out / "summary.csv")) == 4  # + TS is a row of its own


@pytest.mark.parametrize("args, problem", [
    (["--methods", "dare", "-o", "temperature=fit", "-o", "dare.loss=mse"],
     "method dare: temperature=fit scales logits, and loss=mse trains outputs that are no logits; use loss=ce"),
    (["--methods", "single_network", "-o", "temperature=fit", "--val-size", "0"],
     "method single_network: temperature=fit needs a validation split; set val_size > 0"),
    (["--methods", "mc_dropout", "-o", "temperature=fit"],
     "method mc_dropout: temperature=fit is not supported: its predictions are stochastic passes"),
    (["--methods", "single_network", "-o", "temperature=yes"],
     "method single_network: temperature='yes' is out of range; allowed: none or fit"),
])
def test_bad_temperature_settings_are_one_line(args, problem, tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path), "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and problem in err
