"""A grid: a preset, ``-o`` option grids and ``--select`` tables turned into the items that a
command runs, every one validated before anything trains.

An item is either a run (``bench.config.RunConfig``) or a selection (``bench.design.walks.Selection``,
one option grid walked on the validation split). Both offer the ``GridItem`` interface, so the
executors, the dry run and the ablation treat them alike and tell them apart by ``kind``.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, ClassVar, Iterable, Mapping, Protocol as Interface

from bench.config import Protocol, RunConfig, make_protocol, make_run_config, overridden
from bench.errors import ConfigError
from bench.options import parse_bool
from bench.design.walks import Selection, parse_select_spec, same_value
from methods import Method, get_method

PRESET_KEYS = {"seeds", "methods", "protocol", "method_protocol", "method_options", "select", "compare_to", "out",
               "design", "star"}  # design = "star" with [[star]] tables: bench.design.star
OPTION_FLAG, SELECT_FLAG = "--option", "--select"


class GridItem(Interface):
    """What a grid holds: one run, or one selection over candidate runs."""
    kind: ClassVar[str]            # "run" or "selection"
    method: str
    seed: int
    preset: str
    protocol: Protocol

    @property
    def run_id(self) -> str: ...

    @property
    def variant(self) -> str: ...

    @property
    def fixed_options(self) -> dict[str, Any]: ...   # the method options the item does not vary

    def runs(self) -> list[RunConfig]: ...          # the runs it may train: itself, or its candidates

    def references(self) -> dict[str, RunConfig]: ...

    def row(self) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class Assignment:
    """One ``-o`` / ``--select`` value list: METHOD.NAME=V[,V...], or NAME=V[,V...] for every
    selected method that has NAME (``-o`` only). Values are strings from the command line or
    Python values from the API; the option's own parser reads both."""
    method: str | None
    name: str
    values: tuple[Any, ...]
    flag: str = OPTION_FLAG

    def __str__(self) -> str:
        key = f"{self.method}.{self.name}" if self.method else self.name
        return f"{key}=" + ",".join("none" if v is None else str(v) for v in self.values)

    def where(self) -> str:
        return f"{self.flag} {str(self)!r}"

    @classmethod
    def parse(cls, text: str, flag: str = OPTION_FLAG) -> "Assignment":
        """'dare.threshold=0.1,0.3' -> Assignment('dare', 'threshold', ('0.1', '0.3'))."""
        key, sep, values = text.partition("=")
        if not sep or not key.strip() or not values.strip():
            expected = "METHOD.NAME=VALUE[,VALUE...]" + (" or NAME=VALUE[,VALUE...]" if flag == OPTION_FLAG else "")
            raise ConfigError(f"{flag} {text!r}: expected {expected}")
        method, dot, name = key.strip().rpartition(".")
        item = cls(method if dot else None, name, tuple(v.strip() for v in values.split(",")), flag)
        if flag == SELECT_FLAG and item.method is None:
            raise ConfigError(f"{flag} {text!r}: expected METHOD.NAME=VALUE[,VALUE...]")
        return item

    @classmethod
    def many(cls, given: Mapping[str, Any] | Iterable[Any] | None, flag: str = OPTION_FLAG) -> list["Assignment"]:
        """Assignments from the API or the command line: {'dare.threshold': [0.1, 0.3], 'members': 5}
        (a list is a grid), or strings 'NAME=V,V', or Assignments."""
        if given is None:
            return []
        if isinstance(given, str):
            raise ConfigError(f"{flag}: expected a dict or a list of 'NAME=V,V' strings, not one string")
        if not isinstance(given, Mapping):
            return [g if isinstance(g, Assignment) else cls.parse(str(g), flag) for g in given]
        out = []
        for key, values in given.items():
            values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
            if not values:
                raise ConfigError(f"{flag} {key!r}: an empty list of values")
            method, dot, name = str(key).rpartition(".")
            if not name or (flag == SELECT_FLAG and not dot):
                raise ConfigError(f"{flag} {key!r}: expected METHOD.NAME" + ("" if flag == SELECT_FLAG else " or NAME"))
            out.append(cls(method if dot else None, name, values, flag))
        return out

    def early_break(self) -> bool | dict[str, Any]:
        """--select METHOD.early_break=true|false|NAME=VALUE[,NAME=VALUE]: the same choices as a
        preset's early_break (a bool, or the option values where the break applies)."""
        if len(self.values) == 1 and isinstance(self.values[0], (bool, dict)):
            return self.values[0]
        if len(self.values) == 1 and "=" not in str(self.values[0]):
            try:
                return parse_bool(self.values[0])
            except ValueError:
                pass
        pairs = [str(v).partition("=") for v in self.values]
        if not all(sep and k.strip() and v.strip() for k, sep, v in pairs):
            raise ConfigError(f"{self.where()}: early_break takes true, false or NAME=VALUE[,NAME=VALUE...] "
                              "(e.g. anchor_net.early_break=sigma=10)")
        return {k.strip(): v.strip() for k, _, v in pairs}


