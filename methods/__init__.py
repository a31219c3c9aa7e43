"""The method registry: the one place that maps a name to a method class.

Three ways in, one registry:

* the methods shipped here: ``methods/<name>.py`` plus an entry in ``_BUILTIN`` below;
* a plugin file: ``--plugin path/to/my_method.py`` on any command, or ``load_plugin(path)``;
  every ``Method`` subclass with a ``name`` defined in that file is registered;
* an installed package: an entry point in the group ``dare_bench.methods`` naming a ``Method``
  subclass (``my_method = "my_pkg.my_method:MyMethod"``), found the first time a name is looked up.

Nothing else changes: the training loop, evaluators and CLI pick a registered method up.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from importlib import metadata
from pathlib import Path

from bench.errors import ConfigError
from methods.base import Method
from methods.anchor_net import AnchorNet
from methods.batch_ensemble import BatchEnsemble
from methods.dare import DARE
from methods.deep_ensemble import DeepEnsemble
from methods.laplace import LaplaceEnsemble
from methods.mc_dropout import MCDropout
from methods.mimo import MIMO
from methods.mod import MOD
from methods.negcorr import NegCorr
from methods.packed_ensemble import PackedEnsemble
from methods.rde import RDE
from methods.single_network import SingleNetwork
from methods.snapshot_ensemble import SnapshotEnsemble
from methods.swag import SWAG
from methods.vi import VariationalInference

ENTRY_POINT_GROUP = "dare_bench.methods"
_BUILTIN: tuple[type[Method], ...] = (DeepEnsemble, DARE, MCDropout, SingleNetwork, AnchorNet, MOD, NegCorr, RDE,
                                      BatchEnsemble, PackedEnsemble, MIMO, SWAG, LaplaceEnsemble, SnapshotEnsemble,
                                      VariationalInference)
REGISTRY: dict[str, type[Method]] = {}
SOURCES: dict[str, str] = {}  # name -> where it came from
_plugin_files: dict[Path, list[str]] = {}  # resolved plugin path -> the names it registered
BROKEN: dict[str, str] = {}  # entry-point name -> why it could not be registered
_entry_points_loaded = False


def _shown(fn) -> str:
    """'penalty(self, model, task_loss, batch)': a signature by its parameter names."""
    params = inspect.signature(fn).parameters.values()
    return f"{fn.__name__}(" + ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                                         for p in params) + ")"


def hook_problem(cls: type[Method], hook: str) -> str | None:
    """Why ``cls``'s override of the Method hook ``hook`` cannot be called as the harness calls it
    (the base's arguments by position, those with defaults by name), or None."""
    base = inspect.getattr_static(Method, hook)
    own = next(vars(k)[hook] for k in cls.__mro__ if hook in vars(k))
    if own is base:
        return None
    if isinstance(base, property):  # a property may become another property or a plain value
        if isinstance(own, property) or not callable(own):
            return None
        return f"{cls.__name__}.{hook} must be a property or a plain value, as methods.Method.{hook} is"
    if isinstance(base, classmethod) and not isinstance(own, classmethod):
        return f"{cls.__name__}.{hook} must be a classmethod, as methods.Method.{hook} is"
    base_fn = base.__func__ if isinstance(base, classmethod) else base
    own_fn = own.__func__ if isinstance(own, (classmethod, staticmethod)) else own
    if not callable(own_fn):
        return f"{cls.__name__}.{hook} is not a function"
    params = list(inspect.signature(base_fn).parameters.values())
    if isinstance(own, staticmethod):  # called through the instance: it gets no self
        params = params[1:]
    try:
        inspect.signature(own_fn).bind(*[p.name for p in params if p.default is p.empty],
                                       **{p.name: p.default for p in params if p.default is not p.empty})
    except TypeError:
        return f"{cls.__name__}.{_shown(own_fn)} does not match the method API: expected {_shown(base_fn)}"
    return None


# every function, classmethod and property of Method is a hook a method may override
HOOKS = tuple(name for name, attr in vars(Method).items() if not name.startswith("_")
              and (inspect.isfunction(attr) or isinstance(attr, (property, classmethod))))


def register(cls: type, source: str) -> type[Method]:
    """Add a method class under ``cls.name``; ConfigError for a non-method, an empty or taken name,
    or a hook overridden with another signature than the base's."""
    if not (isinstance(cls, type) and issubclass(cls, Method)) or cls is Method:
        raise ConfigError(f"{source}: {cls!r} is not a methods.Method subclass")
    problem = next(filter(None, (hook_problem(cls, hook) for hook in HOOKS)), None)
    if problem:
        raise ConfigError(f"{source}: {problem}")
    name = cls.name
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{source}: method class {cls.__name__} has an empty name (set name = \"...\")")
    if not name.isidentifier():
        raise ConfigError(f"{source}: method name {name!r} must be a Python identifier (letters, digits, _)")
    if name in REGISTRY and REGISTRY[name] is not cls:
        raise ConfigError(f"{source}: method name '{name}' is already registered ({SOURCES[name]})")
    REGISTRY[name], SOURCES[name] = cls, source
    return cls


for _cls in _BUILTIN:  # the built-ins pass the same checks as any plugin
    register(_cls, "built in")


def load_plugin(path: str | Path) -> list[str]:
    """Import a Python file and register every Method subclass with a name defined in it. Loading
    the same file again is a no-op. Returns the names it registered."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"plugin {path}: no such file")
    resolved = path.resolve()
    if resolved in _plugin_files:
        return _plugin_files[resolved]
    # a module name unique per file, so that two plugins called my_method.py do not collide and
    # worker processes (which load the same files) can unpickle the classes
    module_name = f"dare_bench_plugin_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ConfigError(f"plugin {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look classes up here
    try:
        # compiled from the source each time, never from a cached .pyc: a plugin rewritten within the same
        # second at the same size would otherwise run its old code
        exec(compile(resolved.read_bytes(), str(resolved), "exec"), vars(module))
    except Exception as exc:  # noqa: BLE001 - any failure in the user's file is one line, not a traceback
        del sys.modules[module_name]
        raise ConfigError(f"plugin {path} failed to import: {type(exc).__name__}: {exc}") from None
    found = [obj for obj in vars(module).values() if inspect.isclass(obj) and issubclass(obj, Method)
             and obj.__module__ == module_name]
    if not found:
        del sys.modules[module_name]
        raise ConfigError(f"plugin {path} defines no method (a methods.Method subclass with a name)")
    try:
        names = [register(cls, f"plugin {path}").name for cls in found]  # an empty name is an error too
    except ConfigError:
        for name in [n for n, source in SOURCES.items() if source == f"plugin {path}"]:
            del REGISTRY[name], SOURCES[name]  # all of the file or none of it
        del sys.modules[module_name]
        raise
    _plugin_files[resolved] = names
    return names


def plugin_files() -> list[Path]:
    """The plugin files loaded in this process (worker processes load them again)."""
    return list(_plugin_files)


def load_entry_points() -> list[str]:
    """Register the methods that installed packages declare in the ``dare_bench.methods`` group.
    Runs once per process; returns the names registered. An entry point that fails to load or to
    register does not stop the others: its one-line reason is kept in BROKEN, and using its name
    raises it (a broken package must not stop commands that do not use it)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    names = []
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            names.append(_register_entry_point(entry))
        except ConfigError as exc:
            BROKEN[entry.name] = str(exc)
    _entry_points_loaded = True
    return names


def _register_entry_point(entry) -> str:
    source = f"entry point {entry.name} = {entry.value}"
    try:
        cls = entry.load()
    except Exception as exc:  # noqa: BLE001 - a broken package is one line
        raise ConfigError(f"{source} failed to load: {type(exc).__name__}: {exc}") from None
    if isinstance(cls, type) and issubclass(cls, Method) and cls.name != entry.name:
        raise ConfigError(f"{source}: the class's name is '{cls.name}', not '{entry.name}'")
    return register(cls, source).name


def get_method(name: str) -> type[Method]:
    if name not in REGISTRY:
        load_entry_points()
    if name in BROKEN and name not in REGISTRY:
        raise ConfigError(BROKEN[name])
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown method '{name}' (registered: {', '.join(REGISTRY)})") from None


__all__ = ["Method", "REGISTRY", "get_method", "register", "load_plugin", "load_entry_points", "plugin_files"]
