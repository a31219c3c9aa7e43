import functools
import os
import sys
from pathlib import Path

import pytest
import torch

import methods
from bench import api

sys.path.insert(0, str(Path(__file__).parent))
from idx import write_both  # noqa: E402


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data folder with tiny synthetic MNIST and FashionMNIST IDX files."""
    return write_both(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session", autouse=True)
def threads_shared_among_workers():
    """Under pytest-xdist the workers share the cores: each gets its part for torch, whose threads would
    otherwise outnumber the cores and wait for one another at every small operation."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))
    yield


@pytest.fixture(scope="session", autouse=True)
def image_cache_of_the_session(tmp_path_factory):
    """The shift suite's disk cache in a folder of the test session, never the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DARE_BENCH_CACHE", str(tmp_path_factory.mktemp("image-cache")))
        yield


@pytest.fixture(scope="session", autouse=True)
def matmul_peak_measured_once():
    """A grid that trains first measures the machine's matmul peak, about a second of CPU time; the suite's
    hundred grids share one measurement, as the grids of one process on one machine may."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api, "matmul_peak_gflops", functools.cache(api.matmul_peak_gflops))
        yield


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
