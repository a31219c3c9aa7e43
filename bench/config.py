"""One validated object describes one run: the protocol (data, model, optimiser), the method with
its options, and the seed. Presets are plain TOML files of the same values (``bench/presets``)."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import tomllib
from pathlib import Path
from typing import Any

from bench.errors import ConfigError
from bench.options import (choice, describe, option, parse_bool, parse_int, parse_int_tuple, parse_optional_float,
                           parse_float, parse_str, parse_str_tuple, validate)
from methods import Method, get_method

PRESET_DIR = Path(__file__).with_name("presets")
# In-distribution dataset -> the OOD sets it may be scored against; the first is the default.
OOD_SETS = {"mnist": ("fashion_mnist", "cifar10_gray28"), "fashion_mnist": ("mnist", "cifar10_gray28")}
OOD_SPLIT = "test"  # fixed: never an OOD train split (a torch-uncertainty pitfall)
SPLIT_FROM_RUN_SEED = "run"


def parse_split_seed(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == SPLIT_FROM_RUN_SEED:
        return SPLIT_FROM_RUN_SEED
    return parse_int(value)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Everything about a run except the method: shared by all methods compared in a table."""
    id_dataset: str = choice("mnist", tuple(OOD_SETS), help="in-distribution dataset")
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
    hidden: tuple[int, ...] = option((256, 256), parse_int_tuple, "widths >= 1 such as 256-256",
                                     check=lambda v: len(v) >= 1 and all(w >= 1 for w in v),
                                     help="hidden layer widths of the MLP")
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

    @classmethod
    def check_options(cls, values: dict[str, Any], what: str) -> dict[str, Any]:
        known = OOD_SETS[values["id_dataset"]]
        if not values["ood_sets"]:
            values["ood_sets"] = known[:1]
        for name in values["ood_sets"]:
            if name not in known:
                raise ConfigError(f"{what}: OOD set '{name}' is not known for in-distribution "
                                  f"{values['id_dataset']} (known: {', '.join(known)})")
        if len(set(values["ood_sets"])) < len(values["ood_sets"]):
            raise ConfigError(f"{what}: ood_sets={','.join(values['ood_sets'])} names a set twice")
        return values

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
    vectorize: bool = option(True, parse_bool, "true or false",
                             help="train an ensemble's members together (false: one after another)")

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
    method: str
    method_options: dict[str, Any]
    protocol: Protocol
    seed: int
    preset: str

    def make_method(self) -> Method:
        return get_method(self.method)(**self.method_options)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "method_options": dict(self.method_options),
                "protocol": dataclasses.asdict(self.protocol), "seed": self.seed, "preset": self.preset}

    @property
    def run_id(self) -> str:
        """Stable id from the full config (every default included)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=list)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def references(self) -> dict[str, "RunConfig"]:
        """Runs this run needs first (same protocol and seed), by role, e.g. DARE's DE (MSE) reference."""
        out = {}
        for role, (method, options) in self.make_method().references().items():
            try:
                out[role] = make_run_config(method, options, self.protocol, self.seed, self.preset)
            except ConfigError as exc:
                raise ConfigError(f"{self.variant} needs a reference run ({role}), and it is not valid: "
                                  f"{exc}") from None
        return out

    @property
    def variant(self) -> str:
        """Method plus its options, e.g. 'dare(members=3, threshold=0.3)': one line in a plot."""
        opts = ", ".join(f"{k}={v}" for k, v in self.method_options.items() if v is not None)
        return f"{self.method}({opts})"

    def row(self) -> dict[str, Any]:
        """Flat config columns for a results row: every value that can move a result."""
        method = self.make_method()
        p = dataclasses.asdict(self.protocol)
        p["hidden"] = "-".join(map(str, self.protocol.hidden))
        p["ood_sets"] = " ".join(self.protocol.ood_sets)
        return {"run_id": self.run_id, "method": self.method, "label": method.label, "variant": self.variant,
                "preset": self.preset, **self.method_options, **p, "ood_split": OOD_SPLIT,
                "primary_score": method.primary_score, "seed": self.seed}


def make_protocol(values: dict[str, Any]) -> Protocol:
    return Protocol(**validate(Protocol, values, "protocol"))


