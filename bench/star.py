"""One-at-a-time ("star") designs: a base grid and settings that each change one choice of it.

The base is what a preset (with ``-o`` and protocol flags) describes, one configuration per
method. A setting is a set of changes to it:
- a protocol value (``epochs=20``, ``preprocess=raw``): every method changes;
- a method option (``dare.delta=0.1``; ``members=3`` for every method that has the option);
- ``ood_score=NAME``: the OOD score the comparison reads, for every method; no training.
Every setting expands into the same grid as the base (every method, every seed) through
``bench.grid.expand_grid``, so the knobs are the declared protocol values and method options with
no per-knob code here. A run a setting does not change has the base's run id, so it trains once
and is shared (DARE's delta settings reuse the base's deep ensemble).

``star_design.csv`` in the results folder names, per setting, the runs it reads; ``star_table``
turns it and the runs into one tidy table: per setting and method each metric's mean, sd and n
over seeds, the checkpoint counts of methods with a checkpoint rule, and each method's paired
difference to the reference method (the deep ensemble) of the same setting, with its 95 %
t-interval (``bench.paired``).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from bench.config import Protocol
from bench.errors import ConfigError
from bench.grid import OPTION_FLAG, Assignment, GridItem, expand_grid
from bench.metrics import SHARED_SCORES, ood_column, scored_sets
from bench.paired import REFERENCE_METHOD, pair
from methods import get_method

VARY_FLAG = "--vary"
SCORE_KNOB = "ood_score"  # an evaluation choice: which score the comparison reads (no training)
BASE = "base"
DESIGN_FILE = "star_design.csv"
DESIGN_COLUMNS = ["order", "setting", "choice", "is_base", "score", "method", "variant", "seed", "run_id"]
VALUE_METRICS = ("id_acc", "id_nll_nats", "id_ece")
PAIRED_METRICS = ("id_acc", "id_nll_nats")
TIDY_COLUMNS = ["setting", "choice", "is_base", "kind", "method", "label", "reference", "metric", "ood_set",
                "score", "compared", "n", "mean", "sd", "low", "high", "real", "total", "out_of", "note"]


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
    primaries = {i.runs()[0].make_method().primary_score for i in items}
    known = list(dict.fromkeys([*SHARED_SCORES, *(sorted(primaries) if len(primaries) == 1 else [])]))
    if score not in known:
        raise ConfigError(f"star setting '{name}': unknown score '{score}' for its methods "
                          f"(known: {', '.join(known)})")
    return primaries


# -- after training: the tidy table ----------------------------------------------------------------

def write_design(out: Path, design: StarDesign) -> Path:
    path = Path(out) / DESIGN_FILE
    design.frame().to_csv(path, index=False)
    return path


def read_design(out: Path) -> pd.DataFrame:
    path = Path(out) / DESIGN_FILE
    if not path.is_file():
        raise ConfigError(f"{out}: no {DESIGN_FILE}; run `python -m bench ablate --design star` into this folder first")
    return pd.read_csv(path, keep_default_na=False, dtype={"run_id": str})


def star_table(design: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The tidy table of a star design (TIDY_COLUMNS): kind 'value' (a method's metric: mean, sd,
    n over seeds; AUROC per OOD set and score, ``compared`` marking the score the comparison
    reads), 'checkpoint' (members whose checkpoint rule kept an epoch, ``total`` of ``out_of``,
    and members restored to an earlier epoch than their last) and 'paired' (the method minus the
    reference method of the same setting, seed by seed: mean and 95 % t-interval)."""
    rows: list[dict] = []
    by_id = runs.drop_duplicates("run_id").set_index("run_id", drop=False) if len(runs) else runs
    for _, part in design.groupby("order", sort=True):
        first = part.iloc[0]
        head = {"setting": first["setting"], "choice": first["choice"], "is_base": _bool(first["is_base"])}
        frames = {m: by_id.loc[by_id.index.intersection(g["run_id"])] for m, g in part.groupby("method", sort=False)}
        found = [f for f in frames.values() if len(f)]
        chosen = {m: first["score"] or (f["primary_score"].iloc[0] if len(f) else "") for m, f in frames.items()}
        sets = scored_sets(pd.concat(found), added=False) if found else []
        for method, frame in frames.items():
            if frame.empty:  # no record yet: the setting keeps its line, with nothing in it
                rows.append({**head, "kind": "value", "method": method, "metric": "id_acc", "n": 0,
                             "note": "no finished record"})
                continue
            ok = frame[frame["status"] == "ok"]
            ident = {**head, "method": method, "label": frame["label"].iloc[0]}
            for metric in VALUE_METRICS:
                rows.append({**ident, "kind": "value", "metric": metric, **_stats(ok, metric)})
            scores = list(dict.fromkeys([*SHARED_SCORES, frame["primary_score"].iloc[0]]))
            for ood_set in sets:
                for score in scores:
                    column = ood_column("auroc", score, ood_set)
                    if column in ok:
                        rows.append({**ident, "kind": "value", "metric": "auroc", "ood_set": ood_set,
                                     "score": score, "compared": score == chosen[method], **_stats(ok, column)})
            rows += _checkpoint_rows(ident, ok)
        reference = frames.get(REFERENCE_METHOD)
        if reference is None:
            continue
        for method, frame in frames.items():
            if method == REFERENCE_METHOD:
                continue
            ident = {**head, "kind": "paired", "method": method, "reference": REFERENCE_METHOD,
                     "label": frame["label"].iloc[0] if len(frame) else ""}
            caveat = _loss_caveat(frame, reference)
            for ood_set in sets:
                own, theirs = (ood_column("auroc", chosen[m], ood_set) for m in (method, REFERENCE_METHOD))
                missing = [c for c, f in ((own, frame), (theirs, reference)) if c not in f]
                result = _paired(pair(frame, reference, own, theirs))
                note = "; ".join(n for n in (caveat, result["note"], f"no column {', '.join(missing)} in the records "
                                             "(bench evaluate adds new scores)" if missing else "") if n)
                rows.append({**ident, "metric": "auroc", "ood_set": ood_set, "compared": True,
                             "score": chosen[method] if chosen[method] == chosen[REFERENCE_METHOD]
                             else f"{chosen[method]} - {chosen[REFERENCE_METHOD]}", **result, "note": note})
            for metric in PAIRED_METRICS:
                result = _paired(pair(frame, reference, metric))
                rows.append({**ident, "metric": metric, **result,
                             "note": "; ".join(n for n in (caveat, result["note"]) if n)})
    table = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    return table


