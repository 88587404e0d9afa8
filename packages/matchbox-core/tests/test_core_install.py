"""matchbox-core installs with torch only and imports as `matchbox`, the package the other
distributions' modules join."""

from install_checks import check_distribution_version, check_imports_into_the_shared_namespace


def test_imports_as_matchbox_with_its_py_typed():
    check_imports_into_the_shared_namespace("matchbox")


def test_distribution_version():
    check_distribution_version("matchbox-core")


def test_version_attribute_is_the_installed_distributions():
    import importlib.metadata

    import matchbox

    assert matchbox.__version__ == importlib.metadata.version("matchbox-core")


def test_star_import_gives_every_name_in_all():
    # On a core-only install (the `core` environment) __all__ listed batch, PackedBatch and
    # data, whose distributions are absent, so `from matchbox import *` raised ImportError.
    import importlib.metadata

    import matchbox

    namespace: dict = {}
    exec("from matchbox import *", namespace)
    assert {"MaskedBatch", "batch_sum", "batch_mean", "compile", "extending"} <= namespace.keys()
    provided = {ep.name for ep in importlib.metadata.entry_points(group=matchbox.NAMES_GROUP)}
    for sibling in ("batch", "PackedBatch", "as_masked", "as_packed", "data"):
        assert (sibling in namespace) == (sibling in provided), sibling
