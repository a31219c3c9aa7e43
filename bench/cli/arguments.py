"""What the commands share on the command line: the help format and --plugin of every command,
the grid, protocol and execution flags of `run` and `ablate` (and the bench.api plan they make),
and the checks of integer flags."""
from __future__ import annotations

import argparse

from bench import api
from bench.config import STEP_MODES, available_presets, load_preset, protocol_help
from bench.data import ood_sets
from bench.data.files import DATA_DIR_ENV, DEFAULT_DATA_DIR
from bench.errors import ConfigError
from bench.execution.claims import DEFAULT_TIMEOUT
from bench.training.packs import MAX_AUTO_NETWORKS
from methods import REGISTRY

RESULTS = api.RESULTS
DEFAULT_REPORT_OUT = f"{RESULTS}/seed"
DATA_DIR_HELP = f"dataset folder; default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR}"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: '(default: None)' says nothing."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
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
    parser.add_argument("--save-weights", action="store_true",
                        help="keep each finished run's kept weights in OUT/weights/<run_id>.pt (torch.save of the "
                        "model's state_dict; git ignores them), so that later evaluators can score runs again")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars, per-epoch lines (in a log file) or per-run lines")


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that change speed (not part of a run's id; packs move results only by float rounding)."""
    group = parser.add_argument_group("execution (speed only: results do not depend on these)")
    group.add_argument("--device", default="auto", help="auto (a GPU when present), cpu, cuda or cuda:N")
    group.add_argument("--threads", help="CPU threads for torch (default: torch's choice)")
    group.add_argument("--pack-size", default="auto", metavar="N|auto",
                       help="networks (runs x members) trained together as one stacked computation: runs of "
                       "one protocol pack across seeds and options (every method: the deep ensemble, DARE, AnchorNet, "
                       "the single network, the Laplace ensemble, MOD, NegCorr and RDE with one another; MC dropout, "
                       "SWAG, snapshot ensembles, BatchEnsemble, Packed-Ensembles and MIMO each with its own runs). "
                       "1: run by run; auto: as many as a quarter of the "
                       f"device's memory holds, at most {MAX_AUTO_NETWORKS['cpu']} on the CPU and "
                       f"{MAX_AUTO_NETWORKS['cuda']} on a GPU (with --jobs, split so that every worker gets a pack). "
                       "Packing changes speed; results move only at the level of float rounding (docs/usage.md)")
    group.add_argument("--step", default="auto", choices=STEP_MODES,
                       help="how a training step runs: eager (kernels launched one by one from Python), graph "
                       "(captured once in a CUDA graph and replayed: a GPU only; methods whose step cannot be "
                       "captured, such as a plugin that does not declare `capturable`, run eagerly), auto (graph on a GPU, eager on the CPU; the "
                       "default). The arithmetic is the same either way")
    group.add_argument("--no-vectorize", action="store_true",
                       help="train an ensemble's members one after another instead of together")
    group.add_argument("--jobs", default="1", metavar="N",
                       help="runs at a time in local worker processes (1: in this process). Each worker "
                       "gets cores // N threads unless --threads is given")
    group.add_argument("--dask", metavar="ADDRESS",
                       help="run on a Dask cluster: a scheduler address such as tcp://host:8786, or 'local' "
                       "to start one of --jobs worker processes here. Workers must see --data-dir and --out")
    group.add_argument("--submitit", metavar="FOLDER",
                       help="run each pack as a submitit job: a SLURM job array where srun is available, local "
                       "subprocesses otherwise; job files and logs in FOLDER (on a SLURM cluster: a shared "
                       "filesystem, as --data-dir and --out). Install with pip install -e '.[cluster]'")
    group.add_argument("--submitit-cluster", default="auto", metavar="auto|slurm|local|debug",
                       help="where --submitit jobs run; auto: SLURM when srun is available, else local")
    group.add_argument("--submitit-param", action="append", default=[], metavar="NAME=VALUE",
                       help="a submitit job parameter, e.g. timeout_min=240, slurm_partition=gpu, gpus_per_node=1, "
                       "cpus_per_task=8, slurm_array_parallelism=16. Repeatable")
    group.add_argument("--claim-timeout", default=f"{DEFAULT_TIMEOUT:g}", metavar="SECONDS",
                       help="several commands may share one --out (one per node, started the same way): each "
                       "claims the runs it trains in OUT/claims, touches its claims every tenth of this time, "
                       "and waits for runs that others claim; a claim with no heartbeat for this long is "
                       "taken over (its worker died). Give every worker the same value (default: %(default)s)")


def plan_from(args: argparse.Namespace) -> api.Plan:
    """The bench.api plan of `run`'s or `ablate`'s flags (ConfigError on bad input)."""
    overrides = {k[len("protocol_"):]: v for k, v in vars(args).items()
                 if k.startswith("protocol_") and v is not None}
    return api.plan(args.preset, args.methods, args.seeds, overrides, args.option, args.select, args.out,
                    args.data_dir, (), args.device, args.threads, not args.no_vectorize, args.jobs, args.dask,
                    args.pack_size, args.submitit, args.submitit_cluster, args.submitit_param, args.save_weights,
                    getattr(args, "design", None), getattr(args, "vary", ()), args.claim_timeout, step=args.step)


def parse_count(text: str, flag: str, least: int) -> int:
    """An integer flag value >= least, or one line of error."""
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise ConfigError(f"{flag} {text!r}: expected an integer >= {least}")
    return value
