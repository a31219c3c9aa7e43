"""`paper-table`: the runs of a results folder beside a published table (bench.api.paper_table;
bench.reporting.paper)."""
from __future__ import annotations

import argparse

from bench import api
from bench.cli.arguments import RESULTS, add_command
from bench.cli.printing import warn
from bench.reporting.published import available_tables


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    paper = add_command(sub, "paper-table", help="the runs in OUT beside a published table (CSV, Markdown, PNG)",
                        description="""Rows: the configs in OUT whose in-distribution set matches, matched to the
                                    published rows by method label (the table's card maps a paper's names:
                                    bench/published/NAME.toml), then the published methods OUT has no runs of.
                                    Columns: the published quantities (ID accuracy, NLL, ECE, AUROC per OOD
                                    set by each row's own score) as mean ± std (n), beside the published value
                                    and the cell's verdict: inside or OUTSIDE the seed noise (the difference
                                    and its 95 % interval) or not comparable (why). Writes OUT/paper_table.csv,
                                    .md and .png.""")
    paper.add_argument("--out", default=f"{RESULTS}/paper-fmnist", help="results folder to read and write")
    paper.add_argument("--published", help=f"published table: a name ({', '.join(available_tables())}) or a CSV path "
                       "(default: the one the folder's preset names, its compare_to)")
    paper.add_argument("--in-distribution", help="in-distribution set (default: the one in OUT)")
    return paper


def run(args: argparse.Namespace) -> int:
    for path in api.paper_table(args.out, args.published, args.in_distribution, warn=warn):
        print(f"wrote {path}")
    return 0
