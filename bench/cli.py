"""Command line: ``python -m bench {run,list,report}`` (also installed as ``dare-bench``)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

import torch

from bench.config import (available_presets, expand_grid, load_preset, make_execution, make_protocol,
                          make_run_config, protocol_help)
from bench.data import DATA_DIR_ENV, DEFAULT_DATA_DIR, resolve_data_dir
from bench.errors import BenchError
from bench.options import describe
from methods import REGISTRY

RESULTS = "results"  # a preset's results go to results/<preset> unless --out says otherwise
DEFAULT_REPORT_OUT = f"{RESULTS}/seed"
# (column, title, scale, digits); {score} is each row's primary score, {set} each OOD set
HEADLINE = [("id_acc", "ID acc", 100, 2), ("id_nll_nats", "NLL (nats)", 1, 3), ("id_ece", "ECE", 1, 3),
            ("auroc_{score}_vs_{set}", "AUROC vs {set}", 1, 3), ("fpr95_{score}_vs_{set}", "FPR@95 vs {set}", 1, 3),
            ("train_seconds", "train s", 1, 1)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="dare-bench: compare ensemble methods for uncertainty "
        "quantification (deep ensembles, DARE, MC dropout) on MNIST / Fashion-MNIST with OOD detection.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train and evaluate a grid of methods x options x seeds",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                         description="Train and evaluate every (method, option combination, seed). "
                         "Values not given come from the preset. Each finished run is saved at once as "
                         "OUT/records/<run_id>.json; re-running the same command skips finished runs, so an "
                         "interrupted grid resumes. Tables (OUT/runs.csv, OUT/summary.csv) and PNG plots are "
                         "rebuilt from the records.")
    add_run_arguments(run)

    sub.add_parser("list", help="list registered methods with their options, and the presets")

    perf = sub.add_parser("perf", help="time the training loop against the seed-style loop and the matmul peak",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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
    perf.add_argument("--peak-size", default="4096", help="matrix size n of the n x n torch.mm peak test")
    perf.add_argument("--data-dir", help=f"dataset folder; default: ${DATA_DIR_ENV}, else {DEFAULT_DATA_DIR}")
    perf.add_argument("--out", default=RESULTS, help="folder for perf.csv")

    report = sub.add_parser("report", help="rebuild the CSV tables (and plots) from the records in OUT",
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    report.add_argument("--out", default=DEFAULT_REPORT_OUT, help="results folder to read and write")
    report.add_argument("--no-plots", action="store_true", help="write only the CSV tables")

    from bench.paper import available_tables
    paper = sub.add_parser("paper-table", help="the runs in OUT beside a published table (CSV, Markdown, PNG)",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--preset", default="seed",
                     help=f"protocol preset: a name ({', '.join(available_presets())}) or a .toml path")
    run.add_argument("--methods", nargs="+", metavar="NAME",
                     help=f"methods to run (registered: {', '.join(REGISTRY)}); default: the preset's")
    run.add_argument("--seeds", nargs="+", metavar="SEED", help="run seeds; default: the preset's")
    run.add_argument("-o", "--option", action="append", default=[], metavar="[METHOD.]NAME=V[,V...]",
                     help="set a method option; a comma list makes a grid (e.g. dare.threshold=0.1,0.3; "
                     "members=5 sets it for every selected method that has it). Repeatable. "
                     "See `python -m bench list` for each method's options")
    run.add_argument("--select", action="append", default=[], metavar="METHOD.NAME=V[,V...]",
                     help="select METHOD's option NAME on the validation split instead of running every value: "
                     "per seed, train the values in the given order, score each by the validation NLL of the "
                     "member-averaged softmax, stop at the first that scores worse than the best so far, and "
                     "report the best (every candidate is recorded). Repeatable; several names make a product "
                     "grid walked in the given order. A preset's [select.METHOD] table does the same")
    group = run.add_argument_group("protocol (override the preset; every value is recorded in each row)")
    for name, _default, allowed, help_text in protocol_help():
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"protocol_{name}", metavar="V",
                           help=f"{help_text} ({allowed})")
    group = run.add_argument_group("execution (speed only: results do not depend on these)")
    group.add_argument("--device", default="auto", help="auto (a GPU when present), cpu, cuda or cuda:N")
    group.add_argument("--threads", help="CPU threads for torch (default: torch's choice)")
    group.add_argument("--no-vectorize", action="store_true",
                       help="train an ensemble's members one after another instead of together")
    group.add_argument("--jobs", default="1", metavar="N",
                       help="runs at a time in local worker processes (1: in this process). Each worker "
                       "gets cores // N threads unless --threads is given")
    group.add_argument("--dask", metavar="ADDRESS",
                       help="run on a Dask cluster: a scheduler address such as tcp://host:8786, or 'local' "
                       "to start one of --jobs worker processes here. Workers must see --data-dir and --out")
    run.add_argument("--dry-run", action="store_true",
                     help="validate the grid and list its runs (finished or to do), train nothing")
    run.add_argument("--force", action="store_true",
                     help="redo runs that already have a finished record in OUT (default: skip them)")
    run.add_argument("--data-dir", help=f"dataset folder in torchvision's layout; default: ${DATA_DIR_ENV}, "
                     f"else {DEFAULT_DATA_DIR} (downloaded there when missing and the network allows)")
    run.add_argument("--no-download", action="store_true",
                     help="never download: fail at once if a dataset file is missing")
    run.add_argument("--out", help=f"results folder (default: {RESULTS}/<preset name>)")
    run.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-run lines")


def cmd_run(args: argparse.Namespace) -> int:
    from bench.executors import make_executor, run_grid, with_references
    from bench.store import RunStore

    preset, values = load_preset(args.preset)
    overrides = {k[len("protocol_"):]: v for k, v in vars(args).items()
                 if k.startswith("protocol_") and v is not None}
    configs = expand_grid(preset, values, args.methods, args.seeds, overrides, args.option, args.select)
    execution = make_execution({"device": args.device, "threads": args.threads,
                                "vectorize": not args.no_vectorize})
    execution.torch_device()  # fail now, not after the first run, if cuda is asked for and absent
    executor = make_executor({"jobs": args.jobs, "dask_address": args.dask})
    data_dir = resolve_data_dir(args.data_dir)
    store = RunStore(Path(args.out or f"{RESULTS}/{preset}"))
    if args.dry_run:
        first, then = with_references(configs)
        finished, problems = store.check([c.run_id for c in first + then])
        for config in first + then:
            state = "finished" if config.run_id in finished and not args.force else "to do"
            role = "  (reference)" if config not in configs else ""
            if hasattr(config, "candidates"):
                role = f"  (selection: up to {len(config.candidates())} candidate runs)"
            print(f"{config.run_id}  {state:<8}  {config.variant} seed {config.seed}{role}")
        warn(problems)
        todo = sum(c.run_id not in finished or args.force for c in first + then)
        print(f"{len(first + then)} runs in the grid, {todo} to do")
        return 0
    started = time.perf_counter()
    try:
        run_ids = run_grid(configs, data_dir, store, executor, execution, download=not args.no_download,
                           progress=not args.quiet, force=args.force)
    except KeyboardInterrupt:
        store.write_tables()
        print(f"\ninterrupted: every finished run is saved in {store.records}; run the same command "
              "again to resume", file=sys.stderr)
        return 130
    wall = time.perf_counter() - started
    runs, _, keys, problems = store.write_tables()
    warn(problems)
    if len(runs):  # this grid's runs, in the grid's order (methods as given, then options, seeds)
        order = {run_id: i for i, run_id in enumerate(run_ids)}
        runs = runs[runs["run_id"].isin(order)].sort_values("run_id", key=lambda s: s.map(order))
    finish(store, runs, keys, args.no_plots, values.get("compare_to"))
    print(f"{len(run_ids)} runs in the grid, {wall:.0f} s wall time; tables in {store.out}")
    return 0


def warn(problems: list[str]) -> None:
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)


def finish(store, runs, keys: list[str], no_plots: bool, compare_to: str | None = None) -> None:
    """Summary table (printed and summary.md), plots, and the paper table when the preset names one."""
    from bench.store import summarize

    summary = summarize(runs, keys)
    print(format_summary(summary))
    (store.out / "summary.md").write_text(format_summary(summary, markdown=True) + "\n")
    for error in runs.get("error", pd.Series(dtype=object)).dropna().unique():
        print(f"error recorded: {error}", file=sys.stderr)
    if compare_to and not summary.empty:
        paper_table(store, runs, summary, compare_to)
    if not no_plots:
        from bench.data import DATASET_CLASSES
        from bench.plots import plot_all
        names = tuple(DATASET_CLASSES[runs["id_dataset"].iloc[0]].classes) if len(runs) else None
        for path in plot_all(store, runs, names):
            print(f"wrote {path}")


def paper_table(store, runs, summary, published: str, in_distribution: str | None = None) -> None:
    """Write and print the runs beside a published table (see bench.paper)."""
    from bench.paper import format_markdown, write_paper_table
    skipped = sorted({s for v in runs.get("ood_skipped", pd.Series(dtype=object)).dropna()
                      for s in str(v).split("; ") if s})
    table, files = write_paper_table(summary, store.out, published, in_distribution, skipped)
    print(format_markdown(table))
    for path in files:
        print(f"wrote {path}")


def headline(summary) -> list[tuple[str, str, float, int]]:
    """HEADLINE with {set} expanded to the OOD sets present; {score} stays per row."""
    sets = list(dict.fromkeys(s for v in summary.get("ood_sets", []) for s in str(v).split()))
    out = []
    for col, title, scale, digits in HEADLINE:
        for s in (sets if "{set}" in col else [None]):
            out.append((col.replace("{set}", s or ""), title.replace("{set}", s or ""), scale, digits))
    return out


def format_summary(summary, markdown: bool = False) -> str:
    """The headline columns as 'mean ± std' per config; AUROC/FPR by each row's primary score."""
    if summary.empty:
        return "no finished runs"
    columns = headline(summary)
    chosen = "selected" in summary and summary["selected"].fillna("").astype(bool).any()
    header = ["variant", "n", "score"] + [title for _, title, _, _ in columns] + (["selected (by seed)"] if chosen else [])
    lines = []
    for _, row in summary.iterrows():
        n = f"{row['n']}" + "".join(f" (+{row[f'n_{k}']} {k})" for k in ("diverged", "error") if row.get(f"n_{k}"))
        score = row.get("primary_score", "pred_entropy")
        lines.append([str(row["variant"]), n, score] + [
            mean_std(row.get(f"{col.replace('{score}', score)}_mean"),
                     row.get(f"{col.replace('{score}', score)}_std"), scale, digits)
            for col, _, scale, digits in columns] + ([str(row.get("selected") or "")] if chosen else []))
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(out + ["| " + " | ".join(c) + " |" for c in lines])
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [header] + lines)


