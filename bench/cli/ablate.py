"""`ablate`: exactly `run`, then the ablation over the options that vary (bench.api.ablation_report),
or, for a star design, the star's tables (bench.api.star_report)."""
from __future__ import annotations

import argparse

from bench import api
from bench.cli.arguments import add_command, add_grid_arguments, plan_from
from bench.cli.printing import plural
from bench.cli.run import run_plan

DEFAULT_PRESET = "ablate-dare"


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    parser = add_command(
        sub, "ablate", help="run an ablation grid and plot each metric against the varying options",
        description="""Exactly `run` (same options, store and resume), then the ablation: every method option
                    with more than one value in the grid is an axis. Writes OUT/ablation.csv (mean, sd, n over
                    seeds per value and metric) and, unless --no-plots, OUT/ablation_<option>.png (each metric
                    against the option, ± sd bands; methods that do not vary it drawn as dashed levels) and
                    OUT/ablation_epochs.png (mean |theta| and train loss over epochs). Default preset:
                    ablate-dare (DARE's threshold x members 1-10 under the seed protocol, with the deep
                    ensemble at the same member counts); ablate-dare-paper varies delta under the paper
                    protocol. --design star changes one choice at a time from a base instead
                    (docs/usage.md#star-designs-one-choice-at-a-time): OUT/star.csv, star_summary.csv, star.md
                    and star_forest.png; presets sensitivity-paper and sensitivity-seed are the
                    protocol-sensitivity study.""")
    add_grid_arguments(parser, preset or DEFAULT_PRESET)
    group = parser.add_argument_group("design (ablate only)")
    group.add_argument("--design", choices=api.DESIGNS,
                       help="grid: every combination of the option lists (the default); star: the base (the "
                       "preset with -o and the protocol flags, one configuration per method) and settings that each "
                       "change one choice of it, from --vary or the preset's [[star]] tables. Default: the preset's "
                       "design, else grid")
    group.add_argument("--vary", action="append", default=[], metavar="[METHOD.]NAME=V[,V...]",
                       help="""a star setting per value: a protocol value (epochs=10,20), a method option
                       (dare.delta=0.1,0.5; members=3 for every method that has it) or ood_score=NAME (the OOD
                       score the comparison reads; no training). Several NAME=V separated by spaces make one
                       setting that changes them together ('epochs=50 early_stop_acc=none'). Repeatable;
                       replaces the preset's [[star]] tables""")
    return parser


def run(args: argparse.Namespace) -> int:
    plan = plan_from(args)
    if plan.star is not None:
        return star(plan, args)
    axes = api.ablation_axes(plan)
    if args.dry_run:
        print(f"ablation axes: {', '.join(axes)}")
    return run_plan(plan, args, lambda done: api.ablation_report(plan, done, plots=not args.no_plots))


def star(plan: api.Plan, args: argparse.Namespace) -> int:
    """--design star: the base and its settings, then the star's tables and forest plot (the
    folder's report gets its tables only: one plot set per setting's protocol would be dozens)."""
    if args.dry_run:
        settings = api.star_dry_run(plan, args.force)
        for s in settings.to_dict("records"):
            shared = "" if s["is_base"] else f", {s['shared']} shared with the base"
            reads = f" (reads {s['reads']}; trains nothing beyond the base)" if s["reads"] else ""
            print(f"setting {s['setting']} [{s['choice']}]: {plural(s['items'], 'item')}{shared}, {s['to_do']} to do"
                  f"{reads}" + (f" (up to {s['runs']} runs)" if s["runs"] > s["items"] else ""))
        print(f"{plural(len(settings) - 1, 'setting')} besides the base")
    return run_plan(plan, args, lambda done: api.star_report(plan, done, plots=not args.no_plots), plots=False)
