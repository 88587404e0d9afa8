"""What the tests of the registry's op families share (matrix, repeat, gather, selection,
ordering, reductions, linalg, pointwise, shape): NaN-padded batches of given example
shapes, the comparison of a one-argument function with the loop, the layouts they are
drawn in, the check that every op registered in a family has a case, and the refusal of
an example whose length disagrees with another argument's static size."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert

NAN = float("nan")

# Layouts of two-dimensional examples: (dims, example shapes), zero and one lengths included.
LAYOUTS = {
    "dynamic-static": ((True, False), [(3, 4), (1, 4), (0, 4), (5, 4)]),
    "static-dynamic": ((False, True), [(2, 3), (2, 1), (2, 5), (2, 0)]),
    "two-dynamic": ((True, True), [(2, 3), (1, 1), (4, 2)]),
    "all-static": ((False, False), [(3, 2), (3, 2)]),
    "batch-of-one": ((True, False), [(3, 2)]),
}


# The same without empty examples (reductions whose empty cases have tests of their own).
NONEMPTY_LAYOUTS = {
    "dynamic-static": ((True, False), [(3, 4), (1, 4), (5, 4)]),
    "static-dynamic": ((False, True), [(2, 3), (2, 1), (2, 5)]),
    "two-dynamic": ((True, True), [(2, 3), (1, 1), (4, 2)]),
    "all-static": ((False, False), [(3, 2), (3, 2)]),
    "batch-of-one": ((True, False), [(3, 2)]),
}

def batch_of(shapes, dims, dtype=torch.float64, values=None):
    """Examples of the given shapes (without the leading 1) and their NaN-padded batch.

    The values are ``torch.randn``, or ``values(shape)`` where given.
    """
    examples = [torch.randn(1, *shape, dtype=dtype) if values is None
                else values(shape).to(dtype) for shape in shapes]
    return examples, MaskedBatch.fromlist(examples, dims, padding_value=NAN)


def check(f, examples, batch, **kwargs):
    """``f`` on the batch equals ``f`` on each example (``mb_assert``'s keyword arguments)."""
    mb_assert(f, [examples], [batch], len(examples), **kwargs)


def registered(family):
    """The names of the ops registered in ``family``, sorted."""
    return sorted(e.name for e in _registry.entries() if e.family == family)


def assert_every_op_has_a_case(family, names, *cases):
    """Every op of ``names`` (those registered in ``family``) is a key of one of ``cases``."""
    assert names, f"no op is registered in the {family} family"
    missing = [n for n in names if not any(n in c for c in cases)]
    assert not missing, f"registered in the {family} family without a test case: {missing}"


def assert_refused_beside_static(f, xb, sb, example, size, dim=r"\d"):
    """``f(xb, sb)``, ``xb`` dynamic and ``sb`` static (size 3) along dimension ``dim``, is
    refused for ``example``, whose length there is ``size``: the loop raises for it too."""
    with pytest.raises(ValueError, match=rf"example {example} has size {size} in one argument "
                                         rf"and 3 in another along dimension {dim}, dynamic in "
                                         rf"the first and static in the second; the examples "
                                         rf"would not combine in a loop either"):
        f(xb, sb)
