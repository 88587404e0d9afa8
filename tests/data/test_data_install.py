"""matchbox-data installs with matchbox-core only and imports as `matchbox.data`."""

import importlib.metadata
import sys
from pathlib import Path


def test_imports_into_the_shared_namespace_with_its_py_typed():
    import matchbox
    import matchbox.data

    assert matchbox.data is sys.modules["matchbox.data"]
    assert matchbox.data.__name__ == "matchbox.data"
    assert (Path(matchbox.data.__file__).parent / "py.typed").is_file()


def test_distribution_version():
    assert importlib.metadata.version("matchbox-data") == "0.1.0"
