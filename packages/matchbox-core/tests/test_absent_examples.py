"""Values leaving Matchbox refuse a batch in which an example is absent (a step past its
end, outside ``@matchbox.batch``): ``matchbox._absent``."""

from __future__ import annotations

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

ABSENT = (r"example {k} has no value here .*it is absent, as a step past the example's end "
          r"is .*@matchbox\.batch")


def _steps(lengths, dtype=torch.float64):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


@pytest.mark.parametrize("exit_, op", [
    (lambda y: list(y.examples()), "MaskedBatch.examples"),
    (lambda y: matchbox.batch_sum(y.sum(-1)), "matchbox.batch_sum"),
    (lambda y: matchbox.batch_mean(y.sum(-1)), "matchbox.batch_mean"),
    (lambda y: y.sum(-1).backward(), "MaskedBatch.backward"),
])
def test_an_absent_example_is_refused_where_values_leave(exit_, op):
    xs, xb = _steps((3, 1, 5))
    xb.data.requires_grad_(True)
    last = xb.unbind(1)[-1]  # every example's step 4: examples 0 and 1 have none
    with pytest.raises(ValueError, match=f"^{op}: " + ABSENT.format(k=0)):
        exit_(last)


def test_the_undecorated_readme_rnn_is_refused():
    # (The cell in core ops: this environment has no matchbox-nn; the decorated loop is
    # matchbox-control's test_control_absent_examples.py.)
    w, u = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)

    def forward(x):  # @matchbox.batch forgotten
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = (xt @ w + h @ u).tanh()
        return h

    _, xb = _steps((3, 7, 1, 5))
    with pytest.raises(ValueError, match=ABSENT.format(k=0)):
        matchbox.batch_sum(forward(xb).sum(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(3, 1, 5), (2,), (1, 2, 1)])
def test_each_examples_own_last_step_still_equals_the_loop(dtype, lengths):
    xs, xb = _steps(lengths, dtype)
    mb_assert(lambda x: x[:, -1], [xs], [xb], len(xs))
