"""What the rewritten code calls (bound to the name ``mb__`` in generated code).

Every helper behaves exactly like the Python construct it replaces when its
mask is ``None`` and its operands are plain values, so a decorated function
called with plain tensors computes what the undecorated one computes.  The
modules hold one concern each:

- ``masks``: execution masks, the context variable, conditions and branches;
- ``select``: masked assignment (merging a variable after a region);
- ``iteration``: the steps of ``for`` loops and their masks;
- ``effects``: attribute, subscript and in-place writes under a mask;
- ``copies``: batches stored as copies under a mask, whose in-place update is refused;
- ``expressions``: ``and``/``or``/``not``, comparisons, conditional expressions;
- ``comprehensions``: comprehensions and generator expressions, step by step;
- ``sequences``: lists whose items only some examples have (``len``, ``[i]``);
- ``dict_keys``: keys added to a dict for only some examples, refused where read;
- ``columns``, ``star_args``: ``zip(*rows)`` and ``f(*items)`` of such lists;
- ``folds``: ``sum``, ``max``, ``min``, ``any``, ``all``, ``functools.reduce``;
- ``iterables``: ``itertools.starmap``/``accumulate`` per example, a deque of steps refused;
- ``scalars``: ``.item()``, ``int``, ``float``, ``bool`` of per-example scalars;
- ``python_numbers``: ``round``, ``divmod``, ``math`` functions, ``torch.tensor`` of them;
- ``module_choice``: ``layers[k](h)`` with a per-example ``k``: each example's own module;
- ``type_tests``: ``isinstance``/``torch.is_tensor``/``type`` tests of batches;
- ``number_merges``: variables that hold a number for some examples (their type tests);
- ``text``: ``str()``/f-strings of per-example values refused (printing them is not);
- ``calls``: which builtin a call reaches, at run time.
"""

import os
import sys

import torch

import matchbox
from matchbox.control.runtime import dict_keys
from matchbox.control.runtime.calls import call
from matchbox.control.runtime.comprehensions import (
    comp_for,
    comp_if,
    dict_comp,
    gen_exp,
    list_comp,
    set_comp,
)
from matchbox.control.runtime.effects import (
    aug_assign,
    aug_attr,
    aug_item,
    call_method,
    delete_item,
    set_attr,
    set_item,
)
from matchbox.control.runtime.expressions import and_, assert_, compare, if_exp, not_, or_
from matchbox.control.runtime.iterables import held, shared_iterable, whole
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
from matchbox.control.runtime.scalars import item
from matchbox.control.runtime.select import (
    Undefined,
    merge_written,
    only_active,
    select,
    user_line,
)
from matchbox.control.runtime.sequences import get_item, operand, truth, unpack
from matchbox.control.runtime.star_args import spread, zip_rows
from matchbox.control.runtime.state_merge import merge
from matchbox.control.runtime.step_outputs import call_steps
from matchbox.control.runtime.structured import (
    scan_capturing,
    scan_for,
    scan_loop_mask,
    scan_while,
    scan_while_capturing,
    unbind_steps,
)
from matchbox.control.runtime.text import text
from matchbox.control.runtime.type_tests import BatchTypeTestWarning, compare_type
from matchbox.control.runtime.unbinding import unbind
from matchbox.extending import deferred_checks, failed_flags, fails, with_failed_flags
from matchbox.masked_batch import MaskedBatch

slice_ = slice  # `obj[a:b] = v` under a mask becomes set_item(..., slice_(a, b, None), v)


def raising(error):
    """What ``raise error`` raises, marked with the examples that raise it where only some
    run the code at hand (a ``raise`` under a per-example condition)."""
    mask = current_mask()
    if isinstance(error, type) and issubclass(error, BaseException):
        error = error()
    if isinstance(error, BaseException) and isinstance(mask, torch.Tensor):
        with_failed_flags(error, mask)
    return error


def refuse_caught():
    """First in an ``except`` clause: refuse an error that a check raised for only some of
    the examples running the ``try`` (see ``converters.try_statements``)."""
    error = sys.exc_info()[1]
    if isinstance(error, NotImplementedError) and _raised_by_matchbox(error):
        raise NotImplementedError(
            f"@batch: an except clause ({user_line()}) catches Matchbox's refusal of code it "
            f"cannot run on a batch ({error}); the loop over examples runs that code and "
            "would not go into except, so the batch would take the except path for every "
            "example. Write the batch's way (the refusal says how), or catch the error "
            "outside the @batch function") from error
    flags = None if error is None else failed_flags(error)
    if flags is None or flags.dim() != 1:
        return
    running = current_mask()
    if running is None:
        every = bool(flags.all())
    else:
        every = running.shape == flags.shape and bool((flags | ~running).all())
    if not every:
        raise NotImplementedError(
            f"@batch: an except clause ({user_line()}) catches an error raised for only "
            f"some of the examples that ran the try ({type(error).__name__}: {error}); the "
            "loop would send only those into except, and a batch cannot split there. Test "
            "for the failing case with an if before the op, or catch the error outside the "
            "@batch function") from error


def _raised_by_matchbox(error):
    """Whether ``error`` was raised in Matchbox's own code (its innermost Python frame):
    Matchbox says that it does not implement something with ``NotImplementedError``, a
    ``RuntimeError`` too, which an ``except RuntimeError:`` fallback would catch."""
    traceback = error.__traceback__
    if traceback is None:
        return False
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback.tb_frame.f_code.co_filename.startswith(_MATCHBOX_SOURCES)


_MATCHBOX_SOURCES = tuple(os.path.join(path, "") for path in matchbox.__path__)


def leaving(value, outermost):
    """``value``, returned by a ``@batch`` function: where the call is the outermost, a
    dict in it whose keys only some examples added is refused (``dict_keys``): the code
    outside ``@batch`` reads it as a plain dict."""
    if outermost:
        dict_keys.refuse_returned(value)
    return value


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
    "BatchTypeTestWarning", "Undefined", "and_", "assert_", "aug_assign", "aug_attr", "aug_item",
    "branch", "call", "call_method", "call_steps", "compare", "compare_type", "comp_for", "comp_if",
    "current_mask", "deferred_checks", "delete_item", "dict_comp", "entry_mask", "for_steps", "gen_exp", "get_item", "guard",
    "held", "if_exp", "item", "iter_enumerate", "iter_range", "iter_reversed", "iter_zip", "leaving",
    "list_comp", "loop_mask", "loop_start", "masked", "merge", "merge_written", "narrow", "not_", "only_active", "or_",
    "raising", "refuse_caught", "return_value", "scan_capturing", "scan_for", "scan_loop_mask", "scan_while",
    "scan_while_capturing", "select", "set_attr", "set_comp", "set_item", "shared_iterable",
    "text",
    "slice_", "spread", "still_running", "truth", "operand", "unbind", "unbind_steps", "unpack",
    "whole", "zip_rows",
]