def exclusive_with(cls: type, name: str) -> set[str]:
    """Options of ``cls`` that may not be given together with option ``name``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = set(fields[name].metadata.get("excludes", ())) if name in fields else set()
    return out | {f.name for f in fields.values() if name in f.metadata.get("excludes", ())}


@dataclasses.dataclass
class MethodGrid:
    """One method's part of a grid while it is being built."""
    cls: type[Method]
    values: dict[str, list[Any]]                  # option -> values (a list is a grid)
    given: set[str] = dataclasses.field(default_factory=set)      # options set by -o
    select: dict[str, Any] | None = None          # the select table (grid and early_break)
    selected: set[str] = dataclasses.field(default_factory=set)   # options named by --select

    def set_option(self, name: str, values: list[Any]) -> None:
        for other in exclusive_with(self.cls, name) - self.given:  # -o dare.delta=... replaces a
            self.values.pop(other, None)                            # preset's threshold
        self.values[name] = values
        self.given.add(name)


def expand_grid(preset: str, preset_values: dict[str, Any], methods: list[str] | None,
                seeds: list[Any] | None, protocol_overrides: dict[str, Any],
                options: Iterable[str | Assignment] = (), selects: Iterable[str | Assignment] = ()) -> list[GridItem]:
    """Every (method, option combination, seed) item, validated before anything trains. A method
    with a selection spec (a preset's [select.METHOD] table, or --select METHOD.NAME=V,...) gives
    one ``Selection`` per remaining option combination and seed instead of runs. A preset's
    [method_protocol.METHOD] table changes protocol values for that method's runs alone (e.g. a
    published VI row trained for more epochs than the table's other rows); the command line's
    protocol values override it too."""
    unknown = sorted(set(preset_values) - PRESET_KEYS)
    if unknown:
        raise ConfigError(f"preset {preset}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(PRESET_KEYS))})")
    protocol = make_protocol(overridden(preset_values.get("protocol", {}), protocol_overrides))
    methods = methods or preset_values.get("methods") or []
    seeds = seeds if seeds is not None else preset_values.get("seeds", [0])
    if not methods:
        raise ConfigError("no methods selected: pass --methods")
    if not seeds:
        raise ConfigError("no seeds selected: pass --seeds")
    # a list in a preset's method options is a grid, like a comma list on the command line
    grids = {m: MethodGrid(get_method(m), {k: list(v) if isinstance(v, list) else [v]
                                           for k, v in preset_values.get("method_options", {}).get(m, {}).items()})
             for m in dict.fromkeys(methods)}
    for item in Assignment.many(options, OPTION_FLAG):
        for m in _targets(item, grids):
            grids[m].set_option(item.name, list(item.values))
    _preset_selects(preset_values.get("select", {}), grids)
    _command_line_selects(Assignment.many(selects, SELECT_FLAG), grids)
    own = preset_values.get("method_protocol", {})
    items: list[GridItem] = []
    for m, grid in grids.items():
        values = {**preset_values.get("protocol", {}), **own[m]} if m in own else None
        items += _items(m, grid, make_protocol(overridden(values, protocol_overrides)) if values else protocol, seeds, preset)
    return items


