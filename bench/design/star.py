"""One-at-a-time ("star") designs: a base grid and settings that each change one choice of it.

The base is what a preset (with ``-o`` and protocol flags) describes, one configuration per
method. A setting is a set of changes to it:
- a protocol value (``epochs=20``, ``preprocess=raw``): every method changes;
- a method option (``dare.delta=0.1``; ``members=3`` for every method that has the option);
- ``ood_score=NAME``: the OOD score the comparison reads, for every method; no training.
Every setting expands into the same grid as the base (every method, every seed) through
``bench.design.grid.expand_grid``, so the knobs are the declared protocol values and method options with
no per-knob code here. A run a setting does not change has the base's run id, so it trains once
and is shared (DARE's delta settings reuse the base's deep ensemble).

``star_design.csv`` in the results folder names, per setting, the runs it reads;
``bench.reporting.star_tables`` turns it and the runs into the star's tables.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from bench.config import REFERENCE_METHOD, Protocol
from bench.errors import ConfigError
from bench.design.grid import OPTION_FLAG, Assignment, GridItem, expand_grid
from bench.evaluation import scores
from methods import get_method
from bench.store import write_csv

VARY_FLAG = "--vary"
SCORE_KNOB = "ood_score"  # an evaluation choice: which score the comparison reads (no training)
BASE = "base"
DESIGN_FILE = "star_design.csv"
DESIGN_COLUMNS = ["order", "setting", "choice", "is_base", "score", "method", "variant", "seed", "run_id"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One knob set to one value: METHOD.NAME=VALUE, or NAME=VALUE (a protocol value, an option of
    every method that has it, or ood_score)."""
    method: str | None
    name: str
    value: Any

    @property
    def key(self) -> str:
        return f"{self.method}.{self.name}" if self.method else self.name

    def __str__(self) -> str:
        return f"{self.key}={_show(self.value)}"


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "-".join(map(str, value))
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass(frozen=True)
class Setting:
    """The base (no changes) or one changed choice; ``choice`` groups settings in tables and plots."""
    changes: tuple[Change, ...] = ()
    choice: str = BASE

    @property
    def name(self) -> str:
        return ", ".join(map(str, self.changes)) if self.changes else BASE

    @property
    def is_base(self) -> bool:
        return not self.changes

    @property
    def score(self) -> str | None:
        return next((c.value for c in self.changes if c.name == SCORE_KNOB), None)


def _split_key(key: str) -> tuple[str | None, str]:
    method, dot, name = key.strip().rpartition(".")
    return (method or None) if dot else None, name


def parse_vary(text: str) -> list[Setting]:
    """--vary 'NAME=V1,V2' -> one setting per value; --vary 'A=1 B=2' (several assignments,
    separated by spaces) -> one setting changing them together."""
    parts = str(text).split()
    parsed = []
    for part in parts:
        key, sep, values = part.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"{VARY_FLAG} {text!r}: expected [METHOD.]NAME=VALUE[,VALUE...], or several "
                              "[METHOD.]NAME=VALUE separated by spaces for one setting that changes them together")
        parsed.append((*_split_key(key), [v.strip() for v in values.split(",")]))
    if not parsed:
        raise ConfigError(f"{VARY_FLAG} {text!r}: expected [METHOD.]NAME=VALUE[,VALUE...]")
    if len(parsed) == 1:
        method, name, values = parsed[0]
        return [Setting((Change(method, name, v),), name) for v in values]
    if any(len(values) > 1 for _, _, values in parsed):
        raise ConfigError(f"{VARY_FLAG} {text!r}: a setting that changes several knobs takes one value of each")
    return [Setting(tuple(Change(m, n, v[0]) for m, n, v in parsed), "+".join(n for _, n, _ in parsed))]


def preset_settings(tables: Any) -> list[Setting]:
    """A preset's ``[[star]]`` tables: a table with one knob whose value is a list gives one setting
    per value; a table with several knobs gives one setting that changes them together (a list
    there is one value, as hidden = [100, 100]). An optional ``choice`` names the group (default:
    the knob's name)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError("preset: star must be a list of tables ([[star]] ... in TOML)")
    settings = []
    for table in tables:
        knobs = {k: v for k, v in table.items() if k != "choice"}
        if not knobs:
            raise ConfigError(f"preset: a [[star]] table changes nothing: {table}")
        choice = table.get("choice")
        if len(knobs) == 1:
            key, values = next(iter(knobs.items()))
            method, name = _split_key(key)
            values = values if isinstance(values, list) else [values]
            if not values:
                raise ConfigError(f"preset: the [[star]] table of {key} has an empty list")
            settings += [Setting((Change(method, name, v),), str(choice or name)) for v in values]
            continue
        changes = tuple(Change(*_split_key(k), v) for k, v in knobs.items())
        settings.append(Setting(changes, str(choice or "+".join(c.name for c in changes))))
    return settings


@dataclasses.dataclass
class StarDesign:
    """The settings in order, the base first, and the grid items each one reads."""
    settings: list[Setting]
    items: dict[str, list[GridItem]]   # setting name -> its items (the base's where unchanged)

    def all_items(self) -> list[GridItem]:
        """Every item once (a run shared by several settings trains once), the base's first."""
        seen: dict[str, GridItem] = {}
        for setting in self.settings:
            for item in self.items[setting.name]:
                seen.setdefault(item.run_id, item)
        return list(seen.values())

    def shared(self, setting: Setting) -> int:
        """How many of a setting's items are the base's own."""
        base = {i.run_id for i in self.items[BASE]}
        return sum(i.run_id in base for i in self.items[setting.name])

    def frame(self) -> pd.DataFrame:
        """What star_design.csv holds: one row per (setting, item)."""
        rows = [{"order": order, "setting": s.name, "choice": s.choice, "is_base": s.is_base,
                 "score": s.score or "", "method": i.method, "variant": i.variant, "seed": i.seed, "run_id": i.run_id}
                for order, s in enumerate(self.settings) for i in self.items[s.name]]
        return pd.DataFrame(rows, columns=DESIGN_COLUMNS)


