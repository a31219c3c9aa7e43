"""Command line: ``python -m bench {run,ablate,list,report,evaluate,paper-table,perf}`` (also installed as
``dare-bench``). Each command validates its input and hands over to ``bench.api`` (grids),
``bench.reporting.report`` (tables and plots) or ``bench.reporting.ablation``."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from bench import api
from bench.config import make_execution, make_protocol, make_run_config, protocol_help
from bench.data.loaders import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from bench.errors import BenchError, ConfigError
from bench.config import available_presets, load_preset
from bench.options import describe
from bench.training.packs import MAX_AUTO_NETWORKS
from bench.reporting.report import paper_table, report_folder
from methods import BROKEN, REGISTRY, SOURCES, load_entry_points, load_plugin

RESULTS = api.RESULTS
DEFAULT_REPORT_OUT = f"{RESULTS}/seed"
ABLATE_PRESET = "ablate-dare"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one: '(default: None)' says nothing."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


def plugin_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parent.add_argument("--plugin", action="append", default=[], metavar="FILE",
                        help="a Python file defining a method (a methods.Method subclass with a name); it is "
                        "registered before anything else happens. Repeatable. Installed packages can also "
                        "register methods through the 'dare_bench.methods' entry-point group")
    return parent


def build_parser(preset: str | None = None) -> argparse.ArgumentParser:
    """``preset``: the --preset given on the command line, so that --help shows its values."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", allow_abbrev=False, description="dare-bench: compare ensemble methods for uncertainty "
        "quantification (deep ensembles, DARE, MC dropout, the DARE paper's baselines, BatchEnsemble, "
        "Packed-Ensembles) on MNIST / Fashion-MNIST with OOD detection.")
    sub = parser.add_subparsers(dest="command", required=True)
    parents = [plugin_parent()]

    def command(name: str, **kw) -> argparse.ArgumentParser:  # every command: no abbreviations, --plugin
        return sub.add_parser(name, allow_abbrev=False, formatter_class=HelpFormatter, parents=parents, **kw)

    # run and ablate take the same grid options; ablate's default preset is its own
    grid_parsers = {}
    for name, default_preset, help_text, description in (
            ("run", "seed", "train and evaluate a grid of methods x options x seeds",
             "Train and evaluate every (method, option combination, seed). "
             "Values not given come from the preset. Each finished run is saved at once as "
             "OUT/records/<run_id>.json; re-running the same command skips finished runs, so an "
             "interrupted grid resumes (and a folder of committed records is only re-rendered: "
             "--force retrains). Tables (OUT/runs.csv, OUT/summary.csv) and PNG plots are "
             "rebuilt from the records."),
            ("ablate", ABLATE_PRESET, "run an ablation grid and plot each metric against the varying options",
             "Exactly `run` (same options, store and resume), then the ablation: "
             "every method option with more than one value in the grid is an axis. Writes "
             "OUT/ablation.csv (mean, sd, n over seeds per value and metric) and, unless --no-plots, "
             "OUT/ablation_<option>.png (each metric against the option, ± sd bands; methods "
             "that do not vary it drawn as dashed levels) and OUT/ablation_epochs.png (mean "
             "|theta| and train loss over epochs). Default preset: ablate-dare (DARE's "
             "threshold x members 1-10 under the seed protocol, with the deep ensemble at the "
             "same member counts); ablate-dare-paper varies delta under the paper protocol. "
             "--design star changes one choice at a time from a base instead (docs/usage.md#star-designs-one-choice-at-a-time): "
             "OUT/star.csv, star_summary.csv, star.md and star_forest.png; presets sensitivity-paper and "
             "sensitivity-seed are the protocol-sensitivity study.")):
        grid_parsers[name] = command(name, help=help_text, description=description)
        add_run_arguments(grid_parsers[name], preset or default_preset)
    add_design_arguments(grid_parsers["ablate"])

    command("list", help="list registered methods with their options, and the presets")

    perf = command("perf", help="time the training loop against the seed-style loop and the matmul peak",
                   description="Train the same deep ensemble (no early stop) with (a) the seed "
                   "example's DataLoader+ToTensor loop, members one after another, (b) this harness's "
                   "loop, and (d) torch-uncertainty when installed; measure (c) the fp32 matmul peak. "
                   "Writes OUT/perf.csv. Compare the ratios within one run: timings are noisy.")
    perf.add_argument("--preset", help="take the work's shape from this preset (e.g. paper-fmnist): its MLP, "
                      "batch size, dataset and deep-ensemble member count; the flags below override it. The timed "
                      "loop is always CE on [0,1] pixels with torch init: these do not change the cost")
    perf.add_argument("--members", help="ensemble members (default 3, or the preset's)")
    perf.add_argument("--epochs", default="5", help="epochs (fixed: no early stop)")
    perf.add_argument("--batch-size", help="mini-batch size (default 256, or the preset's)")
    perf.add_argument("--hidden", help="hidden widths of the MLP (default 256-256, or the preset's)")
    perf.add_argument("--id-dataset", help="mnist or fashion_mnist (default mnist, or the preset's)")
    perf.add_argument("--device", default="auto", help="device of the harness loop: auto, cpu, cuda, cuda:N")
    perf.add_argument("--threads", help="CPU threads for torch (default: torch's choice)")
    perf.add_argument("--skip-seed-loop", action="store_true", help="do not time the slow seed-style loop")
    perf.add_argument("--networks", metavar="N[,N...]",
                      help="instead of (a)-(d): time (e) one pack of N one-member deep ensembles for each N "
                      "(e.g. 1,5,25,50), giving network-epochs/s and the fraction of the matmul peak per pack "
                      "size; writes OUT/perf_packs.csv")
    perf.add_argument("--peak-size", default="4096", help="matrix size n of the n x n torch.mm peak test")
    perf.add_argument("--data-dir", help=f"dataset folder; default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR}")
    perf.add_argument("--out", default=RESULTS, help="folder for perf.csv")

    report = command("report", help="rebuild the CSV tables (and plots) from the records in OUT",
                     description="Rebuild runs.csv, summary.csv, summary.md and the plots from "
                     "OUT/records. Runs of different protocols get their own section and plots.")
    report.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder to read and write")
    report.add_argument("--no-plots", action="store_true", help="write only the tables")
    report.add_argument("--bootstrap", metavar="N", default="0",
                        help="also a paired bootstrap over test samples of each seed's difference to the "
                        "deep ensemble, N resamples (e.g. 1000), written to OUT/bootstrap.csv: the test-set "
                        "noise of one seed's difference, beside the seed-to-seed t-interval")
    report.add_argument("--bootstrap-seed", metavar="S", default="0", help="seed of the bootstrap's resamples")

    evaluate = command("evaluate", help="score stored runs again from their weights: more OOD sets, the shift suite",
                       description="Score the runs of OUT again from their kept weights (OUT/weights/<run_id>.pt, "
                       "written by run --save-weights), without retraining: the current evaluators, the OOD suite "
                       "and the shift suite (rotation, translation, the 15 MNIST-C corruptions; docs/evaluation.md). "
                       "Each run's stored metrics are reproduced first (a difference is reported). Records gain "
                       "the new metrics and say what they were evaluated with; then the tables (shift.csv among "
                       "them) and plots are rebuilt, as `report` does, with shift curves, the per-corruption "
                       "table and a gallery of every shift.")
    evaluate.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder whose runs are scored")
    evaluate.add_argument("--data-dir", help=f"dataset folder; default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR}")
    evaluate.add_argument("--no-download", action="store_true", help="never download a missing dataset file")
    evaluate.add_argument("--ood-sets", default="suite", metavar="suite|none|NAME[,NAME...]",
                          help="OOD sets to score besides the protocol's: suite (every set known for the ID "
                          "dataset: the other MNIST-family set, cifar10_gray28 when present, block_shuffled, "
                          "inverted, uniform_noise, gaussian_noise, constant, bernoulli_noise), none, or names")
    evaluate.add_argument("--shifts", default="all", metavar="all|none|FAMILY|NAME[,...]",
                          help="shifts of the ID test split to score at every level: all, none, a family "
                          "(rotation, translation, mnist_c) or names (`python -m bench list` shows them)")
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

    from bench.reporting.paper import available_tables
    paper = command("paper-table", help="the runs in OUT beside a published table (CSV, Markdown, PNG)",
                    description="Rows: the configs in OUT whose in-distribution set matches, matched to "
                    "the published rows by method label (DE (NLL), DE (MSE), DARE, ...). Columns: ID "
                    "accuracy and AUROC per OOD set (each row's own score) as mean ± std (n), beside the "
                    "published mean ± std and the difference in published stds. Writes "
                    "OUT/paper_table.csv, .md and .png.")
    paper.add_argument("--out", default=f"{RESULTS}/paper-fmnist", help="results folder to read and write")
    paper.add_argument("--published", default="dare_table3",
                       help=f"published table: a name ({', '.join(available_tables())}) or a CSV path")
    paper.add_argument("--in-distribution", help="in-distribution set (default: the one in OUT)")
    return parser


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


