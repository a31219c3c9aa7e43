"""Declarative, validated options shared by run configs and method options.

Every option is a dataclass field made with :func:`option`, carrying a parser (which also accepts
the strings given on the command line), a range check and a human description of what is allowed.
One mechanism validates presets, CLI flags and Python calls alike.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from bench.errors import ConfigError


def option(default: Any, parse: Callable[[Any], Any], allowed: str,
           check: Callable[[Any], bool] | None = None, help: str = "", excludes: tuple[str, ...] = (),
           implicit: bool = False, flag: str = ""):
    """A dataclass field with a parser, a range check and help text.

    ``excludes`` names options that may not be given together with this one (e.g. DARE's relative
    ``delta`` and absolute ``threshold``): a grid that sets this option on the command line drops a
    preset's value of the excluded ones, and giving both explicitly is an error.
    ``implicit``: at its default the option is left out of a run's config (its id, variant and
    columns), so that an option added after runs were recorded keeps their ids
    (``without_implicit_defaults``).
    ``flag``: its command-line flag where it is not ``--name`` (bench.cli.arguments makes the flags of
    the execution options from these declarations).
    """
    return dataclasses.field(default=default, metadata={
        "parse": parse, "check": check, "allowed": allowed, "help": help, "excludes": excludes,
        "implicit": implicit, "flag": flag})


def choice(default: str, choices: tuple[str, ...], help: str = "", implicit: bool = False):
    """An option whose value is one of ``choices``."""
    return option(default, parse_str, " or ".join(choices), check=lambda v: v in choices, help=help,
                  implicit=implicit)


def without_implicit_defaults(obj_cls, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` less the implicit options (``option(implicit=True)``) that are at their default."""
    implicit = {f.name: f.default for f in dataclasses.fields(obj_cls) if f.metadata.get("implicit")}
    return {k: v for k, v in values.items() if k not in implicit or v != implicit[k]}


# -- parsers: accept the Python value or its command-line string, raise ValueError otherwise ---

def parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError


def parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError


def parse_optional_float(value: Any) -> float | None:
    return parse_optional(parse_float)(value)


def parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value.strip()


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise ValueError


def parse_optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse``, but None / 'none' / 'off' / '' mean None."""
    def parse_or_none(value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "")):
            return None
        return parse(value)
    return parse_or_none


def parse_str_tuple(value: Any) -> tuple[str, ...]:
    """'mnist,cifar10_gray28', ['mnist'], [] -> a tuple of names."""
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, (list, tuple)):
        return tuple(parse_str(v) for v in value)
    raise ValueError


def parse_int_tuple(value: Any) -> tuple[int, ...]:
    """'256-256', '256,256', [256, 256] -> (256, 256)."""
    if isinstance(value, str):
        parts = [p for p in value.replace(",", "-").replace(" ", "-").split("-") if p]
        return tuple(parse_int(p) for p in parts)
    if isinstance(value, (list, tuple)):
        return tuple(parse_int(v) for v in value)
    raise ValueError


def is_finite_nonneg(v: float) -> bool:
    return math.isfinite(v) and v >= 0


def validate(obj_cls, values: dict[str, Any], what: str) -> dict[str, Any]:
    """Parse and check ``values`` against the option fields of ``obj_cls``.

    Returns a complete dict (defaults filled in). Raises ConfigError naming the field, the value
    and what is allowed, for unknown names, unparsable values and out-of-range values. Options
    that exclude each other may not both be given; when one is given, the other becomes None.
    Finally ``obj_cls.check_options(values, what)``, if the class has it, checks (and may complete)
    the values as a whole, e.g. a rule that needs another option.
    """
    fields = {f.name: f for f in dataclasses.fields(obj_cls) if "parse" in f.metadata}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        known = ", ".join(fields) or "none"
        raise ConfigError(f"{what}: unknown option '{unknown[0]}' (known options: {known})")
    out = {}
    for name, f in fields.items():
        raw = values.get(name, f.default)
        meta = f.metadata
        try:
            value = meta["parse"](raw)
        except (ValueError, TypeError, OverflowError):
            raise ConfigError(f"{what}: {name}={raw!r} is not valid; allowed: {meta['allowed']}") from None
        if meta["check"] is not None and not meta["check"](value):
            raise ConfigError(f"{what}: {name}={raw!r} is out of range; allowed: {meta['allowed']}")
        out[name] = value
    for name, f in fields.items():
        for other in f.metadata.get("excludes", ()):
            if name in values and out[name] is not None:
                if other in values and out[other] is not None:
                    raise ConfigError(f"{what}: give {name} or {other}, not both "
                                      f"({name}={values[name]!r}, {other}={values[other]!r})")
                out[other] = None
    if hasattr(obj_cls, "check_options"):
        out = obj_cls.check_options(out, what)
    return out


def describe(obj_cls) -> list[tuple[str, Any, str, str]]:
    """(name, default, allowed, help) for each option field, for listings and --help."""
    return [(f.name, f.default, f.metadata["allowed"], f.metadata["help"])
            for f in dataclasses.fields(obj_cls) if "parse" in f.metadata]