def _loss_caveat(frame: pd.DataFrame, reference: pd.DataFrame) -> str:
    """A note when the method and its reference trained on different losses."""
    losses = [f["loss"].dropna().iloc[0] if "loss" in f and f["loss"].notna().any() else "ce"
              for f in (frame, reference)]
    return "" if losses[0] == losses[1] else f"the method trained on {losses[0]}, its reference on {losses[1]}"


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1")


def _stats(frame: pd.DataFrame, column: str) -> dict:
    values = frame[column].astype(float).dropna() if column in frame else pd.Series(dtype=float)
    return {"n": len(values), "mean": values.mean() if len(values) else math.nan,
            "sd": values.std() if len(values) > 1 else math.nan}


def _paired(result: dict) -> dict:
    return {"n": result["n"], "mean": result["mean"], "low": result["low"], "high": result["high"],
            "real": result["real"], "note": result["note"]}


def _members(text: Any) -> list[int]:
    return [int(v) for v in str(text).split()] if isinstance(text, str) and text.strip() else []


def _checkpoint_rows(ident: dict, ok: pd.DataFrame) -> list[dict]:
    """For a method with a checkpoint rule: members whose rule kept an epoch (the rule fired at
    least once), and members restored to an epoch before their last (the rule changed the weights)."""
    if ok.empty or "checkpoint" not in ok or (ok["checkpoint"].astype(str) == "none").all():
        return []
    kept = [_members(v) for v in ok["kept_epochs"]]
    last = [_members(v) for v in ok["epochs_run"]]
    fired = [sum(k > 0 for k in ks) for ks in kept]
    earlier = [sum(0 < k < e for k, e in zip(ks, es)) for ks, es in zip(kept, last)]
    members = sum(len(ks) for ks in kept)
    return [{**ident, "kind": "checkpoint", "metric": name, "n": len(counts), "mean": float(np.mean(counts)),
             "sd": float(np.std(counts, ddof=1)) if len(counts) > 1 else math.nan, "total": int(sum(counts)),
             "out_of": members}
            for name, counts in (("members_checkpoint_kept", fired), ("members_restored_earlier", earlier))]


