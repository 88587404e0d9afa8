"""A size argument of ``view``/``reshape``/``unflatten``/``unfold`` that is one value per
example (``n = x.size_as_tensor(1)``, the loop's ``x.size(1)``): refused naming the op and
saying what to write. They asked the batch for a truth value instead ("the truth value of
a MaskedBatch is ambiguous ... decorate the function with @matchbox.batch"), naming
neither the op nor the argument (a user trial).
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch

SIZE = (r"the size is a batch \(one value per example\); per-example values are not "
        r"implemented here: size must be the same int for every example; write -1 for a "
        r"dynamic dimension, which keeps each example's own size")


def _batch():
    return MaskedBatch.fromlist([torch.randn(1, n, 3) for n in (3, 0, 2)], (True, False))


@pytest.mark.parametrize("op, call", [
    ("Tensor.view", lambda x, n: x.view(1, n, 3)),
    ("Tensor.reshape", lambda x, n: x.reshape(1, n * 3)),
    ("Tensor.unflatten", lambda x, n: x.reshape(1, -1).unflatten(1, (n, 3))),
])
def test_a_per_example_size_of_a_reshape_is_refused_naming_the_op(op, call):
    x = _batch()
    with pytest.raises(NotImplementedError, match=rf"{op}: {SIZE}"):
        call(x, x.size_as_tensor(1))


def test_the_same_reshape_written_with_minus_one_keeps_each_examples_size():
    x = _batch()
    assert [tuple(e.shape) for e in x.view(1, -1, 3).examples()] == [(1, 3, 3), (1, 0, 3),
                                                                     (1, 2, 3)]


@pytest.mark.parametrize("call", [
    lambda x, n: x.unfold(1, n, 1),
    lambda x, n: x.unfold(1, 1, n),
])
def test_a_per_example_window_of_unfold_is_refused_naming_the_op(call):
    x = _batch()
    with pytest.raises(NotImplementedError,
                       match=r"Tensor.unfold: the window size or step is a batch \(one value "
                             r"per example\); .* a window of each example's own length is the "
                             r"whole example"):
        call(x, x.size_as_tensor(1).clamp(min=1))
