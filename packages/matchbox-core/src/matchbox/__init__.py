"""Matchbox: write PyTorch code for one example, run it on a batch of examples.

``matchbox-core`` owns this package; the other distributions add subpackages
(``matchbox.nn``, ``matchbox.control``, ``matchbox.data``, ``matchbox.packed``)
found through the extended ``__path__``, installed or editable.
"""

from __future__ import annotations

import importlib.metadata
import pkgutil
from typing import Any

__path__ = pkgutil.extend_path(__path__, __name__)

# Importing ops fills the registry (ops.conversion refuses a batch beside a nested tensor);
# ``matchbox.functional`` is there after ``import matchbox``, as torch.nn.functional after
# ``import torch`` (a user trial ran the nn README's snippet without importing it).
from matchbox import _registry, extending, functional, ops  # noqa: E402,F401
from matchbox._async_checks import raise_pending_checks, set_async_checks  # noqa: E402
from matchbox.batch_reduce import batch_mean, batch_sum  # noqa: E402
from matchbox.compiler import compile, hide_from_torch_compile  # noqa: E402
from matchbox.convenience import install as _install_convenience  # noqa: E402
from matchbox.masked_batch import MaskedBatch  # noqa: E402

try:
    __version__ = importlib.metadata.version("matchbox-core")
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

_install_convenience()
hide_from_torch_compile(__name__)

# Matchbox's other distributions make themselves known through entry points, so
# that core names none of them to use them:
#   "matchbox.ops": a module that registers ops when imported (matchbox-nn's
#       torch.nn.functional ops for MaskedBatch), imported with matchbox;
#   "matchbox.names": the top-level names a distribution provides (matchbox.batch,
#       matchbox.PackedBatch, matchbox.data, ...), resolved on first use.
OPS_GROUP = "matchbox.ops"
NAMES_GROUP = "matchbox.names"

# For errors only: what a sibling distribution provides, named when it is NOT
# installed.  An uninstalled distribution has no metadata, so no entry point can
# say this; these two tables are the one place core names its siblings.
_NAMES_ELSEWHERE = {
    "batch": "matchbox-control", "control": "matchbox-control",
    "PackedBatch": "matchbox-packed", "as_masked": "matchbox-packed",
    "as_packed": "matchbox-packed", "packed": "matchbox-packed",
    "data": "matchbox-data", "nn": "matchbox-nn",
}
_OPS_ELSEWHERE = {"torch.nn.functional.": "matchbox-nn"}  # op-name prefix -> distribution


def _entry_points(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


_NAMES: dict[str, Any] | None = None


def __getattr__(name: str) -> Any:
    global _NAMES
    if _NAMES is None:
        _NAMES = _entry_points(NAMES_GROUP)
    entry = _NAMES.get(name)
    if entry is not None:
        return entry.load()
    distribution = _NAMES_ELSEWHERE.get(name)
    if distribution is None:
        raise AttributeError(f"module 'matchbox' has no attribute '{name}'")
    raise ImportError(
        f"matchbox.{name} is provided by the {distribution} distribution, which is "
        f"not installed: pip install {distribution}"
    )


def _load_op_providers() -> None:
    """Let installed distributions register their ops; name the others in errors."""
    installed = set()
    for entry in _entry_points(OPS_GROUP).values():
        entry.load()
        if entry.dist is not None:
            installed.add(entry.dist.name.lower().replace("_", "-"))
    for prefix, distribution in _OPS_ELSEWHERE.items():
        if distribution not in installed:
            _registry.declare_provider(
                lambda func, prefix=prefix: _registry.op_name(func).startswith(prefix),
                distribution)


_load_op_providers()

# Core's own names, and those of the sibling distributions that are installed: a name
# whose distribution is missing would make `from matchbox import *` raise ImportError.
_CORE_NAMES = ["MaskedBatch", "batch_sum", "batch_mean", "compile", "extending",
               "set_async_checks", "raise_pending_checks"]
_SIBLING_NAMES = ["batch", "PackedBatch", "as_masked", "as_packed", "data"]
__all__ = _CORE_NAMES + [name for name in _SIBLING_NAMES
                         if name in _entry_points(NAMES_GROUP)]
