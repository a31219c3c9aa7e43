"""Every figure of a report, in one registry. A figure is a function ``draw(path, view)`` that writes
one PNG from a protocol's ProtocolView, registered (FIGURES) with its name, the file stem, and when it
applies. ``bench report`` writes each applicable figure once per protocol, as <name><tag>.png (the tag
tells the protocols of a folder apart), and then removes what it wrote last time and not now: the
folder's figures.json records the figures each writer wrote, so no file pattern has to follow the
registry. A new figure is one function and one entry here (or ``register`` from a plugin). A figure
drawn from the runs' cached predictions (``view.arrays``; the default, ``needs_predictions``) is not
redrawn for a protocol some of whose runs lack them (a folder copied without predictions/): the last
report's file of it is kept as it was, and stays recorded.

Other commands draw into the same folder from what they alone compute, and record their files in
figures.json too (``record_figures``), each under its own name: ``ablate``'s ablation_<option>.png
and ablation_epochs.png (bench.reporting.ablation, from the training histories), a star design's
star_forest.png (bench.reporting.star_tables), paper_table.png (bench.reporting.paper, from the
published table), ``bench evaluate``'s shift_gallery.png (``write_shift_gallery``)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, Iterable

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from bench.data.files import DATASETS
from bench.errors import ConfigError
from bench.evaluation.columns import scored_sets, with_primary
from bench.reporting import run_plots, shift_plots
from bench.reporting.forest_plots import forest_plot
from bench.reporting.plotting import MAX_PROB_AUGRC, ProtocolView, palette, protocol_title, short_labels
from bench.store import RunStore

MANIFEST = "figures.json"  # in a results folder: {writer: [the figure files it wrote last]}
REPORT = "report"


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str                                      # the file stem: <name><tag>.png
    draw: Callable[[Path, ProtocolView], None]     # writes the PNG at the path
    applies: Callable[[ProtocolView], bool]        # whether a protocol gets this figure
    # drawn from the runs' cached predictions (view.arrays): not redrawn while some run lacks them (a
    # folder copied without predictions/), its last file kept; False for a figure of the metrics alone
    needs_predictions: bool = True
    caption: str = ""                              # one line under it on the folder's page (bench.reporting.pages)


def has_runs(view: ProtocolView) -> bool:
    return not view.runs.empty


def has_ood_sets(view: ProtocolView) -> bool:
    return has_runs(view) and bool(view.sets)


def has_selective(view: ProtocolView) -> bool:
    return has_runs(view) and MAX_PROB_AUGRC in view.runs


def has_all_predictions(view: ProtocolView) -> bool:
    """Whether every run of the view has its cached predictions (a folder copied without
    predictions/ has its records' metrics alone)."""
    return set(view.runs["run_id"]) <= set(view.arrays)


def has_differences(view: ProtocolView) -> bool:
    return not view.differences.empty


def has_shift(view: ProtocolView) -> bool:
    return view.shift is not None and not view.shift.empty


def has_shift_curves(view: ProtocolView) -> bool:
    """Shift rows of a family with a curve (rotation, translation, MNIST-C); a dataset shift has one level."""
    return has_shift(view) and view.shift["family"].isin(shift_plots.CURVE_FAMILIES).any()


def forest(path: Path, view: ProtocolView) -> None:
    forest_plot(path, view.title, view.differences, view.labels)


FIGURES: list[Figure] = [
    Figure("comparison", run_plots.comparison, has_runs, needs_predictions=False,
           caption="each headline metric per variant: the seeds as dots, their mean ± sd as a diamond"),
    Figure("ood_histograms", run_plots.ood_histograms, has_ood_sets,
           caption="each variant's own score on the ID test split against the first OOD set, seeds pooled"),
    Figure("roc_curves", run_plots.roc_curves, has_ood_sets,
           caption="ROC curves against the first OOD set by each variant's own score, one line per seed"),
    Figure("reliability", run_plots.reliability, has_runs,
           caption="accuracy per confidence bin (mean ± sd over seeds) against the diagonal; beneath, the share per bin"),
    Figure("risk_coverage", run_plots.risk_coverage, has_selective,
           caption="selective risk against coverage (confidence: the max mean probability), mean over seeds"),
    Figure("smooth_reliability", run_plots.smooth_reliability, has_selective,
           caption="smooth reliability diagram of the max mean probability beside the binned one"),
    Figure("top_uncertain", run_plots.top_uncertain, has_runs,
           caption="the most uncertain ID test images of each variant's first seed, by predictive entropy"),
    Figure("forest", forest, has_differences, needs_predictions=False,
           caption="paired differences to the deep-ensemble reference, mean and 95 % t-interval per metric"),
    Figure("shift_curves", shift_plots.shift_curves, has_shift_curves, needs_predictions=False,
           caption="each metric against shift intensity, mean ± sd over seeds; intensity 0 is the clean split"),
    Figure("shift_table", shift_plots.shift_heatmaps, has_shift, needs_predictions=False,
           caption="the per-corruption table as heatmaps, one panel per metric (mean over seeds)"),
]
# the figures other commands draw (figures.json records them under the command's name)
OTHER_CAPTIONS = {"shift_gallery": "the shift suite's corruptions at each level on the same test images",
                  "ablation": "each metric against the ablation's axis, mean ± sd over seeds",
                  "star_forest": "each setting of the star design against its centre, paired over seeds",
                  "paper_table": "the harness's cells beside the published ones"}


def caption_of(file_name: str) -> str:
    """The caption of a figure file (<name><tag>.png): the longest registered name it starts with."""
    captions = {**OTHER_CAPTIONS, **{f.name: f.caption for f in FIGURES}}
    names = [n for n in captions if file_name.startswith(n)]
    return captions[max(names, key=len)] if names else ""


def register(figure: Figure) -> None:
    """Add a figure to every later report (e.g. from a plugin); a name is registered once."""
    if any(f.name == figure.name for f in FIGURES):
        raise ConfigError(f"a figure named {figure.name!r} is registered already")
    FIGURES.append(figure)


def protocol_view(store: RunStore, group, differences: pd.DataFrame, tables: dict) -> ProtocolView:
    """The view of one protocol of a report: its group (bench.reporting.report.ProtocolGroup), paired
    differences and robustness tables (report.shift_and_suite_tables)."""
    finished = group.runs[group.runs["status"] == "ok"]
    sets = scored_sets(finished, added=False)  # the protocol's own; the OOD suite has its own table
    title = group.label or (protocol_title(finished) if len(finished) else "")
    return ProtocolView(title, group.tag, with_primary(finished, sets),
                        {rid: store.load_arrays(rid) for rid in finished["run_id"] if store.has_predictions(rid)}, sets,
                        DATASETS[group.runs["id_dataset"].iloc[0]].class_names, differences,
                        tables.get("shift_rows"), tables.get("shift_table_rows"))


def write_figures(out: Path, views: list[ProtocolView], echo: Callable[[str], None] = print) -> list[Path]:
    """Every registered figure that applies, per protocol, as out/<name><tag>.png; then the figures the
    last report wrote and this one did not are removed. A figure drawn from cached predictions that a
    protocol's runs no longer all have (a folder copied without predictions/) is not drawn: the last
    report's file of it is kept, and ``echo`` gets a line naming those kept. Returns the files written."""
    sns.set_theme(style="whitegrid", context="notebook")
    # a folder last reported before figures.json: that report removed <name>*.png of each figure
    # before drawing (per-variant top_uncertain_<variant>.png among them), so this one does it once
    unrecorded = [] if REPORT in recorded(out) else [p.name for f in FIGURES for p in out.glob(f"{f.name}*.png")]
    last = set(recorded(out).get(REPORT, unrecorded))
    files, kept, in_order = [], [], []  # in_order: drawn and kept alike, so figures.json reads the same either way
    share_names_and_colours(views)
    for view in views:
        for figure in FIGURES:
            path = out / f"{figure.name}{view.tag}.png"
            if figure.needs_predictions and not has_all_predictions(view):
                if path.name in last and path.is_file():
                    kept.append(path)
                    in_order.append(path)
            elif figure.applies(view):
                files.append(path)
                in_order.append(path)
                figure.draw(path, view)
                plt.close("all")
    if kept:
        echo(f"kept {', '.join(p.name for p in kept)} as the last report drew them: they need the runs' cached "
             f"predictions, which {out / 'predictions'} lacks")
    record_figures(out, REPORT, in_order, unrecorded)
    return files


def share_names_and_colours(views: list[ProtocolView]) -> None:
    """One short name and one colour per variant across every figure of a folder, in one order."""
    every = [view.runs for view in views if len(view.runs)]
    if not every:
        return
    runs = pd.concat(every, ignore_index=True)
    colors, labels = palette(list(dict.fromkeys(runs["variant"]))), short_labels(runs)
    for view in views:
        view.colors = {v: colors[v] for v in view.variants}
        view.labels = {v: labels[v] for v in view.variants}


def recorded(out: Path) -> dict[str, list[str]]:
    """out/figures.json: the figure files each writer wrote last ({} when there is none)."""
    try:
        manifest = json.loads((Path(out) / MANIFEST).read_text())
    except (OSError, ValueError):  # none yet, or unreadable: every figure is drawn again anyway
        return {}
    return manifest if isinstance(manifest, dict) else {}


def record_figures(out: Path, writer: str, files: Iterable[Path], unrecorded: Iterable[str] = ()) -> None:
    """Record ``files`` as the figures ``writer`` (report, ablation, star, paper_table) wrote in ``out``
    (out/figures.json) and remove those it wrote last time and not now. ``unrecorded``: the file names
    taken as its last figures when figures.json has no record of the writer."""
    out = Path(out)
    manifest = recorded(out)
    written = [Path(f).name for f in files]
    for name in set(manifest.get(writer, unrecorded)) - set(written):
        if isinstance(name, str) and name == Path(name).name and name.endswith(".png"):  # nothing else, nowhere else
            (out / name).unlink(missing_ok=True)
    manifest[writer] = written
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def write_shift_gallery(store: RunStore, names: list[str], data_dir: Path, seed: int,
                        ood: list[str] | None = None, echo=print) -> Path | None:
    """shift_gallery.png (``bench evaluate``; ``ood``: the OOD sets it scored), recorded under "evaluate"
    so that it does not outlive a later call; None (and an older gallery removed) with nothing to show."""
    gallery = shift_plots.shift_gallery(store.out / "shift_gallery.png", store, names, data_dir, seed, ood)
    record_figures(store.out, "evaluate", [gallery] if gallery else [])
    if gallery:
        echo(f"wrote {gallery}")
    return gallery