def mean_std(mean, std, scale: float, digits: int) -> str:
    if mean is None or pd.isna(mean):
        return "-"
    std = 0.0 if std is None or pd.isna(std) else std  # one seed: no spread to show
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def cmd_list(_args) -> int:
    from bench.config import OOD_SETS
    from methods.base import Method
    shared = {opt for opt, *_ in describe(Method)}
    print("methods (use -o METHOD.NAME=VALUE):")
    for name, cls in REGISTRY.items():
        joint = " [joint: members share batches and one loss]" if cls.joint else ""
        print(f"  {name}: {cls.summary}{joint}")
        for opt, default, allowed, help_text in describe(cls):
            if opt not in shared:
                print(f"      {opt} = {default!r}  ({allowed}) {help_text}")
    print("options every method has:")
    for opt, default, allowed, help_text in describe(Method):
        print(f"      {opt} = {default!r}  ({allowed}) {help_text}")
    print("protocol values (flags of `run`):")
    for opt, default, allowed, help_text in protocol_help():
        print(f"  --{opt.replace('_', '-')} = {default!r}  ({allowed}) {help_text}")
    print("OOD sets (--ood-sets), per in-distribution set: "
          + "; ".join(f"{k}: {', '.join(v)} (default {v[0]})" for k, v in OOD_SETS.items()))
    print(f"presets: {', '.join(available_presets())}")
    return 0


