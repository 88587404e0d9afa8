"""matchbox-data installs with matchbox-core only and imports as `matchbox.data`."""

import sys

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_into_the_shared_namespace_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox.data")


def test_distribution_version():
    check_distribution_version("matchbox-data")


def test_importing_it_loads_neither_torchtext_nor_matchbox_packed():
    import subprocess

    # Measured from `import matchbox` on: what matchbox.data itself pulls in.
    code = ("import sys, matchbox; before = set(sys.modules); import matchbox.data; "
            "new = set(sys.modules) - before; "
            "bad = [m for m in ('torchtext', 'matchbox.packed') if m in new]; "
            "sys.exit(str(bad) if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
