"""The rewriting of one function, as small passes in a fixed order.

The order matters, and is the reason for the split:

0. ``checks`` refuses what cannot be rewritten, before anything changes, so
   the error points at the user's construct.
1. ``break_statements``, 2. ``continue_statements``, 3. ``return_statements``
   lower the three jumps to per-example flags (each pass knows only its own
   jump; ``break``/``continue`` first, since a ``return`` inside a loop then
   only has to stop the loop, like a ``break`` that also leaves the function).
   After them the code has no jumps, which is what makes the next passes
   (and liveness) simple: control flow follows the syntax.
4. ``expressions`` turns ``and``/``or``/``not``, chained comparisons,
   conditional expressions and ``assert`` into runtime calls, so that the
   conditions (including the flags' ``not``) work per example.
5. ``comprehensions`` turns comprehensions and generator expressions into
   runtime clauses with thunks, each step run under its mask like a ``for``
   statement's; after 4, so the conditions inside are per example already,
   and before 7, whose liveness then sees the reads where they are.
6. ``builtin_calls`` routes ``sum``/``max``/``min``/``any``/``all``/``len``/
   ``reduce``, ``int``/``float``/``bool``/``.item()``, list reads and type
   tests through the runtime (each example's own answer); after 5, whose
   thunks hold such calls too.
7. ``control_flow`` rewrites ``if``/``while``/``for`` into masked regions,
   merging the variables that liveness says are carried out of each.
8. ``assignments`` masks the writes that outlive a region (attributes,
   subscripts, in-place updates); it runs last, so it sees the regions'
   masks and treats the merges pass 7 wrote as the plain assignments they are.
9. ``try_statements`` makes each ``except`` clause refuse an error raised for only
   some of the examples that ran the ``try``.
10. ``functions`` adds each function's prologue, then converts the functions
   defined inside it, each on its own.
"""

from __future__ import annotations

from typing import Any

from matchbox.control.context import Context
from matchbox.control.converters import (
    assignments,
    break_statements,
    builtin_calls,
    checks,
    comprehensions,
    continue_statements,
    control_flow,
    expressions,
    functions,
    return_statements,
    try_statements,
)

PASSES = (
    break_statements.transform,
    continue_statements.transform,
    return_statements.transform,
    expressions.transform,
    comprehensions.transform,
    builtin_calls.transform,
    control_flow.transform,
    assignments.transform,
    try_statements.transform,
)


def convert_function(function: Any, ctx: Context) -> None:
    """Rewrite ``function`` (a gast ``FunctionDef``) in place."""
    checks.check(function, ctx)
    for transform in PASSES:
        transform(function, ctx)
    functions.add_prologue(function)
    for nested in functions.nested_functions(function):
        convert_function(nested, functions.nested_context(ctx, nested))
