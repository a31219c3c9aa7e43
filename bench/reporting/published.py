"""Published tables as a registry: each is data in bench/published, NAME.csv (its cells, each with
its source) beside NAME.toml (its card: the paper, the link, the presets that reproduce it, the
metric conventions, what the paper leaves open, how its method names map to the harness's row
labels, why a row is not run, and the networks it trained as protocol values: ``[protocol]``, e.g.
arch = "mlp"; a row whose networks differ gets no verdict). A preset names one as ``compare_to``;
``paper-table`` and ``report`` put a folder's runs beside it (bench.reporting.paper), every cell with a verdict
(bench.reporting.verdicts).

A published cell's ``metric`` is one of ``PUBLISHED_METRICS``: the harness column it is compared
with, the scale that puts the harness's value in the published unit, and how it is worded.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import pandas as pd

from bench.config import Protocol, named_file
from bench.errors import ConfigError

PUBLISHED_DIR = Path(__file__).parent.parent / "published"
PUBLISHED_COLUMNS = {"in_distribution", "ood_set", "method", "metric", "mean", "std", "n_seeds", "source"}
CARD_KEYS = {"title", "paper", "link", "presets", "conventions", "left_open", "labels", "not_run", "paired_with",
             "protocol", "options"}


@dataclasses.dataclass(frozen=True)
class PublishedMetric:
    """A published quantity: its title, the harness column (for AUROC, made from the OOD set and each
    row's score by bench.evaluation.columns), the factor from the harness's value to the published unit,
    and the digits a table shows."""
    title: str
    column: str
    scale: float
    digits: int


PUBLISHED_METRICS = {
    "accuracy_pct": PublishedMetric("ID accuracy", "id_acc", 100, 1),
    "nll_nats": PublishedMetric("ID NLL (nats)", "id_nll_nats", 1, 3),
    "ece_10_bins": PublishedMetric("ID ECE (10 bins)", "id_ece_10_bins", 1, 3),
    # uncertainty-baselines' binning: [lo, hi) on the float32 confidence, a confidence of 1.0 left out
    "ece_10_bins_ub": PublishedMetric("ID ECE (UB's 10 bins)", "id_ece_10_bins_ub", 1, 3),
    "auroc_pct": PublishedMetric("AUROC vs {set}", "auroc", 100, 1),
}


@dataclasses.dataclass(frozen=True)
class PublishedTable:
    """One published table: its cells (``cells``: PUBLISHED_COLUMNS, plus ``resolution``, half a unit of
    each published mean's last digit) and its card's fields."""
    name: str
    cells: pd.DataFrame
    title: str = ""
    paper: str = ""
    link: str = ""
    presets: tuple[str, ...] = ()
    conventions: str = ""
    left_open: str = ""
    labels: dict[str, str] = dataclasses.field(default_factory=dict)   # published method -> harness label
    not_run: dict[str, str] = dataclasses.field(default_factory=dict)  # published method -> why no harness row
    paired_with: tuple[str, ...] = ()  # harness labels each row is paired with, seed by seed
    protocol: dict[str, str] = dataclasses.field(default_factory=dict)  # Protocol field -> the published runs' value
    # published method -> {method option: value} its runs used (members = 10): a row with others gets no verdict
    options: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    def label(self, method: str) -> str:
        """The harness row label of a published method (the card's ``labels``; else the same name)."""
        return self.labels.get(method, method)


def available_tables() -> list[str]:
    return sorted(p.stem for p in PUBLISHED_DIR.glob("*.csv"))


def load_published(name_or_path: str) -> PublishedTable:
    """A published table by name (bench/published/NAME.csv and its card NAME.toml) or a CSV's path
    (its card beside it, when there is one)."""
    path = named_file(name_or_path, PUBLISHED_DIR, ".csv", "published table")
    text = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = PUBLISHED_COLUMNS - set(text.columns)
    if missing:
        raise ConfigError(f"published table {path}: missing columns {', '.join(sorted(missing))}")
    unknown = sorted(set(text["metric"]) - set(PUBLISHED_METRICS))
    if unknown:
        raise ConfigError(f"published table {path}: unknown metric {', '.join(unknown)} "
                          f"(known: {', '.join(PUBLISHED_METRICS)})")
    unsourced = text.index[text["source"].str.strip() == ""]
    if len(unsourced):
        raise ConfigError(f"published table {path}: row {unsourced[0] + 2} cites no source "
                          "(every cell names its source)")
    twice = text.duplicated(["in_distribution", "ood_set", "method", "metric"])
    if twice.any():
        row = text[twice].iloc[0]
        raise ConfigError(f"published table {path}: row {text.index[twice][0] + 2} repeats the cell ({row['method']}, "
                          f"{row['metric']}, {row['in_distribution']}, ood_set={row['ood_set'] or '-'})")
    cells = text.assign(mean=pd.to_numeric(text["mean"].replace("", math.nan)),
                        std=pd.to_numeric(text["std"].replace("", math.nan)),
                        n_seeds=pd.to_numeric(text["n_seeds"].replace("", math.nan)),
                        resolution=text["mean"].map(_resolution))
    card = _card(path.with_suffix(".toml"))
    unknown = sorted(set(card.get("options", {})) - set(cells["method"]))
    if unknown:
        raise ConfigError(f"published table card {path.with_suffix('.toml')}: [options] names {', '.join(unknown)}, "
                          f"not a method of its table (methods: {', '.join(dict.fromkeys(cells['method']))})")
    return PublishedTable(path.stem, cells, **card)


def _resolution(value: str) -> float:
    """Half a unit of a published number's last digit ('0.016' -> 0.0005): how far rounding may have moved it."""
    if not value.strip():
        return math.nan
    decimals = len(value.split(".")[1]) if "." in value else 0
    return 0.5 * 10 ** -decimals


def option_text(value) -> str:
    """A method option's value as cards and rows compare it: 10 and 10.0 read alike."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _card(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        card = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"published table card {path}: {error}") from None
    unknown = sorted(set(card) - CARD_KEYS)
    if unknown:
        raise ConfigError(f"published table card {path}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(CARD_KEYS))})")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    unknown = sorted(set(card.get("protocol", {})) - fields)
    if unknown:
        raise ConfigError(f"published table card {path}: [protocol] names {', '.join(unknown)}, not a protocol field "
                          f"(known: {', '.join(sorted(fields))})")
    card["protocol"] = {k: str(v) for k, v in card.get("protocol", {}).items()}
    # 10 and 10.0 read alike, as options_differ writes a row's value
    card["options"] = {m: {k: option_text(v) for k, v in values.items()} for m, values in card.get("options", {}).items()}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in card.items()}
