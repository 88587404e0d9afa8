"""``'...'`` in an ``einsum`` equation, spelled out as letters before the batch rule reads it.

Per example, as torch reads it: each operand's ``...`` stands for the dimensions its
letters leave (a batch's counted per example, dimension 0 included), aligned from the
right across the operands (they broadcast); the output's ``...`` is all of them, the
widest operand's, and without ``->`` the output is ``...`` followed by the letters used
once, in alphabetical order.  Spelled with letters the equation does not use, that is an
equation without ``...`` that torch reads the same, so the rule for those applies as it
is: each example equals the loop's, and dimension 0 of each example must stay the first
dimension of the output (``'...i,ij->...j'`` keeps it; ``'...ij->...'`` of a rank-3
example keeps it too).
"""

from __future__ import annotations

import string
from typing import Any

from matchbox._batch import Batch

ELLIPSIS = "..."


def spell_out(op: str, equation: str, operands: tuple[Any, ...]) -> str:
    """``equation`` (without spaces) with every ``...`` replaced by letters."""
    if ELLIPSIS not in equation:
        return equation
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"{op}: the equation has {len(terms)} operands, got {len(operands)}")
    free = [c for c in string.ascii_letters if c not in equation]
    covered = []
    for k, (term, x) in enumerate(zip(terms, operands)):
        if term.count(ELLIPSIS) > 1 or term.replace(ELLIPSIS, "").count(".") \
                or term.count(ELLIPSIS) == 0 and "." in term:
            raise ValueError(f"{op}: operand {k} ('{term}') has more than one ellipsis or "
                             "a stray '.'")
        if ELLIPSIS not in term:
            covered.append(0)
            continue
        count = x.dim() - (len(term) - len(ELLIPSIS))
        if count < 0:
            raise ValueError(f"{op}: operand {k} ('{term}') has more letters than its "
                             f"examples' {x.dim()} dimensions")
        covered.append(count)
    widest = max(covered)
    if widest > len(free) - 1:  # (one letter is left for the batch rule's own)
        raise ValueError(f"{op}: the equation leaves too few letters to spell '...' out")
    letters = "".join(free[:widest])
    spelled = [t.replace(ELLIPSIS, letters[widest - n:]) for t, n in zip(terms, covered)]
    if arrow:
        if output.count(ELLIPSIS) > 1 or output.replace(ELLIPSIS, "").count("."):
            raise ValueError(f"{op}: the output ('{output}') has more than one ellipsis or "
                             "a stray '.'")
        output = output.replace(ELLIPSIS, letters)
    else:
        used = "".join(t.replace(ELLIPSIS, "") for t in terms)
        output = letters + "".join(sorted(c for c in set(used) if used.count(c) == 1))
    result = ",".join(spelled) + "->" + output
    for k, (term, x, new) in enumerate(zip(terms, operands, spelled)):
        if isinstance(x, Batch) and term.startswith(ELLIPSIS) and new \
                and not output.startswith(new[0]):
            raise ValueError(
                f"{op}: dimension 0 of each example of operand {k} ('{term}', a batch; size "
                f"one) is the first of its '...', and must be the first dimension of the "
                f"output, but the equation spelled out is '{result}' (another operand's "
                "'...' has more dimensions, or the output moves them)")
    return result