def make_run_config(method: str, method_options: dict[str, Any], protocol: Protocol, seed: Any,
                    preset: str = "custom") -> RunConfig:
    cls = get_method(method)
    options = validate(cls, method_options, f"method {method}")
    try:
        seed = parse_int(seed)
    except (ValueError, TypeError):
        raise ConfigError(f"seed={seed!r} is not valid; allowed: an integer >= 0") from None
    if seed < 0:
        raise ConfigError(f"seed={seed!r} is out of range; allowed: an integer >= 0")
    if options.get("checkpoint", "none") != "none" and protocol.val_size == 0:
        raise ConfigError(f"method {method}: checkpoint={options['checkpoint']} needs a validation split; "
                          "set val_size > 0")
    return RunConfig(method, options, protocol, seed, preset)


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def named_file(name_or_path: str, folder: Path, suffix: str, kind: str) -> Path:
    """A file shipped in ``folder`` by its name (no suffix), or any path; ConfigError if absent."""
    path = Path(name_or_path)
    if not path.suffix:
        path = folder / f"{name_or_path}{suffix}"
    if not path.is_file():
        available = ", ".join(sorted(p.stem for p in folder.glob(f"*{suffix}")))
        raise ConfigError(f"unknown {kind} '{name_or_path}' (available: {available}, or a path to a {suffix} file)")
    return path


def load_preset(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """A preset by name (bench/presets/NAME.toml) or path. Returns (name, values)."""
    path = named_file(name_or_path, PRESET_DIR, ".toml", "preset")
    try:
        values = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"preset {path}: not valid TOML ({exc})") from None
    return path.stem, values


def protocol_help() -> list[tuple[str, Any, str, str]]:
    return describe(Protocol)


PRESET_KEYS = {"seeds", "methods", "protocol", "method_options", "select", "compare_to", "out"}


def exclusive_with(cls: type, name: str) -> set[str]:
    """Options of ``cls`` that may not be given together with option ``name``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = set(fields[name].metadata.get("excludes", ())) if name in fields else set()
    return out | {f.name for f in fields.values() if name in f.metadata.get("excludes", ())}


def parse_option_assignment(text: str, flag: str = "--option") -> tuple[str | None, str, list[str]]:
    """'dare.threshold=0.1,0.3' -> ('dare', 'threshold', ['0.1', '0.3']); 'members=5' -> (None, ...)."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip():
        expected = "METHOD.NAME=VALUE[,VALUE...]" + (" or NAME=VALUE[,VALUE...]" if flag == "--option" else "")
        raise ConfigError(f"{flag} {text!r}: expected {expected}")
    method, dot, name = key.strip().rpartition(".")
    return (method if dot else None), name, [v.strip() for v in values.split(",")]


def parse_early_break_assignment(text: str, values: list[str]) -> bool | dict[str, str]:
    """--select METHOD.early_break=true|false|NAME=VALUE[,NAME=VALUE]: the same choices as a
    preset's early_break (a bool, or the option values where the break applies)."""
    if len(values) == 1 and "=" not in values[0]:
        try:
            return parse_bool(values[0])
        except ValueError:
            pass
    pairs = [v.partition("=") for v in values]
    if not all(sep and k.strip() and v.strip() for k, sep, v in pairs):
        raise ConfigError(f"--select {text!r}: early_break takes true, false or NAME=VALUE[,NAME=VALUE...] "
                          "(e.g. anchor_net.early_break=sigma=10)")
    return {k.strip(): v.strip() for k, _, v in pairs}


