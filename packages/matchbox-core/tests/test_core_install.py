"""matchbox-core installs with torch only and imports as `matchbox`, the package the other
distributions' modules join."""

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_as_matchbox_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox")


def test_distribution_version():
    check_distribution_version("matchbox-core")
