"""matchbox-packed installs with matchbox-core and matchbox-nn, and imports as `matchbox.packed`."""

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_into_the_shared_namespace_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox.packed")


def test_distribution_version():
    check_distribution_version("matchbox-packed")
