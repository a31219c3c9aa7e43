"""One validated object describes one run: the protocol (data, model, optimiser), the method with
its options, and the seed. Presets are plain TOML files of the same values (``bench/presets``)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, ClassVar

from bench.data import ood_sets
from bench.data.files import DATASETS
from bench.models.registry import ARCH_OPTIONS, ARCHITECTURES, ArchSpec
from bench.errors import ConfigError
from bench.options import (choice, describe, option, parse_bool, parse_int, parse_int_tuple, parse_optional_float,
                           parse_float, parse_str, parse_str_tuple, validate, without_implicit_defaults)
from methods import Method, get_method

PRESET_DIR = Path(__file__).with_name("presets")
N_CLASSES = {name: dataset.classes for name, dataset in DATASETS.items()}  # of each in-distribution dataset
OOD_SPLIT = "test"  # fixed: never an OOD train split (a torch-uncertainty pitfall)
SPLIT_FROM_RUN_SEED = "run"
REFERENCE_METHOD = "deep_ensemble"  # every paired comparison and star design is against this method
PRECISIONS = ("fp32", "tf32", "bf16")
STEP_MODES = ("auto", "eager", "graph")  # how a training step runs (bench.training.graphs)


def parse_pack_size(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return parse_int(value)


def parse_split_seed(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == SPLIT_FROM_RUN_SEED:
        return SPLIT_FROM_RUN_SEED
    return parse_int(value)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Everything about a run except the method: shared by all methods compared in a table."""
    id_dataset: str = choice("mnist", tuple(N_CLASSES), help="in-distribution dataset")
    ood_sets: tuple[str, ...] = option((), parse_str_tuple,
                                       "names such as mnist,cifar10_gray28 (see `python -m bench list`)",
                                       help="OOD sets scored against the ID test split (their test splits); "
                                       "default: the other MNIST-family dataset")
    preprocess: str = choice("raw", ("raw", "raw255", "standardize"),
                             help="raw: pixels in [0,1]; raw255: pixel bytes as floats 0-255 (the DARE "
                             "paper's code); standardize: ID train mean/std")
    val_size: int = option(1000, parse_int, "an integer >= 0", check=lambda v: v >= 0,
                           help="training images held out as a validation split")
    split_seed: int | str = option(0, parse_split_seed, "an integer >= 0, or run (the run's seed)",
                                   check=lambda v: v == SPLIT_FROM_RUN_SEED or v >= 0,
                                   help="seed of the train/validation split; run: one split per run seed")
    arch: str = choice("mlp", tuple(ARCHITECTURES), implicit=True,
                       help="architecture of every network (bench.models.registry; `python -m bench list`)")
    trunk: str = choice("none", ("none", *(a for a, spec in ARCHITECTURES.items() if not spec.any_rows)), implicit=True,
                        help="a frozen feature extractor of this architecture, trained once per seed on the ID training "
                        "split; the members (arch=mlp) are heads on its penultimate features (bench.training.trunk: "
                        "the DARE paper's recipe for image data)")
    hidden: tuple[int, ...] = option((256, 256), parse_int_tuple, "widths >= 1 such as 256-256",
                                     check=lambda v: len(v) >= 1 and all(w >= 1 for w in v),
                                     help="hidden layer widths of the MLP (an option of arch=mlp only)")
    epochs: int = option(5, parse_int, "an integer >= 1", check=lambda v: v >= 1,
                         help="maximum training epochs")
    batch_size: int = option(256, parse_int, "an integer >= 1", check=lambda v: v >= 1,
                             help="mini-batch size")
    lr: float = option(1e-3, parse_float, "a number > 0", check=lambda v: 0 < v < float("inf"),
                       help="Adam learning rate")
    early_stop_acc: float | None = option(0.97, parse_optional_float, "a number in (0, 1], or none",
                                          check=lambda v: v is None or 0 < v <= 1,
                                          help="a member stops once its epoch train accuracy reaches this")
    init: str = choice("torch", ("torch", "glorot"),
                       help="torch: nn.Linear's default; glorot: Glorot-uniform weights, zero biases (Keras)")
    adam_eps: float = option(1e-8, parse_float, "a number > 0", check=lambda v: 0 < v < float("inf"),
                             help="Adam's epsilon (1e-8 torch, 1e-7 Keras)")
    precision: str = choice("fp32", PRECISIONS, implicit=True,
                            help="arithmetic of the training steps: fp32 (the default, the same on CPU and GPU); "
                            "tf32: fp32 matmuls in TF32 (a CUDA GPU only); bf16: the forward pass under bfloat16 "
                            "autocast (loss, weights, gradients and Adam stay fp32). Evaluation is fp32 always. Part of a "
                            "run's identity, so tables never mix precisions in one cell")

    @classmethod
    def check_options(cls, values: dict[str, Any], what: str) -> dict[str, Any]:
        if not values["ood_sets"]:  # the default: the first OOD set of the ID dataset
            values["ood_sets"] = ood_sets.known_for(values["id_dataset"])[:1]
        ood_sets.check_names(values["ood_sets"], values["id_dataset"], what)
        if values["trunk"] != "none" and not ARCHITECTURES[values["arch"]].any_rows:
            raise ConfigError(f"{what}: trunk={values['trunk']} feeds its features to heads that read rows: "
                              f"arch={values['arch']} reads images (use arch=mlp)")
        if len(set(values["ood_sets"])) < len(values["ood_sets"]):
            raise ConfigError(f"{what}: ood_sets={','.join(values['ood_sets'])} names a set twice")
        return values

    @property
    def arch_spec(self) -> ArchSpec:
        """The networks of a run: the architecture with its options, on the ID dataset's images."""
        dataset = DATASETS[self.id_dataset]
        options = tuple((name, getattr(self, name)) for name in ARCHITECTURES[self.arch].options)
        return ArchSpec(self.arch, dataset.image_shape, dataset.classes, self.init, options)

    def as_dict(self) -> dict[str, Any]:
        """The protocol's values as a run's config holds them: implicit values at their default left out
        (ids made before they existed hold), and the options of architectures other than its own."""
        own = set(ARCHITECTURES[self.arch].options)
        values = without_implicit_defaults(Protocol, dataclasses.asdict(self))
        return {k: v for k, v in values.items() if k in own or k not in ARCH_OPTIONS}

    @property
    def n_classes(self) -> int:
        return N_CLASSES[self.id_dataset]

    def split_seed_for(self, run_seed: int) -> int:
        """The seed of the train/validation split of a run with this seed."""
        return run_seed if self.split_seed == SPLIT_FROM_RUN_SEED else self.split_seed


