"""What every figure shares: the file-only matplotlib backend, the score labels, the colour palette,
the title of a protocol's runs and what a protocol's figures are drawn from (ProtocolView)."""
from __future__ import annotations

import dataclasses
import functools

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from bench.evaluation.columns import selective_column  # noqa: E402
from bench.evaluation import scores  # noqa: E402
from bench.evaluation.scores import MAX_PROB  # noqa: E402

# the AUGRC of abstaining by the max mean probability: the runs have it once their selective metrics are in
MAX_PROB_AUGRC = selective_column("augrc", MAX_PROB)

def score_label(score: str) -> str:
    return scores.label(score)


def primary_of(runs: pd.DataFrame, variant: str) -> str:
    return str(runs.loc[runs["variant"] == variant, "primary_score"].iloc[0])


def palette(variants: list[str]) -> dict[str, tuple]:
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))


def protocol_title(runs) -> str:
    presets = ", ".join(dict.fromkeys(map(str, runs["preset"])))
    return f"preset {presets}: {runs['id_dataset'].iloc[0]} in distribution"


@dataclasses.dataclass
class ProtocolView:
    """What the figures of one protocol are drawn from (bench.reporting.figures builds one per protocol
    of a report and hands it to every registered figure)."""
    title: str                       # the protocol's label, shown in every title
    tag: str                         # appended to each file name ("" for a folder's own protocol)
    runs: pd.DataFrame               # its finished runs, each with its AUROC by its primary score (with_primary)
    arrays: dict[str, dict]          # run id -> the run's cached scores (RunStore.load_arrays), where it has them
    sets: list[str]                  # its own OOD sets that were scored
    class_names: tuple[str, ...] | None
    differences: pd.DataFrame        # its paired differences to the deep ensemble (bench.reporting.paired)
    shift: pd.DataFrame | None       # its rows of shift.csv (bench evaluate), None before
    shift_levels: pd.DataFrame | None  # those rows at the table level (MNIST-C's severity)

    @functools.cached_property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.runs["variant"]))

    @functools.cached_property
    def colors(self) -> dict[str, tuple]:
        return palette(self.variants)
