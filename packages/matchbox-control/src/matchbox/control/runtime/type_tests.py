"""Type tests that a batch answers differently from the tensor it stands for.

A ``MaskedBatch`` is not a ``torch.Tensor`` subclass, so ``torch.is_tensor(m)``,
``isinstance(m, torch.Tensor)`` and ``type(m) is torch.Tensor`` are ``False``
for a batch where the loop over examples sees a tensor: ``if
torch.is_tensor(mask): s = s.masked_fill(mask, 0)`` would silently skip the
masking.  Under ``@batch`` each such test still gives Python's answer, and
warns (:class:`BatchTypeTestWarning`, at the user's line) when the value
tested is a batch, saying what to write instead:
``isinstance(m, (torch.Tensor, matchbox.MaskedBatch))``.

A batch of one number per example (a counter merged per example, ``len`` of a per-example
list) stands in the loop for a Python number, or for a 0-d tensor: ``isinstance(n, int)``
or ``type(n) is int`` of it cannot give the loop's answer, which Python's (``False``) is
not where the loop holds an int; such a test is refused (``NotImplementedError``), as is
one of a variable that holds a Python number for some examples and a tensor for others
(``v = 0``, then ``v = x.sum(1)`` under a per-example condition: ``number_merges``).
"""

from __future__ import annotations

import builtins
import numbers
import operator
import warnings
from typing import Any

import torch

from matchbox.control.runtime import number_merges
from matchbox.control.runtime.select import user_line
from matchbox.extending import EXAMPLE_SCALAR
from matchbox.masked_batch import MaskedBatch


class BatchTypeTestWarning(UserWarning):
    """A type test in ``@batch`` code is ``False`` for a batch that stands for a tensor."""


_ADVICE = ("a MaskedBatch stands for a tensor of each example but is not a torch.Tensor, "
           "so this test is False where the loop over examples sees a tensor; test "
           "isinstance(x, (torch.Tensor, matchbox.MaskedBatch)) instead")

# The user's frame is the caller of ``mb__.call``: warn from there.
_STACKLEVEL = 3


def _warn(what: str) -> None:
    warnings.warn(f"@batch: {what} is False for a MaskedBatch: {_ADVICE}", BatchTypeTestWarning,
                  stacklevel=_STACKLEVEL + 1)


def _names_tensor(classes: Any) -> bool:
    """Whether an ``isinstance`` class argument asks for tensors and not for batches."""
    if isinstance(classes, tuple):
        found = [_names_tensor(c) for c in classes]
        return any(found) and MaskedBatch not in classes
    return isinstance(classes, type) and issubclass(classes, torch.Tensor)


def _names_number(classes: Any) -> bool:
    """Whether an ``isinstance`` class argument asks for Python numbers (``int``, ...)."""
    if isinstance(classes, tuple):
        return any(_names_number(c) for c in classes)
    return isinstance(classes, type) and issubclass(classes, numbers.Number)


def _refuse_a_number_test(obj: Any, classes: Any, what: str) -> None:
    """Refuse a test for a Python number of a batch of one number per example."""
    if obj._scalar is EXAMPLE_SCALAR and _names_number(classes):
        raise NotImplementedError(
            f"@batch: {what} of a value that is one number per example ({user_line()}): "
            "under @batch it is "
            "a MaskedBatch of every example's number, which the loop holds as a Python "
            "number (or a 0-d tensor), so the test cannot give the loop's answer; test the "
            "value where it is the same for every example (before a per-example condition "
            "changes it), or leave the test out")


def isinstance_(obj: Any, classes: Any) -> bool:
    """``isinstance(obj, classes)``; warns for a batch tested against ``torch.Tensor``, and
    refuses a test for a number of a batch of one number per example, and a test of a
    variable that holds a number for some examples (``number_merges``)."""
    if type(obj) is MaskedBatch:
        _refuse_a_number_test(obj, classes, "isinstance(x, ...)")
        number_merges.refuse_a_type_test(
            obj, lambda v: builtins.isinstance(v, classes), "isinstance(x, ...)", user_line())
    result = builtins.isinstance(obj, classes)
    if not result and type(obj) is MaskedBatch and _names_tensor(classes):
        _warn("isinstance(x, torch.Tensor)")
    return result


def is_tensor(obj: Any) -> bool:
    """``torch.is_tensor(obj)``; warns for a batch."""
    if type(obj) is MaskedBatch:
        _warn("torch.is_tensor(x)")
    return torch.is_tensor(obj)


_COMPARE = {"is": operator.is_, "is not": operator.is_not, "==": operator.eq,
            "!=": operator.ne}


def compare_type(type_fn: Any, obj: Any, op: str, other: Any) -> Any:
    """``type(obj) <op> other`` (``is``, ``is not``, ``==``, ``!=``); warns where ``obj``
    is a batch and ``other`` a tensor class."""
    cls = type_fn(obj)
    if cls is MaskedBatch and type_fn is builtins.type:
        _refuse_a_number_test(obj, other, f"type(x) {op} ...")
        number_merges.refuse_a_type_test(
            obj, lambda v: bool(_COMPARE[op](type(v), other)), f"type(x) {op} ...",
            user_line())
    if (type_fn is builtins.type and cls is MaskedBatch and isinstance(other, type)
            and issubclass(other, torch.Tensor)):
        warnings.warn(f"@batch: type(x) {op} {other.__module__}.{other.__qualname__} "
                      f"treats a MaskedBatch as a non-tensor: {_ADVICE}",
                      BatchTypeTestWarning, stacklevel=2)
    return _COMPARE[op](cls, other)
