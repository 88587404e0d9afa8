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


def test_importing_it_loads_neither_torchtext_nor_matchbox_packed():
    import subprocess

    # Measured from `import matchbox` on: what matchbox.data itself pulls in.
    code = ("import sys, matchbox; before = set(sys.modules); import matchbox.data; "
            "new = set(sys.modules) - before; "
            "bad = [m for m in ('torchtext', 'matchbox.packed') if m in new]; "
            "sys.exit(str(bad) if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