def add_run_arguments(run: argparse.ArgumentParser, preset: str) -> None:
    name, values = _preset_values(preset)
    protocol_values = values.get("protocol", {})
    run.add_argument("--preset", default=preset,
                     help=f"protocol preset: a name ({', '.join(available_presets())}) or a .toml path; "
                     "the defaults shown below are this preset's")
    run.add_argument("--methods", nargs="+", metavar="NAME",
                     help=f"methods to run (registered: {', '.join(REGISTRY)}); "
                     f"default (preset {name}): {_show(values.get('methods'), ' ')}")
    run.add_argument("--seeds", nargs="+", metavar="SEED",
                     help=f"run seeds; default (preset {name}): {_show(values.get('seeds', [0]), ' ')}")
    run.add_argument("-o", "--option", action="append", default=[], metavar="[METHOD.]NAME=V[,V...]",
                     help="set a method option; a comma list makes a grid (e.g. dare.threshold=0.1,0.3; "
                     "members=5 sets it for every selected method that has it). Repeatable. "
                     "See `python -m bench list` for each method's options")
    run.add_argument("--select", action="append", default=[], metavar="METHOD.NAME=V[,V...]",
                     help="select METHOD's option NAME on the validation split instead of running every value: "
                     "per seed, train the values in the given order, score each by the validation NLL of the "
                     "member-averaged softmax, stop at the first that scores worse than the best so far, and "
                     "report the best (every candidate is recorded). Repeatable; several names make a product "
                     "grid walked in the given order; METHOD.early_break=false (or =NAME=VALUE: break only "
                     "where NAME has VALUE, e.g. anchor_net.early_break=sigma=10) limits the stop. A preset's "
                     "[select.METHOD] table does the same")
    group = run.add_argument_group(f"protocol (override the preset; every value is recorded in each row; "
                                   f"defaults: preset {name})")
    for option_name, default, allowed, help_text in protocol_help():
        if option_name == "ood_sets" and not protocol_values.get("ood_sets"):
            from bench.config import OOD_SETS
            default = OOD_SETS[protocol_values.get("id_dataset", "mnist")][:1]
        shown = _show(protocol_values.get(option_name, default), "-" if option_name == "hidden" else ",")
        group.add_argument(f"--{option_name.replace('_', '-')}", dest=f"protocol_{option_name}", metavar="V",
                           help=f"{help_text} ({allowed}; default: {shown})")
    add_execution_arguments(run)
    run.add_argument("--dry-run", action="store_true",
                     help="validate the grid and list its runs (finished or to do), train nothing")
    run.add_argument("--force", action="store_true",
                     help="redo runs that already have a finished record in OUT (default: skip them)")
    run.add_argument("--data-dir", help=f"dataset folder in torchvision's layout; default: ${DATA_DIR_ENV}, "
                     f"else {DEFAULT_DATA_DIR} (downloaded there when missing and the network allows)")
    run.add_argument("--no-download", action="store_true",
                     help="never download: fail at once if a dataset file is missing")
    run.add_argument("--out", help=f"results folder (default: {values.get('out') or f'{RESULTS}/{name}'}, the "
                     "preset's `out` or results/<preset name>)")
    run.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    run.add_argument("--save-weights", action="store_true",
                     help="keep each finished run's kept weights in OUT/weights/<run_id>.pt (torch.save of the "
                     "model's state_dict; git ignores them), so that later evaluators can score runs again")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-run lines")


