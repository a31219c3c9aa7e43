"""The README's "Adding a method" example works as written: a plugin file outside the repository,
loaded with --plugin, trained through the unchanged loop."""
import re
from pathlib import Path

import pandas as pd

from bench.cli import main

README = Path(__file__).parent.parent / "README.md"


def test_readme_plugin_example_runs_through_the_unchanged_loop(tiny_data, tmp_path_factory, clean_registry, capsys):
    code = re.search(r"```python\n(# ~/my_methods/wd_ensemble.py.*?)```", README.read_text(), re.S).group(1)
    plugin = tmp_path_factory.mktemp("my_methods") / "wd_ensemble.py"
    plugin.write_text(code)

    assert main(["list", "--plugin", str(plugin)]) == 0
    assert f"wd_ensemble: independent members with an L2 penalty on their weights [from plugin {plugin}]" in \
        capsys.readouterr().out
    out = tmp_path_factory.mktemp("out")
    assert main(["run", "--plugin", str(plugin), "--data-dir", str(tiny_data), "--out", str(out),
                 "--methods", "wd_ensemble", "--seeds", "0", "--epochs", "2", "--val-size", "50",
                 "-o", "wd_ensemble.decay=0,10", "--no-download", "-q", "--no-plots"]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["decay"]) == [0, 10] and set(runs["status"]) == {"ok"}
    # the penalty really acts: a heavy weight penalty shrinks the weights and the predictions towards uniform
    by_decay = runs.set_index("decay")
    assert by_decay.loc[10, "id_pred_entropy_bits"] > by_decay.loc[0, "id_pred_entropy_bits"]
    assert by_decay.loc[10, "param_abs_mean"] < by_decay.loc[0, "param_abs_mean"]
