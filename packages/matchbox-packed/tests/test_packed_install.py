"""matchbox-packed installs with matchbox-core and matchbox-nn, and imports as `matchbox.packed`."""

import importlib.metadata
import sys
from pathlib import Path


def test_imports_into_the_shared_namespace_with_its_py_typed():
    import matchbox
    import matchbox.packed

    assert matchbox.packed is sys.modules["matchbox.packed"]
    assert matchbox.packed.__name__ == "matchbox.packed"
    assert (Path(matchbox.packed.__file__).parent / "py.typed").is_file()


def test_distribution_version():
    assert importlib.metadata.version("matchbox-packed") == "0.1.0"
