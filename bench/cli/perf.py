"""`perf`: time the training loop against the seed example's loop, torch-uncertainty and the fp32
matmul peak, or packs of N networks (bench.api.perf; bench.training.perf)."""
from __future__ import annotations

import argparse
from pathlib import Path

from bench import api
from bench.cli.arguments import DATA_DIR_HELP, RESULTS, add_command
from bench.config import STEP_MODES
from bench.errors import ConfigError
from bench.options import parse_int_tuple
from bench.training.perf import format_pack_perf, format_perf


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    perf = add_command(sub, "perf", help="time the training loop against the seed-style loop and the matmul peak",
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
    perf.add_argument("--arch", help="architecture (default mlp, or the preset's; `python -m bench list`); an image "
                      "architecture such as lenet5 or lenet5_same is timed with --networks, each pack beside (g) the "
                      "same networks as ordinary torch modules trained one after another in each step, into "
                      "OUT/perf_packs_<arch>.csv")
    perf.add_argument("--id-dataset", help="mnist or fashion_mnist (default mnist, or the preset's)")
    perf.add_argument("--device", default="auto", help="device of the harness loop: auto, cpu, cuda, cuda:N")
    perf.add_argument("--threads", help="CPU threads for torch (default: torch's choice)")
    perf.add_argument("--skip-seed-loop", action="store_true", help="do not time the slow seed-style loop")
    perf.add_argument("--networks", metavar="N[,N...]",
                      help="instead of (a)-(d): time (e) one pack of N one-member deep ensembles for each N "
                      "(e.g. 1,5,25,50), giving network-epochs/s and the fraction of the matmul peak per pack "
                      "size; writes OUT/perf_packs.csv")
    perf.add_argument("--step", default="auto", choices=STEP_MODES,
                      help="with --networks: how the pack's steps run (eager; graph: replayed from a CUDA graph, a "
                      "GPU only; auto: graph on a GPU, eager on the CPU); the step column says which ran")
    perf.add_argument("--peak-size", default="4096", help="matrix size n of the n x n torch.mm peak test")
    perf.add_argument("--data-dir", help=DATA_DIR_HELP)
    perf.add_argument("--out", default=RESULTS, help="folder for perf.csv")
    return perf


def run(args: argparse.Namespace) -> int:
    networks = _networks(args.networks) if args.networks else None
    table = api.perf(args.preset, args.members, args.epochs, args.batch_size, args.hidden, args.id_dataset,
                     args.device, args.threads, args.skip_seed_loop, networks, args.peak_size, args.data_dir, args.out,
                     step=args.step, arch=args.arch)
    print(format_perf(table) if networks is None else format_pack_perf(table))
    arch = table["arch"].iloc[0] if "arch" in table else "mlp"
    name = "perf.csv" if networks is None else ("perf_packs.csv" if arch == "mlp" else f"perf_packs_{arch}.csv")
    print(f"wrote {Path(args.out) / name}")
    return 0


def _networks(text: str) -> list[int]:
    """--networks 1,5,25: the pack sizes, or one line of error."""
    try:
        networks = list(parse_int_tuple(text.replace(",", "-")))
    except ValueError:
        networks = []
    if not networks or min(networks) < 1:
        raise ConfigError(f"--networks {text!r}: expected integers >= 1 such as 1,5,25,50")
    return networks
