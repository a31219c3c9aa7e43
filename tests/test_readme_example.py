"""The README's "Adding a method" example works as written: one file plus a registry entry."""
import re
import types
from pathlib import Path

import pandas as pd

import methods
from bench.cli import main

README = Path(__file__).parent.parent / "README.md"


def test_readme_method_example_runs_through_the_unchanged_loop(tiny_data, tmp_path, monkeypatch, capsys):
    code = re.search(r"```python\n(# methods/l2_ensemble.py\n.*?)```", README.read_text(), re.S).group(1)
    module = types.ModuleType("l2_ensemble")
    exec(compile(code, "README:l2_ensemble", "exec"), module.__dict__)
    monkeypatch.setitem(methods.REGISTRY, "l2_ensemble", module.L2Ensemble)  # the registry entry

    assert main(["list"]) == 0
    assert "l2_ensemble: deep ensemble with weight decay" in capsys.readouterr().out
    out = tmp_path / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--methods", "l2_ensemble",
                 "--seeds", "0", "--epochs", "2", "--val-size", "50", "-o", "l2_ensemble.weight=0,10",
                 "--no-download", "-q", "--no-plots"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["weight"]) == [0, 10] and set(runs["status"]) == {"ok"}
    # the penalty really acts: a heavy weight penalty shrinks the predictions towards uniform
    by_weight = runs.set_index("weight")["id_pred_entropy_bits"]
    assert by_weight[10] > by_weight[0]
