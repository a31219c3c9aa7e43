"""The "Adding a method" example of docs/methods.md works as written: a plugin file outside the
repository, loaded with --plugin, trained through the unchanged loop."""
import re
from pathlib import Path

import pandas as pd

from bench.cli.main import main

ROOT = Path(__file__).parents[2]
METHODS_DOC = ROOT / "docs" / "methods.md"
EXAMPLE = re.compile(r"```python\n(# ~/my_methods/wd_ensemble.py.*?)```", re.S)


def test_readme_plugin_example_runs_through_the_unchanged_loop(tiny_data, tmp_path_factory, clean_registry, capsys):
    code = EXAMPLE.search(METHODS_DOC.read_text()).group(1)
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


def test_readme_points_at_the_tested_example():
    """The README's "Adding a method" names the example file and links docs/methods.md, where the
    tested copy is; any copy of the example it shows is the tested one, never a stale one."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Adding a method"):]
    assert "wd_ensemble.py" in section and "(docs/methods.md)" in section
    tested = EXAMPLE.search(METHODS_DOC.read_text()).group(1)
    assert all(m.group(1) == tested for m in EXAMPLE.finditer(readme))