def add_design_arguments(ablate: argparse.ArgumentParser) -> None:
    group = ablate.add_argument_group("design (ablate only)")
    group.add_argument("--design", choices=api.DESIGNS,
                       help="grid: every combination of the option lists (the default); star: the base (the "
                       "preset with -o and the protocol flags, one configuration per method) and settings that each "
                       "change one choice of it, from --vary or the preset's [[star]] tables. Default: the preset's "
                       "design, else grid")
    group.add_argument("--vary", action="append", default=[], metavar="[METHOD.]NAME=V[,V...]",
                       help="a star setting per value: a protocol value (epochs=10,20), a method option "
                       "(dare.delta=0.1,0.5; members=3 for every method that has it) or ood_score=NAME (the OOD "
                       "score the comparison reads; no training). Several NAME=V separated by spaces make one "
                       "setting that changes them together ('epochs=50 early_stop_acc=none'). Repeatable; "
                       "replaces the preset's [[star]] tables")


def add_execution_arguments(run: argparse.ArgumentParser) -> None:
    """The flags that change speed (not part of a run's id; packs move results only by float rounding)."""
    group = run.add_argument_group("execution (speed only: results do not depend on these)")
    group.add_argument("--device", default="auto", help="auto (a GPU when present), cpu, cuda or cuda:N")
    group.add_argument("--threads", help="CPU threads for torch (default: torch's choice)")
    group.add_argument("--pack-size", default="auto", metavar="N|auto",
                       help="networks (runs x members) trained together as one stacked computation: runs of "
                       "one method, protocol and split pack together (deep ensembles, DARE, AnchorNet, single "
                       "networks; other methods train alone). 1: run by run; auto: as many as a quarter of the "
                       f"device's memory holds, at most {MAX_AUTO_NETWORKS['cpu']} on the CPU and "
                       f"{MAX_AUTO_NETWORKS['cuda']} on a GPU (with --jobs, split so that every worker gets a pack). "
                       "Packing changes speed; results move only at the level of float rounding (docs/usage.md)")
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


