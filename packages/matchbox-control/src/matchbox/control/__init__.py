"""``@batch``: Python control flow written for one example, run per example on a batch.

``matchbox-control`` rewrites a function (method, class) once, when it is
decorated: ``if``/``elif``/``else``, ``while``, ``for`` (over ``unbind``,
``reversed``, ``range``, ``zip``, ``enumerate``), ``break``, ``continue`` and
``return`` anywhere, ``and``/``or``/``not``, chained comparisons and
conditional expressions become SIMT code: where a condition is a batch of
per-example truth values, both sides run under execution masks, loops run
while some example is still in them, and assignments change only the
examples that run them.  Where conditions are plain Python values the code is
plain Python, so a decorated function called with plain tensors computes
exactly what the undecorated one computes.

- ``batch(obj)``: the decorator (also ``matchbox.batch``).
- ``source(obj)``: the rewritten source, to read what ``@batch`` generated.
- ``current_mask()``: the execution mask of the code running now.
- ``BatchTypeTestWarning``: warned where ``@batch`` code tests a batch with
  ``torch.is_tensor``/``isinstance(_, torch.Tensor)``/``type(_) is torch.Tensor``.

The rewriting is a sequence of passes (``converters``, in the order written
there), reading analyses (``analysis``) and generating code from templates
(``templates``); the generated code calls ``runtime`` (bound to ``mb__``).
"""

from matchbox.compiler import hide_from_torch_compile
from matchbox.control.api import batch, source
from matchbox.control.errors import ConversionError, SourceNotFoundError, UnsupportedConstructError
from matchbox.control.runtime import current_mask
from matchbox.control.runtime.type_tests import BatchTypeTestWarning

hide_from_torch_compile(__name__)  # torch.compile runs this package eagerly

__all__ = [
    "batch", "source", "current_mask", "BatchTypeTestWarning", "ConversionError",
    "SourceNotFoundError", "UnsupportedConstructError",
]
