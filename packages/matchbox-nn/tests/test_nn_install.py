"""matchbox-nn installs with matchbox-core only and imports as `matchbox.nn`."""

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_into_the_shared_namespace_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox.nn")


def test_distribution_version():
    check_distribution_version("matchbox-nn")