def cmd_perf(args) -> int:
    from bench.data import load_images
    from bench.options import validate
    from bench.perf import Work, format_perf, run_perf

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
    table = run_perf(work, root, Path(args.out), execution.torch_device(), args.skip_seed_loop)
    print(format_perf(table))
    print(f"wrote {Path(args.out) / 'perf.csv'}")
    return 0


def open_results(out: str):
    """(store, runs, config columns) of an existing results folder; tables rebuilt from its records."""
    from bench.store import RunStore
    if not any((Path(out) / "records").glob("*.json")):
        raise BenchError(f"no records in {out} (expected {Path(out) / 'records'}/<run_id>.json)")
    store = RunStore(Path(out))
    runs, _, keys, problems = store.write_tables()
    warn(problems)
    if "candidate_of" in runs:  # a selection's candidates are in runs.csv; its own row stands for them
        runs = runs[runs["candidate_of"] == ""]
    return store, runs, keys


def cmd_report(args) -> int:
    store, runs, keys = open_results(args.out)
    known = set(available_presets())
    tables = [load_preset(p)[1].get("compare_to") for p in dict.fromkeys(runs.get("preset", [])) if p in known]
    finish(store, runs, keys, args.no_plots, next((t for t in tables if t), None))
    return 0


def cmd_paper_table(args) -> int:
    from bench.paper import load_published
    from bench.store import summarize
    load_published(args.published)  # a bad name fails before anything is read
    store, runs, keys = open_results(args.out)
    paper_table(store, runs, summarize(runs, keys), args.published, args.in_distribution)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run, "list": cmd_list, "perf": cmd_perf, "report": cmd_report,
                "paper-table": cmd_paper_table}[args.command](args)
    except BenchError as exc:
        print(f"dare-bench: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
