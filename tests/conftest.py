import sys
from pathlib import Path

import pytest

import methods

sys.path.insert(0, str(Path(__file__).parent))
from idx import write_both  # noqa: E402


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data folder with tiny synthetic MNIST and FashionMNIST IDX files."""
    return write_both(tmp_path_factory.mktemp("data"))


@pytest.fixture
def clean_registry():
    """Each test starts from the built-in registry and leaves it so."""
    saved = (dict(methods.REGISTRY), dict(methods.SOURCES), dict(methods._plugin_files), methods._entry_points_loaded,
             dict(methods.BROKEN))
    modules = set(sys.modules)
    yield
    methods.REGISTRY.clear(), methods.REGISTRY.update(saved[0])
    methods.SOURCES.clear(), methods.SOURCES.update(saved[1])
    methods._plugin_files.clear(), methods._plugin_files.update(saved[2])
    methods._entry_points_loaded = saved[3]
    methods.BROKEN.clear(), methods.BROKEN.update(saved[4])
    for name in set(sys.modules) - modules:
        if name.startswith(("dare_bench_plugin_", "wd_pkg")):
            del sys.modules[name]
