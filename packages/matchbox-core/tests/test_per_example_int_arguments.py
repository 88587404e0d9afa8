"""An int argument that must be the same for every example (``topk``'s ``k``, ``roll``'s
shift, ...) given as a batch of one value per example (an ``int()`` under ``@batch``,
``size_as_tensor``) is refused naming the op and the argument; ``int()`` of the batch said
neither (a user trial: ``x.topk(int(n), 1)`` under ``@matchbox.batch``)."""

from __future__ import annotations

import pytest
import torch
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, batch_needs

from matchbox import MaskedBatch

# torch's own functions (not the methods) check an int argument before Matchbox sees it,
# on a torch that does not hand numbers to __torch_function__ (2.3 raises its TypeError;
# test_matrix.py pins that error there).
INT_OF_A_BATCH = batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
                             "hands a batch given as an int argument to Matchbox")
TORCH_FUNCTIONS = {"torch.topk", "roll of dims"}

CASES = {
    "topk": (lambda x, k: x.topk(k, 1), r"Tensor.topk: the k is a batch"),
    "torch.topk": (lambda x, k: torch.topk(x, k, 1), r"torch.topk: the k is a batch"),
    "kthvalue": (lambda x, k: x.kthvalue(k, 1), r"Tensor.kthvalue: the k is a batch .*"
                                               r"take x\[:, k - 1\]$"),
    "roll": (lambda x, k: x.roll(k, 1), r"Tensor.roll: the shift is a batch"),
    "roll of dims": (lambda x, k: torch.roll(x, (k, 1), (1, 2)), r"torch.roll: the shift is a "
                                                                 r"batch"),
    "repeat": (lambda x, k: x.repeat(1, k, 1), r"Tensor.repeat: the count is a batch .*"
                                               r"repeat_interleave takes one count per example"),
    "tile": (lambda x, k: x.tile((1, k, 1)), r"Tensor.tile: the count is a batch"),
    # chunk handed the batch on to torch's chunk of its data: an AttributeError
    "chunk": (lambda x, k: x.chunk(k, 2), r"Tensor.chunk: the number of chunks is a batch"),
}


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=INT_OF_A_BATCH) if case in TORCH_FUNCTIONS else case
    for case in CASES])
@pytest.mark.parametrize("lengths", [[3, 1, 4], [2]])
def test_a_per_example_int_argument_is_refused_naming_the_op(case, lengths):
    f, message = CASES[case]
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in lengths], (True, False))
    k = xb.size_as_tensor(1) - xb.size_as_tensor(1) + 1  # one per example, all 1
    with pytest.raises(NotImplementedError, match=message) as refused:
        f(xb, k)
    assert "per-example values are not implemented here" in str(refused.value)


def test_the_same_int_for_every_example_still_works():
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1, 4)], (True, False))
    assert xb.topk(1, 1)[0].data.shape == (3, 1, 2)
    assert xb.topk(torch.tensor(1), 1)[0].data.shape == (3, 1, 2)
    assert xb.roll(1, 1).data.shape == xb.data.shape
