"""The figure registry (bench.reporting.figures): a registered figure is written by `bench report` once
per protocol it applies to, and the next report removes what it no longer writes (figures.json);
the most uncertain test images are one figure per protocol."""
import json
import shutil

import matplotlib.image
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from bench.cli.main import main
from bench.errors import ConfigError
from bench.reporting import figures

TINY = ["--methods", "deep_ensemble", "--seeds", "0", "--epochs", "1", "--early-stop-acc", "none", "--val-size", "50",
        "--no-download", "--no-plots", "-q"]
MNIST, FASHION = "_seed_mnist", "_seed_fashion_mnist"  # the file tags of the folder's two protocols


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """A folder of two protocols: MNIST in distribution with two variants (1 and 2 members), Fashion-MNIST
    with one; no plots yet."""
    out = tmp_path_factory.mktemp("figures") / "out"
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "-o", "members=1,2", *TINY]) == 0
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(out), "--id-dataset", "fashion_mnist",
                 "-o", "members=2", *TINY]) == 0
    return out


@pytest.fixture
def folder(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "out")


def pngs(out, prefix: str) -> set[str]:
    return {p.name for p in out.iterdir() if p.name.startswith(prefix) and p.suffix == ".png"}


def probe(path, view):
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.set_title(view.title, fontsize=4)
    fig.savefig(path, dpi=20)


def test_a_figure_registered_in_a_test_is_written_and_removed_once_it_no_longer_applies_or_is_gone(folder,
                                                                                                  monkeypatch):
    applies = {"fashion_mnist": True, "mnist": True}
    monkeypatch.setattr(figures, "FIGURES", [])  # the probe alone: the built-in figures are drawn elsewhere
    figures.register(figures.Figure("probe", probe, lambda view: applies[view.runs["id_dataset"].iloc[0]]))
    with pytest.raises(ConfigError, match="a figure named 'probe' is registered already"):
        figures.register(figures.Figure("probe", probe, lambda view: True))
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "probe") == {f"probe{MNIST}.png", f"probe{FASHION}.png"}
    assert json.loads((folder / "figures.json").read_text()) == {"report": [f"probe{MNIST}.png", f"probe{FASHION}.png"]}

    applies["fashion_mnist"] = False
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "probe") == {f"probe{MNIST}.png"}

    figures.FIGURES.clear()
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "probe") == set() and json.loads((folder / "figures.json").read_text()) == {"report": []}


def test_the_most_uncertain_images_are_one_figure_per_protocol_and_old_per_variant_files_go(folder, monkeypatch):
    # what the report wrote before the registry: one image per variant, of variants present and gone
    old = [f"top_uncertain{MNIST}_deep_ensemble_checkpoint_none_members_1_loss_ce.png",
           f"top_uncertain{MNIST}_deep_ensemble_checkpoint_none_members_2_loss_ce.png",
           f"top_uncertain{MNIST}_mc_dropout_checkpoint_none_dropout_0_2_passes_30.png",
           f"top_uncertain{FASHION}_deep_ensemble_checkpoint_none_members_2_loss_ce.png"]
    for name in old:
        (folder / name).write_bytes(b"old")
    monkeypatch.setattr(figures, "FIGURES", [f for f in figures.FIGURES if f.name == "top_uncertain"])
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "top_uncertain") == {f"top_uncertain{MNIST}.png", f"top_uncertain{FASHION}.png"}
    two_rows = matplotlib.image.imread(folder / f"top_uncertain{MNIST}.png").shape[0]
    one_row = matplotlib.image.imread(folder / f"top_uncertain{FASHION}.png").shape[0]
    assert two_rows > 1.6 * one_row  # a row per variant


def test_a_variant_and_a_protocol_that_left_the_folder_leave_no_file(folder, monkeypatch):
    monkeypatch.setattr(figures, "FIGURES", [f for f in figures.FIGURES if f.name in ("top_uncertain", "forest")])
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "") == {f"top_uncertain{MNIST}.png", f"top_uncertain{FASHION}.png"}  # no reference, no forest
    runs = pd.read_csv(folder / "runs.csv")
    gone = runs[(runs["id_dataset"] == "fashion_mnist") | (runs["members"] == 1)]
    for run_id in gone["run_id"]:
        (folder / "records" / f"{run_id}.json").unlink()
    first = (folder / f"top_uncertain{MNIST}.png").read_bytes()
    assert main(["report", "--out", str(folder)]) == 0
    # one protocol left: its figures lose the tag, and the tagged ones of the last report are gone
    assert pngs(folder, "") == {"top_uncertain.png"}
    assert (folder / "top_uncertain.png").read_bytes() != first  # one variant's row, not two
    assert json.loads((folder / "figures.json").read_text()) == {"report": ["top_uncertain.png"]}


