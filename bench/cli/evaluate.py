"""`evaluate`: score the runs of a results folder again from their kept weights: more OOD sets,
the shift suite (bench.api.evaluate; bench.execution.rescoring)."""
from __future__ import annotations

import argparse
import sys

from bench import api
from bench.cli.arguments import DATA_DIR_HELP, DEFAULT_REPORT_OUT, add_command, parse_count
from bench.cli.printing import plural
from bench.data import ood_sets, shifts


def suite_rest() -> list[str]:
    """The OOD suite after the other MNIST-family set, in the table's order."""
    return [name for name in ood_sets.SETS if name not in ood_sets.MNIST_FAMILY]


def optional_note(name: str) -> str:
    return f"{name} when it can be had" if ood_sets.SETS[name].optional else name


def shift_families() -> list[str]:
    return list(dict.fromkeys(s.family for s in shifts.SHIFTS.values()))  # in the table's order


def shift_suite() -> str:
    """'rotation, translation, mnist_c (15 shifts), dataset (sklearn_digits)': the families, named after
    their one shift or counted."""
    members = {family: [n for n, s in shifts.SHIFTS.items() if s.family == family] for family in shift_families()}
    return ", ".join(family if names == [family] else f"{family} ({names[0]})" if len(names) == 1
                     else f"{family} ({plural(len(names), 'shift')})" for family, names in members.items())


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    evaluate = add_command(
        sub, "evaluate", help="score stored runs again from their weights: more OOD sets, the shift suite",
        description="""Score the runs of OUT again from their kept weights (OUT/weights/<run_id>.pt, written by
                    run --save-weights), without retraining: the current evaluators, the OOD suite and the
                    shift suite (""" + shift_suite() + """; docs/evaluation.md). Each
                    run's stored metrics are reproduced first (a difference is reported). Records gain the new
                    metrics and say what they were evaluated with; then the tables (shift.csv among them) and
                    plots are rebuilt, as `report` does, with shift curves, the per-corruption table and a
                    gallery of every shift.""")
    evaluate.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder whose runs are scored")
    evaluate.add_argument("--data-dir", help=DATA_DIR_HELP)
    evaluate.add_argument("--no-download", action="store_true", help="never download a missing dataset file")
    evaluate.add_argument("--ood-sets", default="suite", metavar="suite|none|NAME[,NAME...]",
                          help="OOD sets to score besides the protocol's: suite (every set known for the ID "
                          f"dataset: the other MNIST-family set, {', '.join(optional_note(n) for n in suite_rest())}), "
                          "none, or names")
    evaluate.add_argument("--shifts", default="all", metavar="all|none|FAMILY|NAME[,...]",
                          help="shifts of the ID test split to score at every level: all, none, a family "
                          f"({', '.join(shift_families())}) or names (`python -m bench list` shows them)")
    evaluate.add_argument("--cache-dir", metavar="DIR|none",
                          help="where the shift suite's drawn levels and the rendered letters are kept, so that "
                          "the next evaluate reads them instead of drawing them again (keyed by the test images, "
                          "shift, level, seed and library versions; checked on reading; safe to delete); default "
                          "$DARE_BENCH_CACHE, else ~/.cache/dare-bench; none: draw everything every time")
    evaluate.add_argument("--shift-seed", default="0", metavar="S", help="seed of the random corruptions")
    evaluate.add_argument("--candidates", action="store_true",
                          help="also score selection candidates that no selection chose (default: skip them)")
    evaluate.add_argument("--device", default="cpu",
                          help="cpu, cuda or cuda:N; stored metrics come back bit for bit on the device the runs "
                          "trained on (the record's `device`)")
    evaluate.add_argument("--threads", help="CPU threads for torch (default: each run's own, as its record says; "
                          "the kernels, so the last bits, can depend on it)")
    evaluate.add_argument("--no-plots", action="store_true", help="write only the tables")
    evaluate.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return evaluate


def run(args: argparse.Namespace) -> int:
    seed = parse_count(args.shift_seed, "--shift-seed", 0)
    threads = parse_count(args.threads, "--threads", 1) if args.threads else None
    done = api.evaluate(args.out, args.data_dir, args.ood_sets, args.shifts, seed, args.candidates,
                        not args.no_download, not args.quiet, args.device, threads, plots=not args.no_plots,
                        cache_dir=args.cache_dir)
    for line in done.differing:
        print(f"warning: re-scored metrics differ from the record: {line}", file=sys.stderr)
    for name, why in done.skipped.items():
        print(f"note: OOD set {name} skipped: {why}")
    print(f"scored {plural(done.scored, 'run')} from stored weights: {len(done.ood_sets)} OOD sets "
          f"({', '.join(done.ood_sets)}), {done.shift_sets} shift levels; stored metrics reproduced exactly for "
          f"{done.scored - len(done.differing)} of {done.scored}")
    return 0
