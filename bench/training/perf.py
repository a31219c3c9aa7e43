"""Training speed on identical work, measured in one process: ``python -m bench perf``.

(a) the seed example's loop: torchvision DataLoader + ToTensor (PIL per image), members one after
    another, torch.nn layers;
(b) this harness's loop (bench.training.loop), members stacked;
(c) the machine's fp32 matrix-multiply peak (torch.mm on large square matrices);
(d) torch-uncertainty's deep ensemble, when that optional peer is installed;
(e) with --networks: packs of N one-member networks (after one untimed epoch of the smallest pack,
which takes the first-call costs), and (f) their batched matmuls alone; for an image architecture
(--arch lenet5 ...) instead of (f): (g) the obvious alternative, N ordinary torch modules of that
architecture trained one after another in each step, each with its own Adam, on the same in-memory
data (a plain per-member loop).

Every path trains the same members x epochs x batches of MNIST's 60,000 training images with the
same MLP, Adam and cross-entropy, with no early stop. Times vary from run to run on a shared
machine, so the numbers to compare are the ratios within one run.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import time
from pathlib import Path

import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from bench.config import make_protocol
from bench.data.files import dataset_class
from bench.data.loaders import load_benchmark_data
from bench.models.registry import ArchSpec
from bench.options import option, parse_int
from bench.training.loop import train, train_pack
from methods.deep_ensemble import DeepEnsemble
from bench.store import write_csv
from bench.training.packs import packed_method


@dataclasses.dataclass(frozen=True)
class Work:
    members: int = 3
    epochs: int = 5
    batch_size: int = 256
    hidden: tuple[int, ...] = (256, 256)
    lr: float = 1e-3
    dataset: str = "mnist"
    arch: str = "mlp"
    preset: str = ""  # where the shape came from, if a preset
    peak_size: int = option(4096, parse_int, "an integer >= 1", check=lambda v: v >= 1,
                            help="matrix size n of the n x n torch.mm peak test")

    def sizes(self, in_features: int = 784, classes: int = 10) -> list[int]:
        return [in_features, *self.hidden, classes]

    def protocol(self, epochs: int | None = None):
        """The protocol of the timed training: the work's shape, no validation split, no early stop."""
        shape = {"hidden": list(self.hidden)} if self.arch == "mlp" else {"arch": self.arch}
        return make_protocol({"id_dataset": self.dataset, "val_size": 0, **shape, "epochs": epochs or self.epochs,
                              "batch_size": self.batch_size, "lr": self.lr, "early_stop_acc": None})

    @property
    def spec(self) -> ArchSpec:
        return self.protocol().arch_spec


def training_flops(work: Work, samples: int) -> float:
    """FLOPs of training, counted from the layer shapes (the architecture's training_flops_per_sample;
    the MLP's: bench.models.stacked.training_flops_per_sample)."""
    return float(work.spec.cost().training_flops_per_sample) * samples * work.members * work.epochs


