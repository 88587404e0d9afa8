"""matchbox-control installs with matchbox-core, gast and astor, and imports as `matchbox.control`."""

import importlib.metadata
import sys
from pathlib import Path


def test_imports_into_the_shared_namespace_with_its_py_typed():
    import matchbox
    import matchbox.control

    assert matchbox.control is sys.modules["matchbox.control"]
    assert matchbox.control.__name__ == "matchbox.control"
    assert (Path(matchbox.control.__file__).parent / "py.typed").is_file()


def test_distribution_version():
    assert importlib.metadata.version("matchbox-control") == "0.1.0"


def test_source_rewriting_dependencies_are_installed():
    import astor
    import gast

    assert gast.parse("x = 1") is not None
    assert astor.to_source(gast.gast_to_ast(gast.parse("x = 1"))).strip() == "x = 1"