def plan_from(args: argparse.Namespace) -> api.Plan:
    overrides = {k[len("protocol_"):]: v for k, v in vars(args).items()
                 if k.startswith("protocol_") and v is not None}
    return api.plan(args.preset, args.methods, args.seeds, overrides, args.option, args.select, args.out,
                    args.data_dir, (), args.device, args.threads, not args.no_vectorize, args.jobs, args.dask,
                    args.pack_size, args.submitit, args.submitit_cluster, args.submitit_param, args.save_weights,
                    getattr(args, "design", None), getattr(args, "vary", ()))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def print_dry_run(plan: api.Plan, force: bool) -> None:
    table = api.dry_run(plan, force)
    for _, row in table.iterrows():
        role = {"reference": "  (reference)", "run": "",
                "selection": f"  (selection: up to {row['candidates']} candidate runs)"}[row["role"]]
        state = "finished" if row["finished"] else "to do"
        again = "  (error last time)" if row["retry"] else ""
        print(f"{row['run_id']}  {state:<8}  {row['variant']} seed {row['seed']}{role}{again}")
    if not len(table):
        print("0 runs in the grid")
        return
    selections = table[table["role"] == "selection"]
    runs = table[table["role"] != "selection"]
    line = f"{plural(len(runs), 'run')} in the grid, {int((~runs['finished']).sum())} to do"
    if len(selections):  # a selection trains up to its candidate count, stopping early
        line += (f"; {plural(len(selections), 'selection')}, {int((~selections['finished']).sum())} to do, of up to "
                 f"{plural(int(selections.loc[~selections['finished'], 'candidates'].sum()), 'candidate run')}")
    print(line)


