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
    """A colour per variant, none repeated: the colour-blind palette up to its 10 colours, then tab20's
    20, then evenly spaced hues."""
    n = len(variants)
    colors = sns.color_palette("colorblind" if n <= 10 else "tab20" if n <= 20 else "husl", n)
    return dict(zip(variants, colors))


def short_labels(runs: pd.DataFrame) -> dict[str, str]:
    """Each variant's name in a figure: its method's label (DE (NLL), DARE, MC dropout, ...) and, where
    variants share a label, the options that tell them apart (SWAG (members=1) beside SWAG (members=3));
    the whole variant where even those do not."""
    first = runs.drop_duplicates("variant")
    labels = dict(zip(first["variant"], first["label"] if "label" in first else first["variant"]))
    out = {}
    for label in dict.fromkeys(labels.values()):
        variants = [v for v, l in labels.items() if l == label]
        options = [_options(v) for v in variants]
        differing = [k for k in dict.fromkeys(k for o in options for k in o) if len({o.get(k) for o in options}) > 1]
        for variant, opts in zip(variants, options):
            told = ", ".join(f"{k}={opts.get(k, '-')}" for k in differing)
            out[variant] = f"{label} ({told})" if differing else str(label)
    if len(set(out.values())) < len(out):  # options alone do not tell some apart (e.g. two select grids)
        return {v: v for v in out}
    return out


def _options(variant: str) -> dict[str, str]:
    """The options of a variant string, 'method(k=v, k=v; select ...)', as {k: v} (the select spec under 'select')."""
    inner = variant[variant.find("(") + 1:variant.rfind(")")] if "(" in variant else ""
    fixed, _, select = inner.partition("; select ")
    out = dict(part.split("=", 1) for part in fixed.split(", ") if "=" in part)
    if select:
        out["select"] = select
    return out


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

    # a folder's figures share one colour and one name per variant (bench.reporting.figures.write_figures
    # sets them from every protocol's variants); alone, a view makes its own
    @functools.cached_property
    def colors(self) -> dict[str, tuple]:
        return palette(self.variants)

    @functools.cached_property
    def labels(self) -> dict[str, str]:
        return short_labels(self.runs)