@dataclasses.dataclass(frozen=True)
class Execution:
    """How runs execute. Changes speed, never the meaning of a result, so not part of run_id."""
    device: str = option("auto", parse_str, "auto, cpu, cuda or cuda:N",
                         check=lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
                         help="where to train; auto picks a GPU when one is present")
    threads: int | None = option(None, lambda v: None if v is None else parse_int(v), "an integer >= 1",
                                 check=lambda v: v is None or v >= 1, help="CPU threads for torch (default: torch's)")
    vectorize: bool = option(True, parse_bool, "true or false", flag="--no-vectorize",
                             help="train an ensemble's members together (--no-vectorize: one after another, no packs)")
    save_weights: bool = option(False, parse_bool, "true or false",
                                help="keep each finished run's weights in OUT/weights/<run_id>.pt (bench evaluate "
                                "scores them again)")
    pack_size: int | str = option("auto", parse_pack_size, "auto or an integer >= 1",
                                  check=lambda v: v == "auto" or v >= 1,
                                  help="networks (runs x members) trained together as one stacked computation: runs of "
                                  "one protocol pack across seeds and options, and a method's runs with those of the "
                                  "methods it mixes with (bench.training.packs). 1: run by run; auto: as many as a "
                                  "quarter of the device's memory holds, at most bench.training.packs.MAX_AUTO_NETWORKS "
                                  "for its type (with several jobs, split so that every worker gets a pack). Packing "
                                  "changes speed; results move only at the level of float rounding (docs/usage.md)")

    snapshot_every: float = option(300.0, parse_float, "a number of seconds >= 0", check=lambda v: v >= 0,
                                   help="keep a pack's training state in OUT/partial/<pack_id>.pt at the end of an "
                                   "epoch once this many seconds have passed since the last time, so that a pack cut "
                                   "short (a killed job, a session's end) goes on from there when the same command "
                                   "runs again (0: never kept; a kept one is still resumed from)")

    step: str = choice("auto", STEP_MODES,
                       help="how a training step runs: eager (each kernel launched from Python); graph (captured "
                       "once in a CUDA graph and replayed; a GPU and a method whose step can be captured, "
                       "bench.training.graphs); auto: graph where it applies, else eager. The same arithmetic "
                       "either way")

    def check_device(self, items: list) -> None:
        """One line of error when the grid items ask the device for what it cannot do: cuda where
        there is none, --step graph without a GPU, precision=tf32 on a CPU."""
        device = self.torch_device()
        if self.step == "graph" and device.type != "cuda":
            raise ConfigError(f"--step graph replays CUDA graphs, and the device is {device}; use --step auto or eager")
        tf32 = {run.variant for item in items for run in item.runs() if run.protocol.precision == "tf32"}
        if tf32 and device.type != "cuda":
            raise ConfigError(f"precision=tf32 is a CUDA GPU's matmul mode, and the device is {device} "
                              f"({len(tf32)} variant(s) ask for it); use fp32 or bf16")

    def torch_device(self):
        import torch
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"execution: device={self.device!r} but no CUDA GPU is available; use --device cpu or auto")
        return torch.device(self.device)