def setting_summary(table: pd.DataFrame, reference: str = REFERENCE_METHOD) -> pd.DataFrame:
    """One row per (setting, compared method, OOD set): both methods' AUROC by the compared score,
    the paired difference with its interval, how each method moved from the base, the reference's
    predictive-entropy AUROC, the accuracy difference and the checkpoint counts."""
    rows = []
    paired = table[(table["kind"] == "paired") & (table["metric"] == "auroc")]
    # the first OOD set of each setting's protocol (a setting may change the ID dataset, and with it the set)
    first = ~paired.duplicated(["setting", "method"])
    for (_, p), is_first in zip(paired.iterrows(), first):
        at = table[table["setting"] == p["setting"]]
        base = table[table["is_base"].astype(bool)]

        def value(frame, method, score=None):
            v = frame[(frame["kind"] == "value") & (frame["method"] == method) & (frame["metric"] == "auroc")
                      & (frame["ood_set"] == p["ood_set"])]
            v = v[v["score"] == score] if score else v[v["compared"].astype(bool)]
            return float(v["mean"].iloc[0]) if len(v) else math.nan

        def acc(frame):
            v = frame[(frame["kind"] == "paired") & (frame["method"] == p["method"]) & (frame["metric"] == "id_acc")]
            return v.iloc[0] if len(v) else None

        base_p = paired[paired["is_base"].astype(bool) & (paired["method"] == p["method"])
                        & (paired["ood_set"] == p["ood_set"])]
        base_mean = float(base_p["mean"].iloc[0]) if len(base_p) else math.nan
        fired = at[(at["kind"] == "checkpoint") & (at["method"] == p["method"])
                   & (at["metric"] == "members_checkpoint_kept")]
        earlier = at[(at["kind"] == "checkpoint") & (at["method"] == p["method"])
                     & (at["metric"] == "members_restored_earlier")]
        a = acc(at)
        rows.append({
            "setting": p["setting"], "choice": p["choice"], "is_base": bool(p["is_base"]), "method": p["method"],
            "reference": reference, "ood_set": p["ood_set"], "first_set": bool(is_first), "score": p["score"],
            "n": p["n"],
            f"auroc_{reference}": value(at, reference), f"auroc_{p['method']}": value(at, p["method"]),
            "difference": p["mean"], "low": p["low"], "high": p["high"], "real": bool(p["real"]),
            "same_sign_as_base": bool(np.sign(p["mean"]) == np.sign(base_mean)) if not math.isnan(base_mean) else None,
            f"{reference}_moved": value(at, reference) - value(base, reference),
            f"{p['method']}_moved": value(at, p["method"]) - value(base, p["method"]),
            f"{reference}_pred_entropy_auroc": value(at, reference, "pred_entropy"),
            "acc_difference": a["mean"] if a is not None else math.nan,
            "acc_low": a["low"] if a is not None else math.nan, "acc_high": a["high"] if a is not None else math.nan,
            "checkpoint_kept": f"{int(fired['total'].iloc[0])}/{int(fired['out_of'].iloc[0])}" if len(fired) else "",
            "restored_earlier": f"{int(earlier['total'].iloc[0])}/{int(earlier['out_of'].iloc[0])}" if len(earlier) else "",
            "note": p["note"] if isinstance(p["note"], str) else ""})
    return pd.DataFrame(rows)


def _signed(value: float, digits: int = 3) -> str:
    return "" if pd.isna(value) else f"{value:+.{digits}f}"


def format_summary(summary: pd.DataFrame) -> str:
    """The setting summary as Markdown: per compared method, a table against each setting's first
    OOD set, then one against its other sets (if any)."""
    out = []
    for (method, first), part in summary.groupby(["method", "first_set"], sort=False):
        reference = part["reference"].iloc[0]
        sets = "each setting's first OOD set" if first else "the other OOD sets"
        out += [f"### {method} − {reference}: AUROC vs {sets}", "",
                f"| choice | setting | OOD set | score | n | AUROC {reference} | AUROC {method} | Δ AUROC [95 % CI] | "
                f"moved from base ({reference} / {method}) | {reference} entropy AUROC | Δ acc (points) | "
                f"checkpoints kept | restored earlier | note |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in part.iterrows():
            name = f"**{r['setting']}**" if r["is_base"] else r["setting"]
            diff = (f"{r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]" + (" *" if r["real"] else "")
                    if not pd.isna(r["low"]) else "-" if pd.isna(r["difference"]) else f"{r['difference']:+.3f}")
            moved = ("" if r["is_base"] or pd.isna(r[f"{reference}_moved"])
                     else f"{_signed(r[f'{reference}_moved'])} / {_signed(r[f'{method}_moved'])}")
            acc = _signed(100 * r["acc_difference"], 2)
            out.append(f"| {r['choice']} | {name} | {r['ood_set']} | {r['score']} | {r['n']} | {r[f'auroc_{reference}']:.3f} | "
                       f"{r[f'auroc_{method}']:.3f} | {diff} | {moved} | {r[f'{reference}_pred_entropy_auroc']:.3f} | "
                       f"{acc} | {r['checkpoint_kept']} | {r['restored_earlier']} | {r['note']} |")
        out.append("")
    return "\n".join(out)


def write_star(out: Path, runs: pd.DataFrame, plots: bool = True, title: str = "") -> list[Path]:
    """OUT/star.csv (tidy), OUT/star_summary.csv and OUT/star.md (one row per setting) and, unless
    not ``plots``, OUT/star_forest.png, from OUT/star_design.csv and the folder's runs."""
    out = Path(out)
    table = star_table(read_design(out), runs)
    summary = setting_summary(table)
    table.to_csv(out / "star.csv", index=False)
    summary.to_csv(out / "star_summary.csv", index=False)
    (out / "star.md").write_text(f"# {title or 'Star design'}\n\nOne choice changed at a time from the base "
                                 "(bold); Δ: paired over seeds, 95 % t-interval, * when it excludes 0. "
                                 "Checkpoints kept: members whose checkpoint rule kept an epoch; restored earlier: "
                                 "members whose kept epoch is before their last.\n\n" + format_summary(summary))
    files = [out / "star.csv", out / "star_summary.csv", out / "star.md"]
    if plots:
        from bench.plots import star_forest
        forest = star_forest(out / "star_forest.png", title or "star design", summary)
        if forest:
            files.append(forest)
    return files
