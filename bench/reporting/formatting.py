"""How numbers are written in the tables: a mean ± sd cell, a paired difference with its interval."""
from __future__ import annotations

import math

import pandas as pd


def spread(std: float, digits: int) -> str:
    """An sd with ``digits`` decimals, or with its first significant figure where that many would print
    0 (99.1 ± 0.05 beside an interval of ± 0.3, not ± 0.0)."""
    if 0 < std < 0.5 * 10 ** -digits:
        digits = -math.floor(math.log10(std))
    return f"{std:.{digits}f}"


def mean_std(mean, std, scale: float, digits: int) -> str:
    if mean is None or pd.isna(mean):
        return "-"
    std = 0.0 if std is None or pd.isna(std) else std  # one seed: no spread to show
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def format_difference(result: dict, scale: float = 1.0, digits: int = 3) -> str:
    """'+0.012 [+0.004, +0.020] *' (the mark when the interval excludes 0); '-' without pairs."""
    if not result["n"] or pd.isna(result["mean"]):
        return "-"
    mean = f"{result['mean'] * scale:+.{digits}f}"
    if pd.isna(result["low"]):
        return f"{mean} (n={int(result['n'])})"
    return (f"{mean} [{result['low'] * scale:+.{digits}f}, {result['high'] * scale:+.{digits}f}]"
            + (" *" if result["real"] else ""))
