"""`report`: rebuild a results folder's tables and plots from its records (bench.api.report)."""
from __future__ import annotations

import argparse
from pathlib import Path

from bench import api
from bench.cli.arguments import DEFAULT_REPORT_OUT, add_command, parse_count
from bench.cli.printing import warn
from bench.errors import BenchError
from bench.reporting.pages import write_index
from bench.reporting.paired import NO_PREDICTIONS
from bench.reporting.paper import write_comparison
from bench.reporting.published import available_tables


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    report = add_command(sub, "report", help="rebuild the CSV tables (and plots) from the records in OUT",
                         description="Rebuild runs.csv, summary.csv, summary.md and the plots from "
                         "OUT/records. Runs of different protocols get their own section and plots.")
    report.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder to read and write; its page "
                        "is OUT/index.html (open it in a browser: it needs no network)")
    report.add_argument("--index", metavar="ROOT",
                        help="instead: write ROOT/index.html, every results folder under ROOT with its headline "
                        "rows and a link to its own page (e.g. --index results)")
    report.add_argument("--no-plots", action="store_true", help="write only the tables")
    report.add_argument("--bootstrap", metavar="N", default="0",
                        help="also a paired bootstrap over test samples of each seed's difference to the "
                        "deep ensemble, N resamples (e.g. 1000), written to OUT/bootstrap.csv: the test-set "
                        "noise of one seed's difference, beside the seed-to-seed t-interval")
    report.add_argument("--bootstrap-seed", metavar="S", default="0", help="seed of the bootstrap's resamples")
    report.add_argument("--compare-to", metavar="TABLE|FOLDER",
                        help=f"also: a published table's name ({', '.join(available_tables())}) or CSV: OUT's runs beside "
                        "it, each cell with its verdict, in OUT/paper_table.csv, .md and .png (as paper-table "
                        "--published TABLE); or a results folder: OUT's paper table beside FOLDER's (both "
                        "paper_table.csv), cell by cell: each mean, the difference and whether it lies within "
                        "FOLDER's sd, in OUT/compare_to_<FOLDER's name>.csv (e.g. a GPU re-run against the CPU table)")
    return report


def run(args: argparse.Namespace) -> int:
    if args.index:
        root = Path(args.index)
        if not root.is_dir():
            raise BenchError(f"--index {root}: no such folder")
        print(f"wrote {write_index(root)}")
        return 0
    n_boot, boot_seed = (parse_count(args.bootstrap, "--bootstrap", 0),
                         parse_count(args.bootstrap_seed, "--bootstrap-seed", 0))
    published = args.compare_to if args.compare_to and is_published_table(args.compare_to) else None
    if args.compare_to and not published and not Path(args.compare_to).is_dir():
        names = ", ".join(available_tables())
        raise BenchError(f"--compare-to {args.compare_to}: no published table of that name ({names}), and no such "
                         "file or results folder")
    done = api.report(args.out, plots=not args.no_plots, bootstrap=n_boot, bootstrap_seed=boot_seed, warn=warn,
                      compare_to=published)
    if args.compare_to and not published:
        compared, path = write_comparison(Path(args.out), Path(args.compare_to))
        print(f"{int(compared['within_reference_sd'].sum())} of {len(compared)} cells within one sd of "
              f"{args.compare_to}'s; wrote {path}")
    if n_boot:
        table = done.bootstrap
        real = int(table["real"].sum()) if len(table) else 0
        without = int(table["note"].str.startswith(NO_PREDICTIONS).sum()) if len(table) else 0
        print(f"paired bootstrap over test samples ({n_boot} resamples, seed {boot_seed}): {len(table)} seed-level "
              f"differences, {real} with a 95 % interval that excludes 0"
              + (f", {without} without cached predictions to resample" if without else "")
              + f"; wrote {Path(args.out) / 'bootstrap.csv'}")
    return 0


def is_published_table(target: str) -> bool:
    """--compare-to names a published table (by name, or a CSV's path) rather than a results folder."""
    return target in available_tables() or Path(target).is_file()