def expand_grid(preset: str, preset_values: dict[str, Any], methods: list[str] | None,
                seeds: list[Any] | None, protocol_overrides: dict[str, Any],
                option_assignments: list[str], select_assignments: list[str] = ()) -> list:
    """Every (method, option combination, seed) run, validated before anything trains. A method
    with a selection spec (a preset's [select.METHOD] table, or --select METHOD.NAME=V,...) gives
    one ``bench.select.Selection`` per remaining option combination and seed instead."""
    from bench.select import Selection, parse_select_spec, same_value

    unknown = sorted(set(preset_values) - PRESET_KEYS)
    if unknown:
        raise ConfigError(f"preset {preset}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(PRESET_KEYS))})")
    protocol = make_protocol({**preset_values.get("protocol", {}), **protocol_overrides})
    methods = methods or preset_values.get("methods") or []
    seeds = seeds if seeds is not None else preset_values.get("seeds", [0])
    if not methods:
        raise ConfigError("no methods selected: pass --methods")
    if not seeds:
        raise ConfigError("no seeds selected: pass --seeds")
    classes = {m: get_method(m) for m in dict.fromkeys(methods)}
    # a list in a preset's method options is a grid, like a comma list on the command line
    grids: dict[str, dict[str, list[Any]]] = {
        m: {k: list(v) if isinstance(v, list) else [v]
            for k, v in preset_values.get("method_options", {}).get(m, {}).items()} for m in classes}
    given: dict[str, set[str]] = {m: set() for m in classes}  # options set on the command line
    for text in option_assignments:
        target, name, values = parse_option_assignment(text)
        targets = [target] if target else [m for m, cls in classes.items()
                                           if name in {f.name for f in dataclasses.fields(cls)}]
        if target and target not in classes:
            get_method(target)  # unknown name -> error listing the registered ones
            raise ConfigError(f"--option {text!r}: method '{target}' is not among the selected methods")
        if not targets:
            raise ConfigError(f"--option {text!r}: no selected method has an option '{name}'")
        for m in targets:
            for other in exclusive_with(classes[m], name) - given[m]:  # -o dare.delta=... replaces a
                grids[m].pop(other, None)                               # preset's threshold
            grids[m][name] = values
            given[m].add(name)
    preset_specs = preset_values.get("select", {})
    for m in preset_specs:
        get_method(m)  # a preset may select for methods a command leaves out, but not for unknown ones
    # -o NAME on the command line fixes NAME: it leaves the preset's select grid
    specs = {m: {k: v for k, v in spec.items() if k not in given.get(m, ())}
             for m, spec in preset_specs.items() if m in classes}
    specs = {m: spec for m, spec in specs.items() if set(spec) - {"early_break"}}
    cli_selected: dict[str, set[str]] = {}
    for text in select_assignments:
        target, name, values = parse_option_assignment(text, "--select")
        if not target:
            raise ConfigError(f"--select {text!r}: expected METHOD.NAME=VALUE[,VALUE...]")
        if target not in classes:
            get_method(target)
            raise ConfigError(f"--select {text!r}: method '{target}' is not among the selected methods")
        if target not in cli_selected:  # --select replaces a preset's select table for that method
            specs[target], cli_selected[target] = {"early_break": True}, set()
        if name in cli_selected[target]:
            raise ConfigError(f"--select {text!r}: {target}.{name} is given twice; give its values once, "
                              "comma-separated")
        specs[target][name] = parse_early_break_assignment(text, values) if name == "early_break" else values
        cli_selected[target].add(name)
        for other in exclusive_with(classes[target], name) - given[target]:  # as with -o
            grids[target].pop(other, None)
    selects = {}
    for m, spec in specs.items():  # each grid value parsed by its option's parser ('0.1' -> 0.1)
        grid, early = parse_select_spec(m, spec, f"select {m}", given.get(m, set()))
        fields = {f.name: f for f in dataclasses.fields(classes[m]) if "parse" in f.metadata}
        parsed = []
        for name, values in grid:
            if name not in fields:
                raise ConfigError(f"select {m}: unknown option '{name}' (known options: {', '.join(fields)})")
            try:
                parsed.append((name, tuple(fields[name].metadata["parse"](v) for v in values)))
            except (ValueError, TypeError):
                raise ConfigError(f"select {m}: {name}={list(values)} is not valid; allowed: "
                                  f"{fields[name].metadata['allowed']}") from None
            repeated = [v for i, v in enumerate(parsed[-1][1]) if any(same_value(v, w) for w in parsed[-1][1][:i])]
            if repeated:  # two candidates with one run id: the walk would score one run twice
                raise ConfigError(f"select {m}: the grid of '{name}' lists {repeated[0]!r} twice")
        selects[m] = (tuple(parsed), early)
    configs: list = []
    for m in classes:
        selected = {n for n, _ in selects[m][0]} if m in selects else set()
        both = sorted(selected & given[m])
        if both:
            raise ConfigError(f"method {m}: option '{both[0]}' is both set (-o) and selected (--select)")
        if selected and protocol.val_size == 0:
            raise ConfigError(f"select {m}: selection scores candidates on the validation split; set val_size > 0")
        names = [n for n in grids[m] if n not in selected]
        for combo in itertools.product(*(grids[m][n] for n in names)):
            for seed in seeds:
                fixed = dict(zip(names, combo))
                if m in selects:
                    grid, early = selects[m]
                    first = make_run_config(m, {**fixed, **{n: v[0] for n, v in grid}}, protocol, seed, preset)
                    selection = Selection(m, fixed, grid, early, protocol, first.seed, preset)
                    selection.candidates()  # validate every candidate now, not mid-walk
                    configs.append(selection)
                else:
                    configs.append(make_run_config(m, fixed, protocol, seed, preset))
    return configs
