"""What a function ``@batch`` did not rewrite hands back: refused where an example has none.

A helper without the decorator runs as plain Python on batches: a loop in it over
``x.unbind(1)`` runs every step for every example, and a step past an example's end
gives that example no value (core makes an op's result padding for an example
absent from an operand: in the loop over examples that op never runs for it).  So
the loop's last state is absent for the shorter examples, where the loop over
examples gives each its own last state; so is ``x.unbind(1)[-1]`` there (the batch's
last padded step, the longest example's), where each example's own last step is
``x[:, -1]`` (or ``x.unbind(1)[-1]`` in rewritten code).  Core refuses such a value where it leaves
Matchbox (``matchbox._absent``); before that, an op takes the absence for an item the
example lacks -- ``torch.cat([x, h.unsqueeze(1)], 1)`` skips it, ``x * h.unsqueeze(1)``
gives the example length 0 -- silently.  Inside Matchbox the two cannot be told
apart (a step's output appended to a list is absent in the same way, rightly), but a
helper's return value can: ``@batch`` records the examples that have an item of a
list only some of them have (``MaskedBatch._present``), which a plain helper does not.

So the value a helper returns to rewritten code is refused (``ValueError``, naming the
helper and the example, and saying to decorate it) where it is a batch static in every
dimension -- or one in a tuple or list it returns -- in which an example that runs the
call has no value and no record says it lacks an item.  With a dynamic dimension an
absent example's mask is an empty example's, which cannot be told apart: not checked.
Checked only for the user's own functions and modules (not torch's, not Matchbox's,
not rewritten ones), and only a batch with a mask other than the running examples'
own costs anything: one comparison (a device sync on the host; deferred to the end
of the ``@batch`` call on an accelerator, ``matchbox._capture.check``).
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import torch

from matchbox.control import naming
from matchbox.control.runtime.masks import current_mask, mask_view_for
from matchbox.control.runtime.select import user_line
from matchbox.extending import check, running, same_mask
from matchbox.masked_batch import MaskedBatch

#: Callables whose return value may be checked (a module is checked by its ``forward``).
PYTHON_CALLABLES = frozenset({types.FunctionType, types.MethodType})

# code object -> whether it is the user's own code that @batch did not rewrite.
_UNREWRITTEN: dict[types.CodeType, bool] = {}


def refuse_absent_examples(fn: Any, result: Any) -> None:
    """Refuse ``result``, returned by ``fn`` to rewritten code, where it holds a value
    that a running example has none of (see the module docstring)."""
    kind = type(result)
    if kind is MaskedBatch:
        if result._mask is None or result._present is not None:
            return
    elif not isinstance(result, (tuple, list)) or not result:
        return
    if not unrewritten(fn):
        return
    for where, batch in _batches(result, ""):
        _refuse(fn, where, batch)


def unrewritten(fn: Any) -> bool:
    """Whether ``fn`` runs the user's own code that ``@batch`` did not rewrite."""
    function = forward_of(fn) if isinstance(fn, torch.nn.Module) else fn
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    if type(code) is not types.CodeType:
        return False
    verdict = _UNREWRITTEN.get(code)
    if verdict is None:
        module = (getattr(function, "__module__", None) or "").partition(".")[0]
        verdict = not (getattr(function, "__matchbox_batch__", False)
                       or naming.RUNTIME in code.co_freevars  # code the rewriting made
                       or module in ("torch", "matchbox"))
        _UNREWRITTEN[code] = verdict
    return verdict


def forward_of(module: torch.nn.Module) -> Any:
    """What ``module(x)`` runs: a ``forward`` set on the instance (``m.forward = f``), or
    its class's."""
    return module.__dict__.get("forward") or getattr(type(module), "forward", None)


def _batches(value: Any, where: str, depth: int = 0) -> Any:
    """The batches to check in a returned value: itself, or those in the tuples and
    lists it is made of, each with where it lies (``[1]``)."""
    if type(value) is MaskedBatch:
        if value._mask is not None and value._present is None and not any(value.dims):
            yield where, value
    elif isinstance(value, (tuple, list)) and depth < 3:
        for i, item in enumerate(value):
            yield from _batches(item, f"{where}[{i}]", depth + 1)


def _refuse(fn: Any, where: str, batch: MaskedBatch) -> None:
    mask = batch._mask
    size = mask.size(0)
    if 0 in batch._data.shape[1:]:
        return  # (examples without elements: absent or not, they hold nothing)
    executing = current_mask()
    if executing is not None:
        view = mask_view_for(executing, size, mask.dim())
        if view is not None and same_mask(mask, view):
            return  # real exactly where the call runs (a step's own mask)
    absent = running(~mask.reshape(size, -1).any(1))
    check(absent, functools.partial(_error, fn, where, absent, user_line()))