def execute_and_report(plan: api.Plan, args: argparse.Namespace, plots: bool | None = None):
    """Train (or reuse) the plan's runs, then the folder's report (``plots``: default, unless
    --no-plots). Returns what api.execute returns."""
    try:
        done = api.execute(plan, download=not args.no_download, progress=not args.quiet, force=args.force)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every finished run is saved in {plan.store.records}; run the same command "
              "again to resume", file=sys.stderr)
        raise
    warn(done.problems)
    report_folder(plan.store, done.folder, done.keys, plots=not args.no_plots if plots is None else plots)
    print(f"{len(done.runs)} runs in the grid, {done.wall:.0f} s wall time; tables in {plan.store.out}")
    if done.efficiency:
        e = done.efficiency
        print(f"{e['train_tflop']:.3g} TFLOP in {_duration(e['wall_seconds'])} = {e['fraction_of_peak']:.0%} of the "
              f"{e['matmul_peak_gflops']:.0f} GFLOP/s peak measured at start ({plan.store.out / 'efficiency.csv'})")
    return done


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


def cmd_run(args: argparse.Namespace) -> int:
    plan = plan_from(args)
    if plan.star is not None:
        raise ConfigError(f"preset {plan.preset} is a star design: run it with `python -m bench ablate --preset "
                          f"{args.preset}`, which writes its star tables")
    if args.dry_run:
        print_dry_run(plan, args.force)
        return 0
    try:
        done = execute_and_report(plan, args)
    except KeyboardInterrupt:
        return 130
    return report_failures(done)


def cmd_ablate(args: argparse.Namespace) -> int:
    from bench.reporting.ablation import config_axes, write_ablation
    plan = plan_from(args)
    if plan.star is not None:
        return star_ablation(plan, args)
    varying = config_axes(plan.configs)
    if not varying:
        raise ConfigError("nothing to ablate: no method option takes more than one value in this grid "
                          "(give a list, e.g. -o dare.threshold=0.1,0.3 -o members=1,3,5)")
    if args.dry_run:
        print(f"ablation axes: {', '.join(varying)}")
        print_dry_run(plan, args.force)
        return 0
    try:
        done = execute_and_report(plan, args)
    except KeyboardInterrupt:
        return 130
    histories = {rid: plan.store.load(rid).get("history", []) for rid in done.runs["run_id"]}
    for path in write_ablation(plan.store.out, done.runs, done.keys, histories, plots=not args.no_plots):
        print(f"wrote {path}")
    return report_failures(done)


def star_ablation(plan: api.Plan, args: argparse.Namespace) -> int:
    """ablate --design star: the base and its settings, then the star's tables and forest plot (the
    folder's report gets its tables only: one plot set per setting's protocol would be dozens)."""
    from bench.design.star import BASE, SCORE_KNOB
    from bench.reporting.star_tables import write_star
    if args.dry_run:
        table = api.dry_run(plan, args.force).drop_duplicates("run_id").set_index("run_id")
        for setting in plan.star.settings:
            items = plan.star.items[setting.name]
            needs = {run.run_id for item in items for run in (item.runs() if item.kind == "selection" else [item])}
            shared = "" if setting.is_base else f", {plan.star.shared(setting)} shared with the base"
            todo = sum(1 for i in items if i.run_id in table.index and not table.loc[i.run_id, "finished"])
            score = (f" (reads {setting.score}; trains nothing beyond the base)" if setting.changes
                     and all(c.name == SCORE_KNOB for c in setting.changes) else "")
            print(f"setting {setting.name if setting.name != BASE else 'base'} [{setting.choice}]: "
                  f"{plural(len(items), 'item')}{shared}, {todo} to do{score}"
                  + (f" (up to {len(needs)} runs)" if len(needs) > len(items) else ""))
        print(f"{plural(len(plan.star.settings) - 1, 'setting')} besides the base")
        print_dry_run(plan, args.force)
        return 0
    try:
        done = execute_and_report(plan, args, plots=False)
    except KeyboardInterrupt:
        return 130
    for path in write_star(plan.store.out, done.folder, plots=not args.no_plots,
                           title=f"star design: preset {plan.preset}"):
        print(f"wrote {path}")
    return report_failures(done)