def make_execution(values: dict[str, Any]) -> Execution:
    return Execution(**validate(Execution, values, "execution"))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: a grid item (``bench.design.grid.GridItem``) of kind "run"."""
    kind: ClassVar[str] = "run"
    method: str
    method_options: dict[str, Any]
    protocol: Protocol
    seed: int
    preset: str
    # the method itself, built once from its validated options (make_run_config): every stage reads this one
    _method: Method | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def built_method(self) -> Method:
        if self._method is None:  # unpickled in a worker process: built there once, after its plugins load
            object.__setattr__(self, "_method", get_method(self.method)(**self.method_options))
        return self._method

    def __reduce__(self):
        # a worker gets the method's registered name, not its class (a plugin's class need not be importable there)
        return RunConfig, (self.method, self.method_options, self.protocol, self.seed, self.preset)

    def to_dict(self) -> dict[str, Any]:
        # implicit protocol values at their default (precision=fp32, arch=mlp) are left out: ids made before they
        # existed hold
        protocol = self.protocol.as_dict()
        return {"method": self.method, "method_options": dict(self.method_options),
                "protocol": protocol, "seed": self.seed, "preset": self.preset}

    @property
    def fixed_options(self) -> dict[str, Any]:
        return self.method_options

    def runs(self) -> list["RunConfig"]:
        return [self]

    @property
    def run_id(self) -> str:
        """Stable id from the full config (every default included, but implicit options at their
        default: ``bench.options.option(implicit=True)``)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=list)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def references(self) -> dict[str, "RunConfig"]:
        """Runs this run needs first (same protocol and seed), by role, e.g. DARE's DE (MSE) reference."""
        if "_references" in self.__dict__:  # made once: the executor, the packs and the walks all ask
            return self.__dict__["_references"]
        out = {}
        for role, (method, options) in self.built_method.references().items():
            try:
                out[role] = make_run_config(method, options, self.protocol, self.seed, self.preset)
            except ConfigError as exc:
                raise ConfigError(f"{self.variant} needs a reference run ({role}), and it is not valid: "
                                  f"{exc}") from None
        object.__setattr__(self, "_references", out)
        return out

    @property
    def variant(self) -> str:
        """Method plus its options, e.g. 'dare(members=3, threshold=0.3)': one line in a plot."""
        opts = ", ".join(f"{k}={v}" for k, v in self.method_options.items() if v is not None)
        return f"{self.method}({opts})"

    def row(self) -> dict[str, Any]:
        """Flat config columns for a results row: every value that can move a result."""
        method = self.built_method
        # implicit values at their default (precision=fp32) are left out, as in the run id: a folder's
        # older records, which lack them, then group with newer ones (bench.reporting.report fills them in)
        p = self.protocol.as_dict()
        if "hidden" in p:
            p["hidden"] = "-".join(map(str, self.protocol.hidden))
        p["ood_sets"] = " ".join(self.protocol.ood_sets)
        # "+ TS": a temperature-scaled row is never matched with a published row or taken as a reference
        label = method.label + (" + TS" if self.method_options.get("temperature") == "fit" else "")
        return {"run_id": self.run_id, "method": self.method, "label": label, "variant": self.variant,
                "preset": self.preset, **self.method_options, **p, "ood_split": OOD_SPLIT,
                "primary_score": method.primary_score, "seed": self.seed}


