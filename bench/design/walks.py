"""Selection on the validation split, the way the DARE paper tunes its baselines.

A ``Selection`` is, for one method, seed and protocol, an ordered grid of option values. Its walk
trains the candidates in the given order (each an ordinary run in the store, so it resumes and is
never trained twice), scores each by the validation NLL of the member-averaged softmax
(``val_nll_nats``), and stops at the first candidate that scores worse than the best so far. The
early break may be limited to candidates matching some option values (the paper's AnchorNet walk
breaks only within its sigma = 10 row). The selection's own record copies the chosen run's
metrics, names the chosen values (``selected``), and lists every candidate with its score.
Nothing here reads a test metric.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from typing import Any, ClassVar

from bench.config import RunConfig, make_run_config
from bench.errors import ConfigError
from bench.options import parse_bool
from bench.provenance import COMMIT_KEY, VERSION_KEY

SCORE = "val_nll_nats"  # the validation NLL of the member-averaged softmax
# fields of the chosen candidate's record that say how it was made, not what it scored: a selection's
# record leaves them out (its pack) or has its own (its code, worker and time: stamped by the executor)
CANDIDATE_ONLY = ("pack_id", "pack_runs", "pack_networks", "worker", "finished_at", VERSION_KEY, COMMIT_KEY)


@dataclasses.dataclass(frozen=True)
class Selection:
    """One selection: a grid item (``bench.design.grid.GridItem``) of kind "selection"."""
    kind: ClassVar[str] = "selection"
    method: str
    fixed: dict[str, Any]                          # options that do not vary
    grid: tuple[tuple[str, tuple[Any, ...]], ...]  # (name, values in walk order), product in this order
    early_break: bool | dict[str, Any]             # True, False, or {name: value}: break only there
    protocol: Any
    seed: int
    preset: str

    def candidates(self) -> list[RunConfig]:
        if "_candidates" not in self.__dict__:  # built once: ids, rows and the walk all read them
            object.__setattr__(self, "_candidates", self._make_candidates())
        return self.__dict__["_candidates"]

    def _make_candidates(self) -> list[RunConfig]:
        names = [n for n, _ in self.grid]
        return [make_run_config(self.method, {**self.fixed, **dict(zip(names, combo))}, self.protocol,
                                self.seed, self.preset)
                for combo in itertools.product(*(values for _, values in self.grid))]

    def runs(self) -> list[RunConfig]:
        return self.candidates()

    @property
    def fixed_options(self) -> dict[str, Any]:
        """Every option but the walked ones, defaults filled in."""
        walked = dict(self.grid)
        return {k: v for k, v in self.candidates()[0].method_options.items() if k not in walked}

    def __post_init__(self):
        if isinstance(self.early_break, dict):  # the grid's own value: {sigma = 10} and {sigma = 10.0} agree
            grid = dict(self.grid)
            object.__setattr__(self, "early_break", {k: next((g for g in grid.get(k, ()) if same_value(g, v)), v)
                                                     for k, v in self.early_break.items()})

    def breaks_at(self, config: RunConfig) -> bool:
        """Whether the early break applies at this candidate."""
        if isinstance(self.early_break, dict):
            method = config.built_method
            return all(same_value(getattr(method, k, None), v) for k, v in self.early_break.items())
        return bool(self.early_break)

    @property
    def spec(self) -> str:
        grid = "; ".join(f"{n} in {list(v)}" for n, v in self.grid)
        where = ("" if self.early_break is True else " (no early break)" if self.early_break is False
                 else " (early break where " + ", ".join(f"{k}={v}" for k, v in self.early_break.items()) + ")")
        return f"{grid}{where}"

    def to_dict(self) -> dict[str, Any]:
        first = self.candidates()[0]
        return {"select": self.spec, **first.to_dict(), "method_options": self.fixed_options}

    @property
    def run_id(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, default=list)
        return "sel-" + hashlib.sha1(blob.encode()).hexdigest()[:12]

    @property
    def variant(self) -> str:
        fixed = ", ".join(f"{k}={v}" for k, v in self.fixed_options.items() if v is not None)
        return f"{self.method}({fixed}; select {self.spec})"

    def row(self) -> dict[str, Any]:
        first = self.candidates()[0].row()
        grid_names = {n for n, _ in self.grid}
        row = {k: v for k, v in first.items() if k not in grid_names}
        row.update(run_id=self.run_id, variant=self.variant, select=self.spec)
        return row

    def references(self) -> dict:
        """The runs its candidates need first (e.g. DARE's DE (MSE) reference when selecting delta),
        once each; listed by --dry-run. The walk runs them with the candidates that need them."""
        refs = {ref.run_id: (f"{role} of {c.variant}", ref) for c in self.candidates()
                for role, ref in c.references().items()}
        return dict(refs.values())


def same_value(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except (TypeError, ValueError):
        return a == b


def parse_select_spec(method: str, values: dict[str, Any], what: str,
                      fixed: set[str] = frozenset()) -> tuple[tuple, bool | dict]:
    """A preset's [select.METHOD] table -> (grid, early_break). ``fixed``: options that -o took out of
    the table; early_break may still name them (the break then applies where the fixed value matches)."""
    values = dict(values)
    early = values.pop("early_break", True)
    if isinstance(early, str):
        try:
            early = parse_bool(early)
        except ValueError:
            raise ConfigError(f"{what}: early_break={early!r} is not valid; allowed: true, false or "
                              "a table of option values such as {{sigma = 10}}") from None
    elif not isinstance(early, (bool, dict)):
        raise ConfigError(f"{what}: early_break={early!r} is not valid; allowed: true, false or a table of option values")
    grid = []
    for name, vals in values.items():
        vals = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        if not vals:
            raise ConfigError(f"{what}: the grid of '{name}' is empty; select needs at least one value")
        grid.append((name, tuple(vals)))
    if not grid:
        raise ConfigError(f"{what}: no option to select over (give e.g. lam = [0.01, 0.1, 1])")
    if isinstance(early, dict):
        unknown = sorted(set(early) - {n for n, _ in grid} - set(fixed))
        if unknown:
            raise ConfigError(f"{what}: early_break names '{unknown[0]}', which is not a selected option")
        for name, value in early.items():
            if name in fixed:
                continue
            if not any(same_value(value, v) for v in dict(grid)[name]):
                raise ConfigError(f"{what}: early_break {name}={value!r} is not among the grid's values "
                                  f"{list(dict(grid)[name])}")
    return tuple(grid), early


@dataclasses.dataclass
class Walk:
    """One selection's walk, candidate by candidate."""
    selection: Selection
    candidates: list[RunConfig]
    scores: list[dict] = dataclasses.field(default_factory=list)
    best: int | None = None
    stopped: str = ""

    @property
    def done(self) -> bool:
        return bool(self.stopped)

    def certain(self) -> list[RunConfig]:
        """The candidates this walk trains whatever their scores: up to and including the first at
        which it may break (a break needs a best so far, so it never comes at the first candidate)."""
        for i, config in enumerate(self.candidates[1:], start=1):
            if self.selection.breaks_at(config):
                return self.candidates[:i + 1]
        return self.candidates

    def next_candidate(self) -> RunConfig:
        return self.candidates[len(self.scores)]

    def observe(self, record: dict) -> None:
        config = self.candidates[len(self.scores)]
        score = record.get(SCORE) if record.get("status") == "ok" else None
        ok = isinstance(score, (int, float)) and math.isfinite(score)
        method = config.built_method  # every option, implicit ones at their default included
        self.scores.append({"run_id": config.run_id, **{n: getattr(method, n) for n, _ in self.selection.grid},
                            "status": record.get("status"), SCORE: score if ok else None})
        # a tie goes to the later value and the walk goes on, as in the paper's code (score <= best)
        if ok and (self.best is None or score <= self.scores[self.best][SCORE]):
            self.best = len(self.scores) - 1
        elif self.best is not None and self.selection.breaks_at(config) and (not ok or score > self.scores[self.best][SCORE]):
            self.stopped = f"early break at candidate {len(self.scores)}: worse than the best so far"
        if not self.stopped and len(self.scores) == len(self.candidates):
            self.stopped = "walked the whole grid"

    def record(self, chosen: dict | None) -> dict:
        """The selection's record: the chosen run's metrics under the selection's config (the caller
        stamps which code, worker and time made the selection)."""
        sel = self.selection
        row = sel.row()
        base = {"config": sel.to_dict(), "config_columns": [k for k in row if k not in ("run_id", "seed")],
                "candidates": self.scores, "walk": self.stopped,
                # a failed candidate may succeed once its method is fixed: the grid walks such a selection again
                "failed_candidates": sum(c["status"] == "error" for c in self.scores)}
        if chosen is None:
            return {**row, **base, "status": "error", "error": "no candidate finished with a finite validation NLL"}
        # the chosen run's config and how it executed (its pack, worker, code, time) stay its own
        skip = set(chosen["config_columns"]) | {"run_id", "config", "config_columns", "seed", *CANDIDATE_ONLY}
        metrics = {k: v for k, v in chosen.items() if k not in skip}
        picked = self.scores[self.best]
        selected = ", ".join(f"{n}={picked[n]}" for n, _ in sel.grid)
        return {**metrics, **row, **base, "selected": selected, "selected_run_id": chosen["run_id"]}
