"""A verdict for each cell of a published table: is the harness's mean within the seed noise of the
published number?

The interval is the 95 % t-interval of the difference d = harness mean - published mean:

* with a published sd and seed count (the DARE table: mean ± sd over 5 runs), Welch's: the
  standard error sqrt(s_h^2 / n_h + s_p^2 / n_p), the Welch-Satterthwaite degrees of freedom;
* without a published sd (uncertainty-baselines' single numbers), the harness's own spread stands for
  both: s_h * sqrt(1 / n_h + 1 / n_p), n_h - 1 degrees of freedom, n_p the published seed count or,
  where the source gives none, 1 (a single run: the interval is then a prediction interval for one
  more seed's value).

The interval is widened on both sides by the published number's rounding (half a unit of its last
digit). ``inside`` when it holds 0, ``outside`` (by how much, with the interval) when it does not;
``not comparable`` (and why) without a published number, without harness runs, with one seed (no
spread to judge by), or when the runs are not the published setup: other networks or method options
(``incomparable``).
"""
from __future__ import annotations

import math

INSIDE, OUTSIDE, NOT_COMPARABLE = "inside", "outside", "not comparable"
LEVEL = 0.95


def verdict(harness_mean: float, harness_sd: float, harness_n: int, paper_mean: float, paper_sd: float = math.nan,
            paper_n: float = math.nan, resolution: float = 0.0, why_not: str = "", incomparable: str = "") -> dict:
    """The verdict of one cell: kind (INSIDE, OUTSIDE, NOT_COMPARABLE), the difference and its interval
    (nan when not comparable), and a note (why not comparable; the assumption made, if any). ``why_not``
    explains a missing number; ``incomparable`` makes the cell not comparable whatever its numbers."""
    def nope(why: str) -> dict:
        return {"verdict": NOT_COMPARABLE, "verdict_diff": math.nan, "verdict_low": math.nan, "verdict_high": math.nan,
                "verdict_note": why}

    if paper_mean != paper_mean:
        return nope(why_not or "not published")
    if incomparable:
        return nope(incomparable)
    if not harness_n or harness_mean != harness_mean:
        return nope(why_not or "no finished harness runs")
    if harness_n < 2 or harness_sd != harness_sd:
        return nope("one seed: no spread to judge by")
    from scipy import stats  # imported when a verdict is computed: not at every command's start
    note = ""
    if paper_sd == paper_sd and paper_n == paper_n and paper_n >= 2:
        a, b = harness_sd ** 2 / harness_n, paper_sd ** 2 / paper_n
        se = math.sqrt(a + b)
        df = (a + b) ** 2 / (a ** 2 / (harness_n - 1) + b ** 2 / (paper_n - 1)) if a + b > 0 else harness_n - 1
    else:
        runs = paper_n if paper_n == paper_n and paper_n >= 1 else 1
        note = "" if paper_n == paper_n else "published seed count not given: taken as one run"
        se, df = harness_sd * math.sqrt(1 / harness_n + 1 / runs), harness_n - 1
    diff = harness_mean - paper_mean
    half = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * se + (resolution if resolution == resolution else 0.0)
    low, high = diff - half, diff + half
    return {"verdict": INSIDE if low <= 0 <= high else OUTSIDE, "verdict_diff": diff, "verdict_low": low,
            "verdict_high": high, "verdict_note": note}


def format_verdict(cell: dict, digits: int) -> str:
    """'inside: Δ -0.3 [-1.2, +0.6]', 'OUTSIDE: Δ +2.1 [+1.0, +3.2]' or 'n/c: why'."""
    if cell["verdict"] == NOT_COMPARABLE:
        return f"n/c: {cell['verdict_note']}"
    word = "inside" if cell["verdict"] == INSIDE else "OUTSIDE"
    return (f"{word}: Δ {cell['verdict_diff']:+.{digits}f} "
            f"[{cell['verdict_low']:+.{digits}f}, {cell['verdict_high']:+.{digits}f}]")