def matmul_peak_gflops(n: int = 4096, repeats: int = 5, device: torch.device | str = "cpu") -> float:
    """Best of ``repeats`` fp32 torch.mm of two n x n matrices on ``device``, in GFLOP/s."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    a @ b  # warm-up: thread pool, page faults
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def seed_mlp(work: Work) -> nn.Module:
    sizes = work.sizes()
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if i:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


def seed_loader(work: Work, root: Path):
    from torchvision.transforms import ToTensor  # torchvision: only for the seed example's loop
    dataset = dataset_class(work.dataset)(root=str(root), train=True, transform=ToTensor(), download=False)
    return DataLoader(dataset, batch_size=work.batch_size, shuffle=True)


def time_seed_loop(work: Work, root: Path, seed: int = 0) -> float:
    """(a) The seed example's loop: DataLoader + ToTensor, members trained one after another."""
    loader = seed_loader(work, root)
    start = time.perf_counter()
    for m in range(work.members):
        torch.manual_seed(seed + m)
        member = seed_mlp(work)
        optimizer = torch.optim.Adam(member.parameters(), lr=work.lr)
        for _ in range(work.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss = nn.functional.cross_entropy(member(x), y)
                loss.backward()
                optimizer.step()
    return time.perf_counter() - start


def time_harness_loop(work: Work, root: Path, device: torch.device, seed: int = 0) -> tuple[float, float]:
    """(b) bench.training.loop on the same work. Returns (train seconds, one-off data decode seconds)."""
    start = time.perf_counter()
    protocol = work.protocol()
    data = load_benchmark_data(protocol, root, download=False)
    load_seconds = time.perf_counter() - start
    result = train(DeepEnsemble(members=work.members), protocol, data.train, data.n_classes, seed,
                   progress=False, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return result.seconds, load_seconds


def time_pack(work: Work, root: Path, device: torch.device, networks: int, step: str = "auto") -> tuple[float, str]:
    """(e) one pack of ``networks`` one-member deep ensembles (seeds 0..networks-1) trained as one
    stacked computation (bench.training.loop.train_pack), its steps run as ``step`` says. Returns the
    training seconds and how the steps ran (eager or graph)."""
    protocol = work.protocol()
    data = load_benchmark_data(protocol, root, download=False)
    methods = [DeepEnsemble(members=1)] * networks
    start = time.perf_counter()
    results = train_pack([(m, seed) for seed, m in enumerate(methods)], packed_method(methods), protocol, data.train,
                         data.n_classes, progress=False, device=device, step=step)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, results[0].step


def time_pack_matmuls(work: Work, device: torch.device, networks: int, steps: int = 30) -> float:
    """(f) seconds per step of only the batched matmuls that one training step of a pack of
    ``networks`` does (per layer: forward, weight gradient, and input gradient after the first), on
    random tensors of the training shapes: the ceiling the pack's kernels put on its speed, without
    the gathers, element-wise work, loss, Adam and autograd around them."""
    sizes, batch = work.sizes(), work.batch_size
    layers = [(torch.randn(networks, batch, i, device=device), torch.randn(networks, i, o, device=device),
               torch.randn(networks, batch, o, device=device)) for i, o in zip(sizes[:-1], sizes[1:])]

    def step():
        for layer, (h, w, g) in enumerate(layers):
            torch.bmm(h, w)
            torch.bmm(h.transpose(1, 2), g)
            if layer:
                torch.bmm(g, w.transpose(1, 2))

    return seconds_per_call(step, device, steps, warmups=3)


def seconds_per_call(step, device: torch.device, calls: int, warmups: int = 1) -> float:
    """Seconds per call of ``step`` over ``calls`` calls, after ``warmups`` untimed ones (the device synchronised)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmups):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    sync()
    return (time.perf_counter() - start) / calls


def time_plain_loop(work: Work, root: Path, device: torch.device, networks: int) -> float:
    """(g) ``networks`` ordinary torch modules of the work's architecture (each the ``as_module`` of a
    one-member model of seed s, the pack's initial weights), trained one after another within each
    step, each with its own fused Adam and data order, on the in-memory training rows: the obvious
    way to train several CNNs. Returns the training seconds."""
    protocol = work.protocol()
    data = load_benchmark_data(protocol, root, download=False)
    x, y = data.train.x.to(device), data.train.y.to(device)
    modules = [protocol.arch_spec.build(s, [0]).to(device).as_module(0).train() for s in range(networks)]
    optimizers = [torch.optim.Adam(m.parameters(), lr=work.lr, eps=protocol.adam_eps, fused=True) for m in modules]
    generators = [torch.Generator(device).manual_seed(s) for s in range(networks)]
    start = time.perf_counter()
    for _ in range(work.epochs):
        orders = [torch.randperm(len(y), generator=g, device=device) for g in generators]
        for first in range(0, len(y), work.batch_size):
            for module, optimizer, order in zip(modules, optimizers, orders):
                idx = order[first:first + work.batch_size]
                loss = nn.functional.cross_entropy(module(x[idx]), y[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def time_pack_kernels(work: Work, device: torch.device, networks: int, steps: int = 10) -> float:
    """(f) for an image architecture: seconds per step of only the convolutions and dense matmuls that
    one step of a pack of ``networks`` computes, network after network as the stacked model runs them
    (the model's ``kernel_step``): the ceiling its kernels put on the pack, without the pooling, ReLU,
    loss and Adam around them."""
    kernels = work.spec.build(0, [0]).to(device).kernel_step(work.batch_size)

    def step():
        for _ in range(networks):
            kernels()
    return seconds_per_call(step, device, steps)


def _speed_row(path: str, work: Work, n: int, seconds: float, samples: int, **extra) -> dict:
    steps = math.ceil(samples / work.batch_size) * work.epochs
    flops = training_flops(dataclasses.replace(work, members=n), samples)
    return {"path": path, "networks": n, **extra, "train_seconds": seconds, "step_ms": 1e3 * seconds / steps,
            "network_epochs_per_second": n * work.epochs / seconds, "train_tflop": flops / 1e12,
            "achieved_gflops": flops / seconds / 1e9}


def run_pack_perf(work: Work, root: Path, out_dir: Path, device: torch.device, networks: list[int],
                  log=print, step: str = "auto") -> pd.DataFrame:
    """(e) for each pack size: networks/s and the fraction of the matmul peak measured in this
    process; (f) beside it, the fraction that the pack's matmuls (an image architecture: its
    convolutions and matmuls) alone reach; (g) for an image architecture, the plain per-member loop
    timed alike. The peak is measured before and after the timings and the higher one taken (on a
    shared host it moves between runs). Written to OUT/perf_packs.csv (the MLP) or
    OUT/perf_packs_<arch>.csv."""
    samples = len(dataset_class(work.dataset)(root=str(root), train=True, download=False))
    log("measuring (c) fp32 matmul peak ...")
    peaks = [matmul_peak_gflops(work.peak_size, device=device)]
    # untimed: the first pack of a process pays the kernels' and the allocator's first-call costs
    # (on a GPU about a second, more than a whole small pack's epoch)
    log(f"warm-up: an untimed epoch of a pack of {min(networks)} networks ...")
    time_pack(dataclasses.replace(work, epochs=1), root, device, min(networks), step)
    rows, mlp = [], work.arch == "mlp"
    for n in networks:
        log(f"timing (e) a pack of {n} networks ...")
        seconds, how = time_pack(work, root, device, n, step)
        step_flops = work.spec.cost().training_flops_per_sample * work.batch_size * n
        kernels = step_flops / (time_pack_matmuls if mlp else time_pack_kernels)(work, device, n) / 1e9
        rows.append(_speed_row("pack", work, n, seconds, samples, step=how, matmuls_only_gflops=kernels))
        log(f"  {n} networks: {seconds:.1f} s, {rows[-1]['achieved_gflops']:.1f} GFLOP/s "
            f"(its {'matmuls' if mlp else 'convolutions and matmuls'} alone: {kernels:.1f})")
        if not mlp:
            log("  timing (g) the plain loop ...")
            rows.append(_speed_row("plain_loop", work, n, time_plain_loop(work, root, device, n), samples,
                                   step="eager", matmuls_only_gflops=kernels))
            log(f"  {n} plain modules: {rows[-1]['train_seconds']:.1f} s, {rows[-1]['achieved_gflops']:.1f} GFLOP/s")
    log("measuring (c) fp32 matmul peak again ...")
    peaks.append(matmul_peak_gflops(work.peak_size, device=device))
    table = pd.DataFrame(rows).assign(device=str(device), matmul_peak_gflops=max(peaks),
                                      matmul_peak_runs_gflops=" ".join(f"{p:.1f}" for p in peaks))
    table["fraction_of_peak"] = table["achieved_gflops"] / table["matmul_peak_gflops"]
    table["matmuls_only_fraction_of_peak"] = table["matmuls_only_gflops"] / table["matmul_peak_gflops"]
    name = "perf_packs.csv" if mlp else f"perf_packs_{work.arch}.csv"
    return _save(table, work, out_dir / name, skip=("members",) + (() if mlp else ("hidden",)))


def _save(table: pd.DataFrame, work: Work, path: Path, skip: tuple[str, ...] = ()) -> pd.DataFrame:
    """The table with the work's shape and the library versions, written to ``path``."""
    for key, value in dataclasses.asdict(work).items():
        if key not in skip:
            table[key] = "-".join(map(str, value)) if isinstance(value, tuple) else value
    table["threads"] = torch.get_num_threads()
    table["torch_version"] = torch.__version__
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(table, path)
    return table


def format_pack_perf(table: pd.DataFrame) -> str:
    alone = "matmuls_only_fraction_of_peak" in table
    mlp = "arch" not in table or table["arch"].iloc[0] == "mlp"
    lines = [f"{'path':>10} {'networks':>8} {'step':>6} {'train s':>8} {'ms/step':>8} {'net-epochs/s':>13} {'GFLOP/s':>8} "
             f"{'of peak':>8}" + (f" {'matmuls alone':>14}" if alone else "")]
    for _, r in table.iterrows():
        lines.append(f"{r['path']:>10} {r['networks']:>8} {str(r['step'])[:6]:>6} {r['train_seconds']:>8.1f} "
                     f"{r['step_ms']:>8.3f} {r['network_epochs_per_second']:>13.2f} {r['achieved_gflops']:>8.1f} "
                     f"{r['fraction_of_peak']:>8.1%}" + (f" {r['matmuls_only_fraction_of_peak']:>14.1%}" if alone else ""))
    lines.append(f"fp32 matmul peak: {table['matmul_peak_gflops'].iloc[0]:.1f} GFLOP/s (the higher of "
                 f"{table['matmul_peak_runs_gflops'].iloc[0]}, measured in this process before and after); "
                 + ("matmuls alone: the pack's batched matmuls of one step, without anything around them" if mlp else
                    "matmuls alone: the step's convolutions and matmuls, without pooling, ReLU, loss and Adam; "
                    "plain_loop: the same networks as ordinary torch modules, one after another in each step"))
    return "\n".join(lines)


def torch_uncertainty_available() -> bool:
    try:  # optional peers (the 'peers' extra), imported only when perf times them
        for name in ("lightning", "torch_uncertainty"):
            importlib.import_module(name)
    except ImportError:
        return False
    return True


def time_torch_uncertainty(work: Work, root: Path, seed: int = 0) -> float:
    """(d) torch-uncertainty's deep ensemble, trained by its ClassificationRoutine under Lightning,
    fed by the same DataLoader + ToTensor as (a) (what its MNIST datamodule does)."""
    import lightning as L  # optional peers (the 'peers' extra): imported only here
    try:
        from torch_uncertainty.methods import deep_ensembles  # torch-uncertainty >= 0.13
    except ImportError:
        from torch_uncertainty.models import deep_ensembles
    from torch_uncertainty.routines import ClassificationRoutine
    from torch_uncertainty.transforms import RepeatTarget

    torch.manual_seed(seed)
    model = deep_ensembles([seed_mlp(work) for _ in range(work.members)], reset_model_parameters=True)
    routine = ClassificationRoutine(model=model, num_classes=10, loss=nn.CrossEntropyLoss(), is_ensemble=True,
                                    format_batch_fn=RepeatTarget(work.members),
                                    optim_recipe=lambda m: torch.optim.Adam(m.parameters(), lr=work.lr))
    trainer = L.Trainer(max_epochs=work.epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)
    loader = seed_loader(work, root)
    start = time.perf_counter()
    trainer.fit(routine, train_dataloaders=loader)
    return time.perf_counter() - start


def run_perf(work: Work, root: Path, out_dir: Path, device: torch.device, skip_seed_loop: bool = False,
             log=print) -> pd.DataFrame:
    samples = len(dataset_class(work.dataset)(root=str(root), train=True, download=False))
    flops = training_flops(work, samples)
    log(f"work: {work.members} members x {work.epochs} epochs x {samples} images, batch {work.batch_size}, "
        f"MLP {'-'.join(map(str, work.sizes()))}; {flops / 1e12:.3f} TFLOP of training matmuls")
    log("measuring (c) fp32 matmul peak ...")
    peak = matmul_peak_gflops(work.peak_size, device=device)
    rows = []

    def add(path: str, seconds: float | None, note: str = "") -> None:
        rows.append({"path": path, "train_seconds": seconds, "note": note})
        if seconds is not None:
            log(f"  {path}: {seconds:.1f} s")

    log("timing (b) harness loop ...")
    harness_s, load_s = time_harness_loop(work, root, device)
    add("harness", harness_s, f"bench.training.loop, members stacked, device {device}; data decode {load_s:.1f} s once")
    if skip_seed_loop:
        add("seed_loop", None, "skipped (--skip-seed-loop)")
    else:
        log("timing (a) seed-style loop (the slow one) ...")
        add("seed_loop", time_seed_loop(work, root), "DataLoader + ToTensor, members one after another")
    if torch_uncertainty_available():
        log("timing (d) torch-uncertainty deep ensemble ...")
        add("torch_uncertainty", time_torch_uncertainty(work, root), "deep_ensembles + ClassificationRoutine")
    else:
        add("torch_uncertainty", None, "skipped: torch-uncertainty/lightning not installed "
            "(pip install -e '.[peers]')")
        log("  torch_uncertainty: skipped (not installed; pip install -e '.[peers]')")

    table = pd.DataFrame(rows)
    seed_s = table.set_index("path")["train_seconds"].get("seed_loop")
    table["speedup_vs_seed_loop"] = seed_s / table["train_seconds"] if seed_s == seed_s and seed_s else None
    table["train_tflop"] = flops / 1e12
    table["achieved_gflops"] = flops / table["train_seconds"] / 1e9
    table["matmul_peak_gflops"] = peak
    table["fraction_of_peak"] = table["achieved_gflops"] / peak
    return _save(table, work, out_dir / "perf.csv")


def format_perf(table: pd.DataFrame) -> str:
    lines = [f"{'path':<18} {'train s':>8} {'speed-up':>9} {'GFLOP/s':>8} {'of peak':>8}"]
    for _, r in table.iterrows():
        if pd.isna(r["train_seconds"]):
            lines.append(f"{r['path']:<18} {'skipped':>8}")
            continue
        speedup = "-" if pd.isna(r["speedup_vs_seed_loop"]) else f"{r['speedup_vs_seed_loop']:.2f}x"
        lines.append(f"{r['path']:<18} {r['train_seconds']:>8.1f} {speedup:>9} {r['achieved_gflops']:>8.1f}"
                     f" {r['fraction_of_peak']:>8.1%}")
    lines.append(f"fp32 matmul peak: {table['matmul_peak_gflops'].iloc[0]:.1f} GFLOP/s; "
                 f"training work: {table['train_tflop'].iloc[0]:.3f} TFLOP "
                 f"(= {table['train_tflop'].iloc[0] * 1e3 / table['matmul_peak_gflops'].iloc[0]:.1f} s at peak)")
    return "\n".join(lines)
