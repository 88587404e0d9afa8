"""What every distribution's test_<dist>_install.py checks of its installed package.

Each distribution is a part of the ``matchbox`` namespace package: its module must be
the one Python imports under its own name, ship its ``py.typed`` marker and be installed
at the version its pyproject.toml gives.  The module is imported by name, so this file
imports no distribution that an environment may lack.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2] / "packages"


def check_imports_into_the_shared_namespace(module_name: str) -> None:
    """``module_name`` (``matchbox.nn``, ...) imports beside ``matchbox`` as itself, with
    its ``py.typed``."""
    importlib.import_module("matchbox")
    module = importlib.import_module(module_name)
    assert module is sys.modules[module_name]
    assert module.__name__ == module_name
    assert (Path(module.__file__).parent / "py.typed").is_file()


def check_distribution_version(distribution: str) -> None:
    """The installed version is the one ``packages/<distribution>/pyproject.toml`` declares
    (an environment does not test a stale install)."""
    # A pattern, not tomllib: the distributions support Python 3.10, which lacks it.
    text = (PACKAGES / distribution / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', text, re.M).group(1)
    assert importlib.metadata.version(distribution) == declared
