"""``x.maxsize(d)`` of a dynamic dimension: the padded size as a size, refused as a number.

In the loop over examples an example's ``maxsize(d)`` is its own size; on a batch it is
the longest example's.  As a size (``torch.ones(T, H)``, ``pe[:T]``, ``x[:, :T]``,
``view``) each example meets its own first positions, as in the loop; as a number
(``x.sum(1) / T``, ``x[:, :T - 1]``, ``T > 3``) the shorter examples would get the
longest's, silently, so it raises ``TypeError`` naming ``x.maxsize(d)``.
"""

from __future__ import annotations

import math
import operator
import pickle

import pytest
import torch
from family_cases import batch_of, check

from matchbox import MaskedBatch

AS_A_NUMBER = (r"x\.maxsize\(1\) is the padded size of dimension 1, which is dynamic: the "
               r"longest example's size there\. Each example's own size differs.*Use "
               r"x\.size_as_tensor\(1\) for each example's size, or int\(x\.maxsize\(1\)\) "
               r"for the padded size itself")


def _batch(dtype=torch.float64):
    return batch_of([(3, 4), (1, 4), (0, 4), (5, 4)], (True, False), dtype)


NUMBER_USES = {
    "T + 1": lambda x: x.maxsize(1) + 1,
    "T - 1": lambda x: x.maxsize(1) - 1,
    "1 - T": lambda x: 1 - x.maxsize(1),
    "2 * T": lambda x: 2 * x.maxsize(1),
    "T / 2": lambda x: x.maxsize(1) / 2,
    "T // 2": lambda x: x.maxsize(1) // 2,
    "T ** 2": lambda x: x.maxsize(1) ** 2,
    "-T": lambda x: -x.maxsize(1),
    "T > 3": lambda x: x.maxsize(1) > 3,
    "max(T, 3)": lambda x: max(x.maxsize(1), 3),
    "float(T)": lambda x: float(x.maxsize(1)),
    "math.sqrt(T)": lambda x: math.sqrt(x.maxsize(1)),
    "x.sum(1) / T": lambda x: x.sum(1) / x.maxsize(1),
    "x[:, :T - 1]": lambda x: x[:, :x.maxsize(1) - 1],
    "torch.full_like(x, T)": lambda x: torch.full_like(x, x.maxsize(1)),
    "x.new_full(size, T)": lambda x: x.new_full((x.size(0), 1), x.maxsize(1)),
    "lengths < T": lambda x: x.size_as_tensor(1) < x.maxsize(1),
    "x * T": lambda x: x * x.maxsize(1),
    # (a shift: in the loop each example rolled by its own size is not rolled at all)
    "x.roll(T, 1)": lambda x: x.roll(x.maxsize(1), 1),
    "torch.roll(x, (T,), (1,))": lambda x: torch.roll(x, (x.maxsize(1),), (1,)),
    "x.roll(T)": lambda x: x.roll(x.maxsize(1)),
}


@pytest.mark.parametrize("name", list(NUMBER_USES))
def test_the_padded_size_as_a_number_is_refused(name):
    _, xb = _batch()
    with pytest.raises(TypeError, match=AS_A_NUMBER):
        NUMBER_USES[name](xb)


def test_the_message_names_the_dimension_asked():
    _, xb = batch_of([(4, 2), (4, 3)], (False, True))
    with pytest.raises(TypeError, match=r"x\.maxsize\(-1\) is the padded size of dimension "
                                        r"-1, which is dynamic"):
        xb.maxsize(-1) * 2


def test_the_padded_size_is_an_int_as_a_size():
    _, xb = _batch()
    size = xb.maxsize(1)
    assert isinstance(size, int) and size == 5 and size != 4
    assert type(int(size)) is int and int(size) == 5
    assert type(operator.index(size)) is int
    assert hash(size) == hash(5) and {size: "five"}[5] == "five"
    assert repr(size) == str(size) == f"{size}" == "5"
    assert type(pickle.loads(pickle.dumps(size))) is int
    assert torch.ones(size, size).shape == (5, 5)
    assert list(range(size)) == [0, 1, 2, 3, 4]
    assert torch.arange(size).tolist() == [0, 1, 2, 3, 4]


def test_static_dimensions_and_every_padded_size_are_plain_ints():
    _, xb = _batch()
    assert type(xb.maxsize(2)) is int and xb.maxsize(2) * 2 == 8
    assert xb.maxsize() == torch.Size([4, 5, 4])
    assert all(type(n) is int for n in xb.maxsize())


SIZE_USES = {
    "positions[:T]": lambda x: x + torch.arange(10., dtype=x.dtype).unsqueeze(1)[:x.maxsize(1)],
    "x[:, :T]": lambda x: x[:, :x.maxsize(1)] * 2,
    "x[:, 1:T]": lambda x: x[:, 1:x.maxsize(1)] * 2,
    "view(B, T, 2, 2)": lambda x: x.view(x.size(0), x.maxsize(1), 2, 2).sum(3),
    "reshape(B, T, 4, 1)": lambda x: x.reshape(x.size(0), x.maxsize(1), 4, 1) + 1,
    "ones(1, T, 1)": lambda x: x + torch.ones(1, x.maxsize(1), 1, dtype=x.dtype).cumsum(1),
    # A plain tensor built at T (each example of the loop builds its own) meeting the batch.
    "zeros(T) + x[:, :, 0]": lambda x: torch.zeros(x.maxsize(1), dtype=x.dtype) + x[:, :, 0],
    "arange(T) * x[:, :, 0]": lambda x: torch.arange(x.maxsize(1)) * x[:, :, 0],
    "zeros([T, 4]) + x": lambda x: torch.zeros([x.maxsize(1), 4], dtype=x.dtype) + x,
    "full((T,), 2) * x[:, :, 1]": lambda x: torch.full((x.maxsize(1),), 2.0,
                                                        dtype=x.dtype) * x[:, :, 1],
}


@pytest.mark.parametrize("name", list(SIZE_USES))
@pytest.mark.parametrize("shapes", [[(3, 4), (1, 4), (0, 4), (5, 4)], [(2, 4)]],
                         ids=["mixed", "batch-of-one"])
def test_the_padded_size_as_a_size_equals_the_loop(name, shapes, dtype):
    examples, xb = batch_of(shapes, (True, False), dtype)
    check(SIZE_USES[name], examples, xb)


def test_a_plain_tensor_keeps_its_own_sizes():
    x = torch.randn(1, 3, 2)
    assert type(x.maxsize(1)) is int and x.maxsize(1) + 1 == 4
    assert type(MaskedBatch.fromlist([x], (False, False)).maxsize(1)) is int
