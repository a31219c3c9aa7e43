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
           check: Callable[[Any], bool] | None = None, help: str = ""):
    """A dataclass field with a parser, a range check and help text."""
    return dataclasses.field(default=default, metadata={
        "parse": parse, "check": check, "allowed": allowed, "help": help})


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
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "")):
        return None
    return parse_float(value)


def parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value.strip()


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
    and what is allowed, for unknown names, unparsable values and out-of-range values.
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
    return out


def describe(obj_cls) -> list[tuple[str, Any, str, str]]:
    """(name, default, allowed, help) for each option field, for listings and --help."""
    return [(f.name, f.default, f.metadata["allowed"], f.metadata["help"])
            for f in dataclasses.fields(obj_cls) if "parse" in f.metadata]
