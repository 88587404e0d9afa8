"""Text made from a value that differs between examples.

In the loop over examples ``str(n)``, ``f"{n}"``, ``"{}".format(n)`` and ``"%d" % n`` of a
counter, an ``.item()`` value or a tensor give each example its own string.  Under
``@batch`` the value is one ``MaskedBatch`` of every example's, whose ``repr`` is one string
for every example: used as data (a dict key, ``s == "3"``, ``len(s)``, a file name) it was
wrong for every example, silently.  A string cannot differ between examples (a variable
must be the same for all of them, ``select``), so such text is refused
(:func:`text`, ``NotImplementedError`` naming the construct and the line).

Text that is shown, not used, is left as it is: the rewriting (``converters.builtin_calls``)
does not route the arguments of ``print(...)``, of a logging or warning call
(``logger.info(...)``, ``warnings.warn(...)``, ``file.write(...)``), an ``assert``'s message
or a ``raise``'s exception, where the batch's ``repr`` is what debug output is meant to show.
"""

from __future__ import annotations

from typing import Any

from matchbox.control.runtime.select import user_line
from matchbox.extending import BATCH_VIEWS
from matchbox.masked_batch import MaskedBatch

#: How deep :func:`text` looks into tuples, lists and dicts (``"%d %d" % (a, b)``).
_DEPTH = 3


def text(value: Any, what: str) -> Any:
    """``value``, which ``what`` (``str()``, an f-string, ...) makes text of: refused where it
    differs between examples (a batch, or a tuple, list or dict holding one)."""
    if _per_example(value, _DEPTH):
        raise NotImplementedError(
            f"@batch: {what} of a value that differs between examples ({user_line()}): it "
            "makes one string, the batch's repr, for every example, where the loop makes each "
            "example its own, and a string cannot differ between examples, so using it as "
            "data (a dict key, s == '3', len(s), a name) would be wrong for every example. "
            "Print the value directly (print(n), print(f'... {n}') show the batch), or keep "
            "it a number or tensor (compare n == 3, look it up with torch.tensor(values)[n])")
    return value


def _per_example(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is MaskedBatch or kind in BATCH_VIEWS:
        return True
    if depth == 0:
        return False
    if kind is tuple or kind is list:
        return any(_per_example(v, depth - 1) for v in value)
    if kind is dict:
        return any(_per_example(v, depth - 1) for v in value.values())
    return False
