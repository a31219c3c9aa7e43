"""What the commands print besides the library's own lines: counts, durations, warnings, a dry
run's runs and a grid's failed runs."""
from __future__ import annotations

import collections
import sys

from bench import api
from bench.execution.claims import duration


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def warn(problem: str) -> None:
    print(f"warning: {problem}", file=sys.stderr)


def print_dry_run(plan: api.Plan, force: bool) -> None:
    table = api.dry_run(plan, force)
    for _, row in table.iterrows():
        role = {"reference": "  (reference)", "run": "",
                "selection": f"  (selection: up to {row['candidates']} candidate runs)"}[row["role"]]
        state = "finished" if row["finished"] else "to do"
        again = "  (error last time)" if row["retry"] else ""
        bare = "  (no cached predictions: reused from its record)" if row["no_predictions"] else ""
        print(f"{row['run_id']}  {state:<8}  {row['variant']} seed {row['seed']}{role}{again}{bare}{claim_note(row)}")
    if not len(table):
        print("0 runs in the grid")
        return
    selections = table[table["role"] == "selection"]
    runs = table[table["role"] != "selection"]
    line = f"{plural(len(runs), 'run')} in the grid, {int((~runs['finished']).sum())} to do"
    if len(selections):  # a selection trains up to its candidate count, stopping early
        line += (f"; {plural(len(selections), 'selection')}, {int((~selections['finished']).sum())} to do, of up to "
                 f"{plural(int(selections.loc[~selections['finished'], 'candidates'].sum()), 'candidate run')}")
    claimed = table[table["claimed_by"] != ""]
    if len(claimed):
        live = int((claimed["stale"] == "").sum())
        line += (f"; {live} of them claimed by other workers"
                 + (f", {plural(len(claimed) - live, 'stale claim')} to take over" if len(claimed) > live else ""))
    print(line)


def claim_note(row) -> str:
    """'  (claimed by host pid 12, heartbeat 3 s ago)', or the stale claim a grid would take over."""
    if not row["claimed_by"]:
        return ""
    if row["stale"]:
        return f"  (stale claim of {row['claimed_by']}: {row['stale']}; the grid takes it over)"
    return f"  (claimed by {row['claimed_by']}, heartbeat {duration(row['heartbeat_s'])} ago)"


def others_line(done: api.Executed) -> str | None:
    """What other workers on the same folder trained while this command ran, in one line."""
    if not done.by_others:
        return None
    workers = collections.Counter(done.by_others.values())
    return (f"{plural(len(done.by_others), 'run')} of this grid trained meanwhile by other workers on "
            "the same folder: " + ", ".join(f"{w} ({n})" for w, n in workers.items()))


def report_failures(done: api.Executed) -> int:
    """One line naming the grid's failed runs (status error, selection candidates included); the
    exit code: 1 if any, else 0."""
    if not len(done.failed):
        return 0
    names = []
    for variant, group in done.failed.groupby("variant", sort=False):
        reasons = list(dict.fromkeys(group["error"]))
        others = f" (and {plural(len(reasons) - 1, 'other reason')})" if len(reasons) > 1 else ""
        names.append(f"{variant} seed{'s' if len(group) > 1 else ''} {' '.join(map(str, group['seed']))}: "
                     f"{reasons[0]}{others}")
    names = "; ".join(names)
    print(f"dare-bench: {len(done.failed)} of {plural(done.ran, 'run')} failed (status error): {names}. "
          "The reasons "
          "are in runs.csv, a traceback in the record of a run that raised; the same command runs them again",
          file=sys.stderr)
    return 1