def _error(fn: Any, where: str, absent: torch.Tensor, line: str) -> ValueError:
    which = absent.nonzero().flatten().tolist()
    shown = ", ".join(map(str, which[:8])) + (", ..." if len(which) > 8 else "")
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if where:
        what = (f"the value it returns at {where} has none for example {which[0]} (examples "
                f"without one: {shown}): a step past the example's end, or the last state of "
                "a loop run past it (a plain for over x.unbind(d), or map over it, runs every "
                "step for every example); a plain function cannot keep a list or tuple whose "
                "items only some examples have, so len(), [-1] and joins of it would take "
                "every example's items or skip its own last value, silently")
    else:
        what = (f"the value it returns has none for example {which[0]} (examples without "
                f"one: {shown}): it is a step past the example's end, or was computed from "
                "one (in a function @batch did not rewrite, x.unbind(d) is the batch's padded "
                "steps: x.unbind(d)[-1] is the longest example's last step, and a plain for "
                "over x.unbind(d), or map over it, runs every step for every example), where "
                "the loop over examples gives the example its own last step or state; "
                "combined with other values it would be taken for an item the example lacks "
                "(torch.cat skips it), silently")
    return ValueError(
        f"@batch: {name}() ({line}) is not rewritten by @batch, and {what}. Decorate {name} "
        "with @matchbox.batch, which runs each example for its own steps only (there "
        "x.unbind(d)[-1] is each example's own last step; x[:, -1] is, anywhere)"
    )


def rewritten(function: types.FunctionType) -> bool:
    """Whether ``function`` is code the rewriting made: a ``@batch`` function's lambda
    (or a thunk), whose calls, reads and writes go through the runtime ``mb__``."""
    return naming.RUNTIME in function.__code__.co_freevars  # (loader: a closure's cell)


def needs_no_checks(fn: Any, key: Any) -> bool | None:
    """Whether ``calls.call`` may call ``fn`` (a method or a module; ``key``, its function
    or its class's forward) as it is when given no container or held iterator (``_plain``,
    its verdict kept per key); ``None``: a helper (``_helper``) that needs then only the
    checks of its own reads and of its result."""
    try:
        return _PLAIN[key]
    except KeyError:
        pass
    plain = _PLAIN[key] = _plain(fn)
    if len(_PLAIN) > _PLAIN_KEPT:  # (functions made per call: no unbounded growth)
        _PLAIN.clear()
    return plain


# A method's function or what a module runs (``forward_of``) -> whether a call of it
# needs none of ``calls.call``'s checks (``_plain``).
_PLAIN: dict[Any, bool | None] = {}
_PLAIN_KEPT = 4096


def _plain(fn: Any) -> bool | None:
    """Whether ``fn``, a method (not of a list or dict) or a module, runs torch's or
    Matchbox's own code or code ``@batch`` rewrote, so that ``call`` has nothing to
    refuse or hand over in a call of it given no list, dict or held iterator: no lowered
    builtin, no container method, no ``math`` function, no list an unrewritten function
    could get wrong, no return value to check (``helper_results``); ``None`` where it is
    a helper whose call needs only some of them (:func:`_helper`)."""
    if isinstance(fn, torch.nn.Module):
        return not unrewritten(fn) or _helper(forward_of(fn))
    function = fn.__func__  # (the lowered builtins and container methods are no methods)
    module = (getattr(function, "__module__", None) or "").partition(".")[0]
    return bool(inspect.isfunction(function) and (
        module in ("torch", "matchbox") or getattr(function, "__matchbox_batch__", False)
        or rewritten(function))) or _helper(function)


def _helper(function: Any) -> bool | None:
    """``None`` for the user's own function (a method's, or a module's forward) that
    ``@batch`` did not rewrite and that closes over nothing, else ``False``: given no
    container or held iterator, ``calls.call`` has then nothing to refuse or hand over
    in its call but a shared iterator it reads (``iterables.refuse_unseen_iterators``)
    and what it returns (:func:`refuse_absent_examples`) -- no ``math`` function, no list
    it is given or closes over (``calls._refuse_lists_to_unconverted``)."""
    if (inspect.isfunction(function) and function.__closure__ is None
            and unrewritten(function) and function.__module__ != "math"):
        return None
    return False
