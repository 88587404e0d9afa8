"""What the rewritten code calls (bound to the name ``mb__`` in generated code).

Every helper behaves exactly like the Python construct it replaces when its
mask is ``None`` and its operands are plain values, so a decorated function
called with plain tensors computes what the undecorated one computes.  The
modules hold one concern each:

- ``masks``: execution masks, the context variable, conditions and branches;
- ``select``: masked assignment (merging a variable after a region);
- ``iteration``: the steps of ``for`` loops and their masks;
- ``effects``: attribute, subscript and in-place writes under a mask;
- ``expressions``: ``and``/``or``/``not``, comparisons, conditional expressions.
"""

from matchbox.control.runtime.effects import (
    aug_assign,
    aug_attr,
    aug_item,
    call_method,
    set_attr,
    set_item,
)
from matchbox.control.runtime.expressions import and_, assert_, compare, if_exp, not_, or_
from matchbox.control.runtime.iteration import (
    for_steps,
    iter_enumerate,
    iter_range,
    iter_reversed,
    iter_zip,
)
from matchbox.control.runtime.masks import (
    branch,
    current_mask,
    entry_mask,
    guard,
    loop_mask,
    masked,
    narrow,
    still_running,
)
from matchbox.control.runtime.select import Undefined, merge, only_active, select

slice_ = slice  # `obj[a:b] = v` under a mask becomes set_item(..., slice_(a, b, None), v)


def return_value(value):
    """The value of the function's one ``return``: ``None`` if no ``return`` ran."""
    return None if isinstance(value, Undefined) else value

__all__ = [
    "Undefined", "and_", "assert_", "aug_assign", "aug_attr", "aug_item", "branch",
    "call_method", "compare", "current_mask", "entry_mask", "for_steps", "guard", "if_exp",
    "iter_enumerate", "iter_range", "iter_reversed", "iter_zip", "loop_mask", "masked", "merge",
    "narrow", "not_", "only_active", "or_", "return_value", "select", "set_attr", "set_item", "slice_",
    "still_running",
]