@pytest.mark.parametrize("manifest", [True, False])  # False: last reported before figures.json existed
def test_a_figure_of_the_cached_predictions_is_kept_not_redrawn_when_a_folder_lacks_them(manifest, folder, monkeypatch,
                                                                                         capsys):
    monkeypatch.setattr(figures, "FIGURES", [f for f in figures.FIGURES if f.name in ("reliability", "comparison")])
    assert main(["report", "--out", str(folder)]) == 0
    listed = json.loads((folder / "figures.json").read_text())["report"]
    if not manifest:
        (folder / "figures.json").unlink()
    drawn = {name: (folder / name).read_bytes() for name in pngs(folder, "reliability")}
    assert set(drawn) == {f"reliability{MNIST}.png", f"reliability{FASHION}.png"}
    stamps = {name: (folder / name).stat().st_mtime_ns for name in drawn}
    # the Fashion-MNIST protocol loses its predictions (a folder copied without them): its reliability
    # diagram stays as drawn and recorded; MNIST's, whose runs have theirs, is drawn again
    runs = pd.read_csv(folder / "runs.csv")
    for run_id in runs.loc[runs["id_dataset"] == "fashion_mnist", "run_id"]:
        (folder / "predictions" / f"{run_id}.npz").unlink()
    capsys.readouterr()
    assert main(["report", "--out", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"kept reliability{FASHION}.png as the last report drew them" in out
    assert f"wrote {folder / f'comparison{FASHION}.png'}" in out and f"wrote {folder / f'reliability{FASHION}.png'}" not in out
    assert (folder / f"reliability{FASHION}.png").stat().st_mtime_ns == stamps[f"reliability{FASHION}.png"]
    assert (folder / f"reliability{MNIST}.png").stat().st_mtime_ns != stamps[f"reliability{MNIST}.png"]
    assert set(json.loads((folder / "figures.json").read_text())["report"]) == {
        f"comparison{MNIST}.png", f"comparison{FASHION}.png", *drawn}
    assert json.loads((folder / "figures.json").read_text())["report"] == listed  # in the order drawn, kept or not
    (folder / f"reliability{FASHION}.png").unlink()  # a figure gone and no predictions: nothing to keep or draw
    assert main(["report", "--out", str(folder)]) == 0
    assert pngs(folder, "reliability") == {f"reliability{MNIST}.png"}


def test_figures_name_variants_by_their_label_and_the_options_that_tell_them_apart():
    import pandas as pd
    from bench.reporting.plotting import palette, short_labels
    runs = pd.DataFrame({"variant": ["swag(checkpoint=none, members=1, scale=0.5)", "swag(checkpoint=none, members=3, scale=0.5)",
                                     "dare(members=3, threshold=0.3)", "dare(members=3, threshold=1.0)",
                                     "deep_ensemble(members=3, loss=ce)", "deep_ensemble(members=3, loss=ce)"],
                         "label": ["SWAG", "MultiSWAG", "DARE", "DARE", "DE (NLL)", "DE (NLL)"]})
    assert short_labels(runs) == {"swag(checkpoint=none, members=1, scale=0.5)": "SWAG",
                                  "swag(checkpoint=none, members=3, scale=0.5)": "MultiSWAG",
                                  "dare(members=3, threshold=0.3)": "DARE (threshold=0.3)",
                                  "dare(members=3, threshold=1.0)": "DARE (threshold=1.0)",
                                  "deep_ensemble(members=3, loss=ce)": "DE (NLL)"}
    # two selections of one method over other grids: options cannot tell them apart, so the variants name them
    walks = pd.DataFrame({"variant": ["mod(members=3; select lam in [0.1])", "mod(members=3; select lam in [1.0])"],
                          "label": ["MOD", "MOD"]})
    assert short_labels(walks) == {"mod(members=3; select lam in [0.1])": "MOD (select=lam in [0.1])",
                                   "mod(members=3; select lam in [1.0])": "MOD (select=lam in [1.0])"}
    for n in (3, 17, 25):  # never a colour twice in one figure
        colors = palette([f"v{i}" for i in range(n)])
        assert len(set(colors.values())) == n
