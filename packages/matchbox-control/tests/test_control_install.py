"""matchbox-control installs with matchbox-core, gast and astor, and imports as `matchbox.control`."""

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_into_the_shared_namespace_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox.control")


def test_distribution_version():
    check_distribution_version("matchbox-control")


def test_source_rewriting_dependencies_are_installed():
    import astor
    import gast

    assert gast.parse("x = 1") is not None
    assert astor.to_source(gast.gast_to_ast(gast.parse("x = 1"))).strip() == "x = 1"
