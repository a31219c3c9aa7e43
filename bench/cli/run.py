"""`run`: train and evaluate a grid of methods x options x seeds, then the folder's report
(bench.api: plan, execute, report_grid); `ablate` runs its plans the same way."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from bench import api
from bench.cli.arguments import add_command, add_grid_arguments, plan_from
from bench.cli.printing import others_line, print_dry_run, report_failures, warn
from bench.errors import ConfigError
from bench.execution.claims import duration


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    parser = add_command(sub, "run", help="train and evaluate a grid of methods x options x seeds",
                         description="""Train and evaluate every (method, option combination, seed). Values not
                                     given come from the preset. Each finished run is saved at once as
                                     OUT/records/<run_id>.json; re-running the same command skips finished
                                     runs, so an interrupted grid resumes (and a folder of committed records
                                     is only re-rendered: --force retrains). Tables (OUT/runs.csv,
                                     OUT/summary.csv) and PNG plots are rebuilt from the records.""")
    add_grid_arguments(parser, preset or "seed")
    return parser


def run(args: argparse.Namespace) -> int:
    plan = plan_from(args)
    if plan.star is not None:
        raise ConfigError(f"preset {plan.preset} is a star design: run it with `python -m bench ablate --preset "
                          f"{args.preset}`, which writes its star tables")
    return run_plan(plan, args)


def run_plan(plan: api.Plan, args: argparse.Namespace, then: Callable[[api.Executed], list] | None = None,
             plots: bool | None = None) -> int:
    """--dry-run: list the plan's runs. Else train (or reuse) them, write the folder's report
    (``plots``: default, unless --no-plots), then ``then``'s files (ablate's tables). Returns the
    exit status: 130 when interrupted, 1 when a run failed."""
    if args.dry_run:
        print_dry_run(plan, args.force)
        return 0
    try:
        done = api.execute(plan, download=not args.no_download, progress=not args.quiet, force=args.force)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished run is saved in {plan.store.records}; run the same command "
              "again to resume", file=sys.stderr)
        return 130
    for problem in done.tables.problems:
        warn(problem)
    api.report_grid(plan, done, plots=not args.no_plots if plots is None else plots)
    print(f"{len(done.runs)} runs in the grid, {done.wall:.0f} s wall time; tables in {plan.store.out}")
    if others := others_line(done):
        print(others)
    if done.efficiency:
        e = done.efficiency
        print(f"{e['train_tflop']:.3g} TFLOP in {duration(e['wall_seconds'])} = {e['fraction_of_peak']:.0%} of the "
              f"{e['matmul_peak_gflops']:.0f} GFLOP/s peak measured at start ({plan.store.out / 'efficiency.csv'})")
    for path in then(done) if then else []:
        print(f"wrote {path}")
    return report_failures(done)
