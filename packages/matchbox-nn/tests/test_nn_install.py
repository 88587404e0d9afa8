"""matchbox-nn installs with matchbox-core only and imports as `matchbox.nn`."""

import importlib.metadata
import sys
from pathlib import Path


def test_imports_into_the_shared_namespace_with_its_py_typed():
    import matchbox
    import matchbox.nn

    assert matchbox.nn is sys.modules["matchbox.nn"]
    assert matchbox.nn.__name__ == "matchbox.nn"
    assert (Path(matchbox.nn.__file__).parent / "py.typed").is_file()


def test_distribution_version():
    assert importlib.metadata.version("matchbox-nn") == "0.1.0"
