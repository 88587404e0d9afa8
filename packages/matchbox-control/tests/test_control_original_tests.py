"""The original Matchbox's control-flow tests (its test/test_control_flow.py), in its own
spec form: ``mb_test(f, (4, ()))`` is a batch of four per-example scalars.

Before ``mb_test`` read ``(4, ())`` as a batch, it handed the tuple to ``f`` unchanged
(here a ``TypeError``; a function that takes any value compared nothing).  Each also
runs on a batch of one and on values that take the loop several times.
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch, batch
from matchbox.testing import mb_assert, mb_test


@batch
def while_loop(x):
    while x > 0:
        x = x - 1
    return x


@batch
def if_else(x):
    if x > 0:
        x = x - 1
    else:
        pass
    return x


@batch
def if_noelse(x):
    if x > 0:
        x = x - 1
    return x


@pytest.mark.parametrize("f", [while_loop, if_else, if_noelse])
def test_the_originals_scalar_batches(f, dtype):
    mb_test(f, (4, ()), dtype=dtype)
    mb_test(f, (1, ()), dtype=dtype)


@pytest.mark.parametrize("f", [while_loop, if_else, if_noelse])
def test_on_scalars_some_of_which_loop_several_times(f, dtype):
    xs = [torch.tensor([v], dtype=dtype) for v in (-1.5, 0.25, 2.5, 4.0)]
    mb_assert(f, [xs], [MaskedBatch.fromlist(xs, ())], len(xs))
    assert [float(y) for y in f(MaskedBatch.fromlist(xs, ())).examples()] == [
        float(f(x)) for x in xs]
