"""A loop over a dynamic dimension under ``@matchbox.batch`` ends with every example's own
state (no absent example leaves it); without the decorator the absent examples are
refused where values leave Matchbox (core's ``test_absent_examples.py``)."""

from __future__ import annotations

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(3, 1, 5), (2,), (0, 2, 1)])
def test_the_decorated_rnn_equals_the_loop(dtype, lengths):
    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    u = torch.randn(3, 3, dtype=dtype, requires_grad=True)

    @matchbox.batch
    def forward(x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = (xt @ w + h @ u).tanh()
        return h

    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    mb_assert(forward, [xs], [xb], len(xs), params=[w, u])
