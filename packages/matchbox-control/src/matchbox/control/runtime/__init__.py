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

from matchbox._capture import fails
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
    loop_start,
    masked,
    narrow,
    per_example_truth,
    still_running,
)
from matchbox.control.runtime.select import Undefined, merge, only_active, select
from matchbox.masked_batch import MaskedBatch

slice_ = slice  # `obj[a:b] = v` under a mask becomes set_item(..., slice_(a, b, None), v)


def return_value(value, returned=True):
    """The value of the function's one ``return``: ``None`` if no ``return`` ran.

    ``returned`` says, per example, which examples ran a ``return``: the others
    reached the end of the function, where Python returns ``None``, which a
    batch cannot hold next to the others' values (as an explicit ``return
    None`` on one path cannot).
    """
    if isinstance(value, Undefined):
        return None
    if type(returned) is MaskedBatch:
        outer = current_mask()
        fell_through = ~per_example_truth(returned)
        if outer is not None:
            fell_through = fell_through & outer
        if fails(fell_through):
            examples = fell_through.nonzero().flatten().tolist()
            raise TypeError(
                f"@batch: the function returns a value for some examples but reaches its end "
                f"without a return for examples {examples}, where Python returns None, which "
                "a batch cannot hold next to the others' values; return a value on every path")
    return value

__all__ = [
    "Undefined", "and_", "assert_", "aug_assign", "aug_attr", "aug_item", "branch",
    "call_method", "compare", "current_mask", "entry_mask", "for_steps", "guard", "if_exp",
    "iter_enumerate", "iter_range", "iter_reversed", "iter_zip", "loop_mask", "loop_start",
    "masked", "merge",
    "narrow", "not_", "only_active", "or_", "return_value", "select", "set_attr", "set_item", "slice_",
    "still_running",
]
