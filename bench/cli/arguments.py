"""What the commands share on the command line: the help format and --plugin of every command,
the grid, protocol and execution flags of `run` and `ablate` (and the bench.api plan they make),
and the checks of integer flags."""
from __future__ import annotations

import argparse
import dataclasses

from bench import api
from bench.config import Execution, available_presets, load_preset, protocol_help
from bench.data import ood_sets
from bench.data.files import DATA_DIR_ENV, DEFAULT_DATA_DIR
from bench.errors import ConfigError
from bench.execution.executors import Executor
from methods import REGISTRY

RESULTS = api.RESULTS
DEFAULT_REPORT_OUT = f"{RESULTS}/seed"
DATA_DIR_HELP = f"dataset folder; default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR}"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: '(default: None)' says nothing."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action.default, bool) or action.default == []:
            return action.help
        return super()._get_help_string(action)


def add_command(sub, name: str, **kw) -> argparse.ArgumentParser:
    """A command's parser: no abbreviations, --plugin, defaults shown where there are some."""
    return sub.add_parser(name, allow_abbrev=False, formatter_class=HelpFormatter, parents=[plugin_parent()], **kw)


def plugin_parent() -> argparse.ArgumentParser:
    """--plugin, which every command takes."""
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parent.add_argument("--plugin", action="append", default=[], metavar="FILE",
                        help="a Python file defining a method (a methods.Method subclass with a name); it is "
                        "registered before anything else happens. Repeatable. Installed packages can also "
                        "register methods through the 'dare_bench.methods' entry-point group")
    return parent


def _preset_values(preset: str) -> tuple[str, dict]:
    try:
        return load_preset(preset)
    except ConfigError:  # reported when the command runs; --help still works
        return preset, {}


def _show(value, sep: str = ",") -> str:
    """A preset value as it would be typed on the command line."""
    if isinstance(value, (list, tuple)):
        return sep.join(map(str, value)) if value else "(none)"
    return "none" if value is None else str(value)


def add_grid_arguments(parser: argparse.ArgumentParser, preset: str) -> None:
    """The flags of `run` and `ablate`: the grid, the protocol (defaults: ``preset``'s), execution, data and output."""
    name, values = _preset_values(preset)
    protocol_values = values.get("protocol", {})
    parser.add_argument("--preset", default=preset,
                        help=f"protocol preset: a name ({', '.join(available_presets())}) or a .toml path; "
                        "the defaults shown below are this preset's")
    parser.add_argument("--methods", nargs="+", metavar="NAME",
                        help=f"methods to run (registered: {', '.join(REGISTRY)}); "
                        f"default (preset {name}): {_show(values.get('methods'), ' ')}")
    parser.add_argument("--seeds", nargs="+", metavar="SEED",
                        help=f"run seeds; default (preset {name}): {_show(values.get('seeds', [0]), ' ')}")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="[METHOD.]NAME=V[,V...]",
                        help="set a method option; a comma list makes a grid (e.g. dare.threshold=0.1,0.3; "
                        "members=5 sets it for every selected method that has it). Repeatable. "
                        "See `python -m bench list` for each method's options")
    parser.add_argument("--select", action="append", default=[], metavar="METHOD.NAME=V[,V...]",
                        help="select METHOD's option NAME on the validation split instead of running every value: "
                        "per seed, train the values in the given order, score each by the validation NLL of the "
                        "member-averaged softmax, stop at the first that scores worse than the best so far, and "
                        "report the best (every candidate is recorded). Repeatable; several names make a product "
                        "grid walked in the given order; METHOD.early_break=false (or =NAME=VALUE: break only "
                        "where NAME has VALUE, e.g. anchor_net.early_break=sigma=10) limits the stop. A preset's "
                        "[select.METHOD] table does the same")
    group = parser.add_argument_group(f"protocol (override the preset; every value is recorded in each row; "
                                      f"defaults: preset {name})")
    for option_name, default, allowed, help_text in protocol_help():
        if option_name == "ood_sets" and not protocol_values.get("ood_sets"):
            default = ood_sets.known_for(protocol_values.get("id_dataset", "mnist"))[:1]
        shown = _show(protocol_values.get(option_name, default), "-" if option_name == "hidden" else ",")
        group.add_argument(f"--{option_name.replace('_', '-')}", dest=f"protocol_{option_name}", metavar="V",
                           help=f"{help_text} ({allowed}; default: {shown})")
    add_execution_arguments(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="validate the grid and list its runs (finished or to do), train nothing")
    parser.add_argument("--force", action="store_true",
                        help="redo runs that already have a finished record in OUT (default: skip them)")
    parser.add_argument("--data-dir", help=f"dataset folder in torchvision's layout; default: ${DATA_DIR_ENV}, "
                        f"else {DEFAULT_DATA_DIR} (downloaded there when missing and the network allows)")
    parser.add_argument("--no-download", action="store_true",
                        help="never download: fail at once if a dataset file is missing")
    parser.add_argument("--out", help=f"results folder (default: {values.get('out') or f'{RESULTS}/{name}'}, the "
                        "preset's `out` or results/<preset name>)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars, per-epoch lines (in a log file) or per-run lines")


EXECUTION_OPTIONS = (Execution, Executor)  # their fields are the execution flags, declared there once


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that change speed (not part of a run's id; packs move results only by float rounding),
    one per field of ``Execution`` and ``Executor``, with its declared help, range and default."""
    group = parser.add_argument_group("execution (speed only: results do not depend on these)")
    for cls in EXECUTION_OPTIONS:
        for field in dataclasses.fields(cls):
            meta = field.metadata
            flag = meta["flag"] or f"--{field.name.replace('_', '-')}"
            dest = f"execution_{field.name}"
            if isinstance(field.default, bool):  # a switch: --name sets True, --no-name sets False
                group.add_argument(flag, dest=dest, action="store_false" if field.default else "store_true",
                                   help=meta["help"])
            elif isinstance(field.default, tuple):  # a list: the flag repeats
                group.add_argument(flag, dest=dest, action="append", metavar="V",
                                   help=f"{meta['help']} ({meta['allowed']})")
            else:
                group.add_argument(flag, dest=dest, metavar="V",
                                   help=f"{meta['help']} ({meta['allowed']}; default: {_show(field.default)})")


def plan_from(args: argparse.Namespace) -> api.Plan:
    """The bench.api plan of `run`'s or `ablate`'s flags (ConfigError on bad input)."""
    given = vars(args)
    overrides = {k[len("protocol_"):]: v for k, v in given.items() if k.startswith("protocol_") and v is not None}
    grid = {"methods": args.methods, "seeds": args.seeds, "protocol": overrides, "options": args.option,
            "select": args.select, "design": getattr(args, "design", None), "vary": getattr(args, "vary", ())}
    execution = {k[len("execution_"):]: v for k, v in given.items() if k.startswith("execution_") and v is not None}
    return api.plan(args.preset, grid, execution, args.out, args.data_dir)


def parse_count(text: str, flag: str, least: int) -> int:
    """An integer flag value >= least, or one line of error."""
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise ConfigError(f"{flag} {text!r}: expected an integer >= {least}")
    return value