def make_protocol(values: dict[str, Any]) -> Protocol:
    protocol = Protocol(**validate(Protocol, values, "protocol"))
    # an option of another architecture, given at all (even at its default): the completed values that
    # check_options sees could not tell it from an option left out
    given = sorted(set(values) & set(ARCH_OPTIONS) - set(ARCHITECTURES[protocol.arch].options))
    if given:
        raise ConfigError(f"protocol: {given[0]} is an option of another architecture; arch={protocol.arch} takes "
                          f"{', '.join(ARCHITECTURES[protocol.arch].options) or 'no options'}")
    return protocol


def overridden(preset: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A preset's protocol values with the given overrides. An override of ``arch`` drops the preset's
    values of options the new architecture does not take (``--arch lenet5`` on a preset with hidden
    widths); options given beside it stay, and a wrong one is the usual one-line error."""
    values = {**preset, **overrides}
    if "arch" in overrides and str(overrides["arch"]).strip() in ARCHITECTURES:
        own = ARCHITECTURES[str(overrides["arch"]).strip()].options
        values = {k: v for k, v in values.items() if k in overrides or k in own or k not in ARCH_OPTIONS}
    return values


def make_run_config(method: str, method_options: dict[str, Any], protocol: Protocol, seed: Any,
                    preset: str = "custom") -> RunConfig:
    cls, what = get_method(method), f"method {method}"
    try:  # the method's own checks: of its options, then against the protocol
        options = validate(cls, method_options, what)
        built = cls(**options)
        built.check_protocol(protocol, what)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a method's checks is one line, not a traceback
        raise ConfigError(f"{what}: checking its options raised {type(exc).__name__}: {exc}") from None
    try:
        seed = parse_int(seed)
    except (ValueError, TypeError):
        raise ConfigError(f"seed={seed!r} is not valid; allowed: an integer >= 0") from None
    if seed < 0:
        raise ConfigError(f"seed={seed!r} is out of range; allowed: an integer >= 0")
    return RunConfig(method, without_implicit_defaults(cls, options), protocol, seed, preset, built)



def named_file(name_or_path: str, folder: Path, suffix: str, kind: str) -> Path:
    """A file shipped in ``folder`` by its name (no suffix), or any path; ConfigError if absent."""
    path = Path(name_or_path)
    if not path.suffix:
        path = folder / f"{name_or_path}{suffix}"
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in folder.glob(f"*{suffix}")))
        raise ConfigError(f"unknown {kind} '{name_or_path}' (available: {available}, or a path to a {suffix} file)")
    return path


def protocol_help() -> list[tuple[str, Any, str, str]]:
    return describe(Protocol)


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_preset(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """A preset by name (bench/presets/NAME.toml) or path. Returns (name, values)."""
    path = named_file(name_or_path, PRESET_DIR, ".toml", "preset")
    try:
        values = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"preset {path}: not valid TOML ({exc})") from None
    return path.stem, values
