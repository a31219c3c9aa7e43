"""Command line: ``python -m bench {run,ablate,list,perf,report,evaluate,paper-table,export}`` (also installed as
``dare-bench``). One module per command, each with ``add_parser(sub, preset)`` (its flags) and
``run(args)`` (a call or two to ``bench.api`` and what it prints); this module builds the parser from
them, dispatches, and turns a user's mistake (a BenchError) into one line and exit status 2, and so
an OS error the user can fix (a full disk, a quota, permission denied, a read-only folder): which
file, how many finished runs the folder keeps, and that the same command goes on from there."""
from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from bench.cli import ablate, evaluate, export, listing, paper_table, perf, report, run
from bench.cli.printing import plural
from bench.errors import BenchError
from methods import load_entry_points, load_plugin

COMMANDS = (run, ablate, listing, perf, report, evaluate, paper_table, export)  # in the order --help lists them
# OS errors a user can fix and then run the command again; any other is a bug, and keeps its traceback
FIXABLE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS}


def build_parser(preset: str | None = None) -> argparse.ArgumentParser:
    """``preset``: the --preset given on the command line, so that --help shows its values."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", allow_abbrev=False, description="dare-bench: compare ensemble methods for uncertainty "
        "quantification (deep ensembles, DARE, MC dropout, the DARE paper's baselines, BatchEnsemble, "
        "Packed-Ensembles, MIMO, MultiSWAG, Laplace and snapshot ensembles) on MNIST / Fashion-MNIST with "
        "OOD detection.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub, preset).set_defaults(handler=command.run)
    return parser


def _early_flags(argv: list[str]) -> argparse.Namespace:
    """--preset and --plugin, read before the full parser is built: the plugins' methods and the
    preset's values belong in --help."""
    early = _QuietParser(add_help=False, allow_abbrev=False)
    early.add_argument("--preset")
    early.add_argument("--plugin", action="append", default=[])
    try:
        return early.parse_known_args(argv)[0]
    except ValueError:  # e.g. --preset with no value: the full parser reports it
        return argparse.Namespace(preset=None, plugin=[])


class _QuietParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    try:
        early = _early_flags(argv)
        load_entry_points()
        for path in early.plugin:
            load_plugin(path)
        args = build_parser(early.preset).parse_args(argv)
        for path in getattr(args, "plugin", []):  # the same files: a no-op, unless the early pass missed one
            load_plugin(path)
        return args.handler(args)
    except BenchError as exc:
        print(f"dare-bench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (before OSError, its base)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in FIXABLE:
            raise
        print(f"dare-bench: error: {os_error_line(exc, getattr(args, 'out', None))}", file=sys.stderr)
        return 2


def os_error_line(exc: OSError, out: str | None) -> str:
    """'FILE: No space left on device; N finished runs are kept in OUT/records; ...' for the results
    folder the file is in (else ``out``)."""
    where = Path(exc.filename) if exc.filename else None
    line = f"{where}: {exc.strerror}" if where else f"{exc.strerror or exc} (writing into {out or 'a results folder'})"
    folders = ([*where.parents] if where else []) + ([Path(out)] if out else [])
    records = next((f / "records" for f in folders if (f / "records").is_dir()), None)
    if records is not None:
        kept = sum(1 for p in records.glob("*.json") if not p.name.startswith("."))
        line += f"; {plural(kept, 'finished run')} kept in {records}"
    return line + "; once that is fixed, the same command goes on from there"


if __name__ == "__main__":
    sys.exit(main())