def _targets(item: Assignment, grids: dict[str, MethodGrid]) -> list[str]:
    """The methods an -o assignment sets: the one it names, or every selected method with the option."""
    if item.method:
        if item.method not in grids:
            get_method(item.method)  # unknown name -> error listing the registered ones
            raise ConfigError(f"{item.where()}: method '{item.method}' is not among the selected methods")
        return [item.method]
    targets = [m for m, g in grids.items() if item.name in {f.name for f in dataclasses.fields(g.cls)}]
    if not targets:
        raise ConfigError(f"{item.where()}: no selected method has an option '{item.name}'")
    return targets


def _preset_selects(tables: dict[str, dict], grids: dict[str, MethodGrid]) -> None:
    """A preset's [select.METHOD] tables; -o NAME on the command line takes NAME out of the table."""
    for m in tables:
        get_method(m)  # a preset may select for methods a command leaves out, but not for unknown ones
    for m, table in tables.items():
        if m in grids:
            spec = {k: v for k, v in table.items() if k not in grids[m].given}
            if set(spec) - {"early_break"}:
                grids[m].select = spec


def _command_line_selects(selects: list[Assignment], grids: dict[str, MethodGrid]) -> None:
    """--select METHOD.NAME=...: replaces the preset's select table of METHOD."""
    for item in selects:
        if item.method not in grids:
            get_method(item.method)
            raise ConfigError(f"{item.where()}: method '{item.method}' is not among the selected methods")
        grid = grids[item.method]
        if not grid.selected:
            grid.select = {"early_break": True}
        if item.name in grid.selected:
            raise ConfigError(f"{item.where()}: {item.method}.{item.name} is given twice; give its values once, "
                              "comma-separated")
        grid.select[item.name] = item.early_break() if item.name == "early_break" else list(item.values)
        grid.selected.add(item.name)
        for other in exclusive_with(grid.cls, item.name) - grid.given:  # as with -o
            grid.values.pop(other, None)


def _parsed_select(m: str, grid: MethodGrid) -> tuple[tuple, bool | dict]:
    """(grid, early_break) of a select table, each value parsed by its option's parser ('0.1' -> 0.1)."""
    walk, early = parse_select_spec(m, grid.select, f"select {m}", grid.given)
    fields = {f.name: f for f in dataclasses.fields(grid.cls) if "parse" in f.metadata}
    parsed = []
    for name, values in walk:
        if name not in fields:
            raise ConfigError(f"select {m}: unknown option '{name}' (known options: {', '.join(fields)})")
        try:
            parsed.append((name, tuple(fields[name].metadata["parse"](v) for v in values)))
        except (ValueError, TypeError):
            raise ConfigError(f"select {m}: {name}={list(values)} is not valid; allowed: "
                              f"{fields[name].metadata['allowed']}") from None
        repeated = [v for i, v in enumerate(parsed[-1][1]) if any(same_value(v, w) for w in parsed[-1][1][:i])]
        if repeated:  # two candidates with one run id: the walk would score one run twice
            raise ConfigError(f"select {m}: the grid of '{name}' lists {repeated[0]!r} twice")
    return tuple(parsed), early


def _items(m: str, grid: MethodGrid, protocol: Protocol, seeds: list[Any], preset: str) -> list[GridItem]:
    """A method's runs, or its selections: one per combination of the options it does not select."""
    walk, early = _parsed_select(m, grid) if grid.select else ((), True)
    selected = {n for n, _ in walk}
    both = sorted(selected & grid.given)
    if both:
        raise ConfigError(f"method {m}: option '{both[0]}' is both set (-o) and selected (--select)")
    if selected and protocol.val_size == 0:
        raise ConfigError(f"select {m}: selection scores candidates on the validation split; set val_size > 0")
    names = [n for n in grid.values if n not in selected]
    items: list[GridItem] = []
    for combo in itertools.product(*(grid.values[n] for n in names)):
        fixed = dict(zip(names, combo))
        for seed in seeds:
            if not walk:
                items.append(make_run_config(m, fixed, protocol, seed, preset))
                continue
            first = make_run_config(m, {**fixed, **{n: v[0] for n, v in walk}}, protocol, seed, preset)
            selection = Selection(m, fixed, walk, early, protocol, first.seed, preset)
            selection.runs()  # validate every candidate now, not mid-walk
            items.append(selection)
    return items