def expand_star(preset: str, preset_values: dict[str, Any], methods: list[str] | None, seeds: list[Any] | None,
                protocol_overrides: dict[str, Any], options: Iterable = (), selects: Iterable = (),
                settings: Iterable[Setting] = ()) -> StarDesign:
    """The base grid and one grid per setting, each validated before anything trains."""
    options = Assignment.many(options, OPTION_FLAG)
    selects = list(selects)
    settings = list(settings)
    if not settings:
        raise ConfigError("a star design needs settings: give --vary [METHOD.]NAME=V[,V...] (repeatable) or a "
                          "preset with [[star]] tables")
    base = expand_grid(preset, preset_values, methods, seeds, protocol_overrides, options, selects)
    chosen = list(dict.fromkeys(i.method for i in base))
    if REFERENCE_METHOD not in chosen:
        raise ConfigError(f"a star design compares each method with the {REFERENCE_METHOD} of the same setting; "
                          f"add it to the methods (now: {', '.join(chosen)})")
    _one_configuration_each(base)
    protocol_fields = {f.name for f in dataclasses.fields(Protocol)}
    option_names = {m: {f.name for f in dataclasses.fields(get_method(m)) if "parse" in f.metadata} for m in chosen}
    items = {BASE: base}
    ordered = [Setting()]
    seen = {(tuple(i.run_id for i in base), None): BASE}  # what a setting reads -> its name
    for setting in settings:
        if setting.name in items:
            raise ConfigError(f"star setting '{setting.name}' is given twice")
        protocol, assignments = dict(protocol_overrides), list(options)
        for change in setting.changes:
            if change.name == SCORE_KNOB and change.method is None:
                continue  # checked against the setting's own runs below
            elif change.method is None and change.name in protocol_fields:
                protocol[change.name] = change.value
            elif change.method is not None and change.method not in option_names:
                raise ConfigError(f"star setting '{setting.name}': method '{change.method}' is not among the "
                                  f"methods ({', '.join(chosen)})")
            elif change.name in (option_names[change.method] if change.method else set().union(*option_names.values())):
                assignments.append(Assignment(change.method, change.name, (change.value,), VARY_FLAG))
            else:
                raise ConfigError(f"star setting '{setting.name}': unknown knob '{change.key}': not a protocol "
                                  f"value, an option of {' or '.join(chosen) if change.method is None else change.method}"
                                  f", or {SCORE_KNOB} (`python -m bench list` shows them)")
        try:
            grid = expand_grid(preset, preset_values, methods, seeds, protocol, assignments, selects)
        except ConfigError as exc:
            raise ConfigError(f"star setting '{setting.name}': {exc}") from None
        score = None
        if setting.score is not None:
            primaries = _check_score(setting.name, setting.score, grid)
            score = None if primaries == {setting.score} else setting.score  # every method's own: no change
        same = seen.get((tuple(i.run_id for i in grid), score))
        if same is not None:
            raise ConfigError(f"star setting '{setting.name}' " + ("is the base itself: it changes nothing"
                              if same == BASE else f"reads the same runs and score as setting '{same}'"))
        seen[(tuple(i.run_id for i in grid), score)] = setting.name
        items[setting.name] = grid
        ordered.append(setting)
    return StarDesign(ordered, items)


def _one_configuration_each(base: list[GridItem]) -> None:
    """A star compares settings against one base: each method must be one configuration."""
    for method in dict.fromkeys(i.method for i in base):
        variants = list(dict.fromkeys(i.variant for i in base if i.method == method))
        if len(variants) > 1:
            raise ConfigError(f"a star design's base must be one configuration per method; {method} has "
                              f"{len(variants)} ({'; '.join(variants[:2])}): give each option one value")


def _check_score(name: str, score: Any, items: list[GridItem]) -> set[str]:
    """A score every method of the setting has (shared, or every method's own); returns their
    primary scores."""
    primaries = {i.runs()[0].built_method.primary_score for i in items}
    known = list(dict.fromkeys([*scores.shared(), *(sorted(primaries) if len(primaries) == 1 else [])]))
    if score not in known:
        raise ConfigError(f"star setting '{name}': unknown score '{score}' for its methods "
                          f"(known: {', '.join(known)})")
    return primaries


# -- after training: the tidy table ----------------------------------------------------------------

def write_design(out: Path, design: StarDesign) -> Path:
    path = Path(out) / DESIGN_FILE
    write_csv(design.frame(), path)
    return path


def read_design(out: Path) -> pd.DataFrame:
    path = Path(out) / DESIGN_FILE
    if not path.is_file():
        raise ConfigError(f"{out}: no {DESIGN_FILE}; run `python -m bench ablate --design star` into this folder first")
    return pd.read_csv(path, keep_default_na=False, dtype={"run_id": str})
