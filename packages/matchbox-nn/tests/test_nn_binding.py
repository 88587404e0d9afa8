"""A positional ``dtype`` of softmax is bound as the dtype (matchbox._binding; core's
packages/matchbox-core/tests/test_binding.py checks the binding of every handler)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from matchbox.testing import mb_assert, mb_rand


def loop_softmax(dtype_position):
    def f(x):
        return x.softmax(1, torch.float64) if dtype_position else F.softmax(x, 1, 3, torch.float64)
    return f


@pytest.mark.parametrize("form", ["method", "functional"])
def test_a_positional_dtype_of_softmax_is_the_dtype(form):
    # Tensor.softmax(dim, dtype) on a batch returned float32: its handler read the
    # second argument as _stacklevel (F.softmax's third is _stacklevel).
    xs, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    f = loop_softmax(form == "method")
    assert f(xb).dtype == torch.float64
    mb_assert(f, [xs], [xb], 3)
    g = (lambda x: x.log_softmax(2, torch.float64)) if form == "method" else (
        lambda x: F.log_softmax(x, 2, 3, torch.float64))
    assert g(xb).dtype == torch.float64
    mb_assert(g, [xs], [xb], 3)