def warn(problems: list[str]) -> None:
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)


def cmd_list(_args) -> int:
    from bench.config import OOD_SETS
    from methods.base import Method
    shared = {opt for opt, *_ in describe(Method)}
    print("methods (use -o METHOD.NAME=VALUE):")
    for name, cls in REGISTRY.items():
        joint = " [joint: members share batches and one loss]" if cls.joint else ""
        source = "" if SOURCES[name] == "built in" else f" [from {SOURCES[name]}]"
        print(f"  {name}: {cls.summary}{joint}{source}")
        for opt, default, allowed, help_text in describe(cls):
            if opt not in shared:
                print(f"      {opt} = {default!r}  ({allowed}) {help_text}")
    for name, reason in BROKEN.items():
        print(f"  {name}: not loadable: {reason}")
    print("options every method has:")
    for opt, default, allowed, help_text in describe(Method):
        print(f"      {opt} = {default!r}  ({allowed}) {help_text}")
    print("protocol values (flags of `run`):")
    for opt, default, allowed, help_text in protocol_help():
        print(f"  --{opt.replace('_', '-')} = {default!r}  ({allowed}) {help_text}")
    print("OOD sets (--ood-sets), per in-distribution set: "
          + "; ".join(f"{k}: {', '.join(v)} (default {v[0]})" for k, v in OOD_SETS.items()))
    from bench.data import ood_sets, shifts
    for name, spec in ood_sets.SETS.items():
        print(f"  {name} [{spec.group} OOD{', optional' if spec.optional else ''}]: {spec.description}")
    print("shifts (`evaluate --shifts`), by family:")
    for name, spec in shifts.SHIFTS.items():
        levels = ", ".join(f"{v:g}" for v in spec.levels)
        print(f"  {name} [{spec.family}]: {spec.unit + ' ' if spec.unit else 'one level: '}{levels}"
              + (f" (MNIST-C's: {spec.reference_level:g})" if spec.reference_level else "")
              + ("" if spec.fidelity == "exact" else f"; {spec.fidelity}"))
    print(f"presets: {', '.join(available_presets())}")
    return 0


def cmd_perf(args) -> int:
    from bench.data.loaders import load_images
    from bench.options import validate
    from bench.training.perf import Work, format_perf, run_perf

    preset = load_preset(args.preset)[1] if args.preset else {}
    # the work of a preset: its MLP, batch size and dataset, and its deep ensemble's member count
    shape = {k: v for k, v in preset.get("protocol", {}).items() if k in ("batch_size", "hidden", "id_dataset")}
    flags = {"batch_size": args.batch_size, "hidden": args.hidden, "id_dataset": args.id_dataset}
    protocol = make_protocol({**shape, **{k: v for k, v in flags.items() if v is not None}, "epochs": args.epochs})
    members = args.members or preset.get("method_options", {}).get("deep_ensemble", {}).get("members", 3)
    members = make_run_config("deep_ensemble", {"members": members}, protocol, 0).method_options["members"]
    execution = make_execution({"device": args.device, "threads": args.threads})
    if execution.threads:
        torch.set_num_threads(execution.threads)
    peak = validate(Work, {"peak_size": args.peak_size}, "perf")
    root = resolve_data_dir(args.data_dir)
    load_images(root, protocol.id_dataset, True, download=False)  # one clear line if the data is missing
    work = Work(members=members, epochs=protocol.epochs, batch_size=protocol.batch_size,
                hidden=protocol.hidden, dataset=protocol.id_dataset, preset=args.preset or "", **peak)
    if args.networks:
        from bench.options import parse_int_tuple
        from bench.training.perf import format_pack_perf, run_pack_perf
        try:
            networks = [n for n in parse_int_tuple(args.networks.replace(",", "-"))]
        except ValueError:
            networks = []
        if not networks or min(networks) < 1:
            raise ConfigError(f"--networks {args.networks!r}: expected integers >= 1 such as 1,5,25,50")
        table = run_pack_perf(work, root, Path(args.out), execution.torch_device(), networks)
        print(format_pack_perf(table))
        print(f"wrote {Path(args.out) / 'perf_packs.csv'}")
        return 0
    table = run_perf(work, root, Path(args.out), execution.torch_device(), args.skip_seed_loop)
    print(format_perf(table))
    print(f"wrote {Path(args.out) / 'perf.csv'}")
    return 0


