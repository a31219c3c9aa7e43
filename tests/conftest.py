import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from idx import write_both  # noqa: E402


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A data folder with tiny synthetic MNIST and FashionMNIST IDX files."""
    return write_both(tmp_path_factory.mktemp("data"))
