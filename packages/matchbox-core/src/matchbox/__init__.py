"""Matchbox: write PyTorch code for one example, run it on a batch of examples.

``matchbox-core`` owns this package; the other distributions add subpackages
(``matchbox.nn``, ``matchbox.control``, ``matchbox.data``, ``matchbox.packed``)
found through the extended ``__path__``, installed or editable.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Any

__path__ = pkgutil.extend_path(__path__, __name__)

# Importing ops fills the registry; _jagged refuses ops mixing a batch and a nested tensor.
from matchbox import _jagged, _registry, ops  # noqa: E402,F401
from matchbox.batch_reduce import batch_mean, batch_sum  # noqa: E402
from matchbox.compiler import compile, hide_from_torch_compile  # noqa: E402
from matchbox.convenience import install as _install_convenience  # noqa: E402
from matchbox.masked_batch import MaskedBatch  # noqa: E402

__version__ = "0.1.0"

_install_convenience()
hide_from_torch_compile(__name__)

# Names that live in other distributions: resolved on first use.
_LAZY = {
    "batch": ("matchbox.control", "batch", "matchbox-control"),
    "PackedBatch": ("matchbox.packed", "PackedBatch", "matchbox-packed"),
    "as_masked": ("matchbox.packed", "as_masked", "matchbox-packed"),
    "as_packed": ("matchbox.packed", "as_packed", "matchbox-packed"),
    "data": ("matchbox.data", None, "matchbox-data"),
    "nn": ("matchbox.nn", None, "matchbox-nn"),
    "control": ("matchbox.control", None, "matchbox-control"),
    "packed": ("matchbox.packed", None, "matchbox-packed"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'matchbox' has no attribute '{name}'")
    module_name, attribute, distribution = _LAZY[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise ImportError(
            f"matchbox.{name} is provided by the {distribution} distribution, which is "
            f"not installed: pip install {distribution}"
        ) from None
    if attribute is None:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(
            f"matchbox.{name} is not available in the installed {distribution} "
            "distribution yet"
        ) from None


def _installed(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:
        return False


def _load_op_providers() -> None:
    """Let installed distributions register their ops; name them in errors otherwise."""
    if _installed("matchbox.nn"):
        importlib.import_module("matchbox.nn")
    else:
        _registry.declare_provider(
            lambda func: _registry.op_name(func).startswith("torch.nn.functional."),
            "matchbox-nn",
        )


_load_op_providers()

__all__ = ["MaskedBatch", "batch_sum", "batch_mean", "batch", "compile", "PackedBatch",
           "as_masked", "as_packed", "data"]