def open_results(out: str):
    """(store, runs, config columns) of an existing results folder; tables rebuilt from its records."""
    from bench.store import RunStore
    store = RunStore.existing(Path(out))
    runs, _, keys, problems = store.write_tables()
    warn(problems)
    return store, runs, keys


def cmd_report(args) -> int:
    n_boot, boot_seed = (_count(args.bootstrap, "--bootstrap", 0), _count(args.bootstrap_seed, "--bootstrap-seed", 0))
    store, runs, keys = open_results(args.out)
    report_folder(store, runs, keys, plots=not args.no_plots)
    from bench.design.star import DESIGN_FILE
    from bench.reporting.star_tables import write_star
    if (store.out / DESIGN_FILE).is_file():  # a star design's folder: its tables and forest plot too
        for path in write_star(store.out, runs, plots=not args.no_plots, title=f"star design: {store.out.name}"):
            print(f"wrote {path}")
    if n_boot:
        from bench.reporting.report import write_bootstrap
        table = write_bootstrap(store, runs, keys, n_boot, boot_seed)
        real = int(table["real"].sum()) if len(table) else 0
        print(f"paired bootstrap over test samples ({n_boot} resamples, seed {boot_seed}): {len(table)} "
              f"seed-level differences, {real} with a 95 % interval that excludes 0; wrote {store.out / 'bootstrap.csv'}")
    return 0


def _count(text: str, flag: str, least: int) -> int:
    """An integer flag value >= least, or one line of error."""
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise ConfigError(f"{flag} {text!r}: expected an integer >= {least}")
    return value


def cmd_evaluate(args) -> int:
    seed = _count(args.shift_seed, "--shift-seed", 0)
    threads = _count(args.threads, "--threads", 1) if args.threads else None
    done = api.evaluate(args.out, args.data_dir, args.ood_sets, args.shifts, seed, args.candidates,
                        not args.no_download, not args.quiet, args.device, threads, plots=not args.no_plots)
    for line in done.differing:
        print(f"warning: re-scored metrics differ from the record: {line}", file=sys.stderr)
    for name, why in done.skipped.items():
        print(f"note: OOD set {name} skipped: {why}")
    print(f"scored {plural(done.scored, 'run')} from stored weights: {len(done.ood_sets)} OOD sets "
          f"({', '.join(done.ood_sets)}), {done.shift_sets} shift levels; stored metrics reproduced exactly for "
          f"{done.scored - len(done.differing)} of {done.scored}")
    return 0


def cmd_paper_table(args) -> int:
    from bench.reporting.paper import load_published
    from bench.store import summarize, without_candidates
    load_published(args.published)  # a bad name fails before anything is read
    store, runs, keys = open_results(args.out)
    runs = without_candidates(runs)
    for path in paper_table(store, runs, summarize(runs, keys), args.published, args.in_distribution):
        print(f"wrote {path}")
    return 0


COMMANDS = {"run": cmd_run, "ablate": cmd_ablate, "list": cmd_list, "perf": cmd_perf, "report": cmd_report,
            "evaluate": cmd_evaluate, "paper-table": cmd_paper_table}


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
    try:
        early = _early_flags(argv)
        load_entry_points()
        for path in early.plugin:
            load_plugin(path)
        args = build_parser(early.preset).parse_args(argv)
        for path in getattr(args, "plugin", []):  # the same files: a no-op, unless the early pass missed one
            load_plugin(path)
        return COMMANDS[args.command](args)
    except BenchError as exc:
        print(f"dare-bench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
