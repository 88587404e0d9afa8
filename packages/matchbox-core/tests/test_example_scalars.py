"""A batch of one int per example used as an index: a Python int (or 0-d tensor) in the
loop drops the dimension, a ``(1,)`` tensor keeps it (``matchbox._example_scalars``).

The oracle is the loop over examples (``mb_assert``: values and gradients), in float32 and
float64, with NaN padding, empty and one-long examples and a batch of one.
"""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

LENGTHS = [(3, 1, 5), (1,), (2, 1, 4, 1)]


def _batch(lengths, dtype, width=4):
    torch.manual_seed(0)
    xs = [torch.randn(1, n, width, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def argmax_row(x):
    i = x.sum(-1).argmax(1)  # (1,) in the loop
    return x[:, i].sum(1)  # (1, 1, D).sum(1): the chosen row


def pointer(x):
    idx = (x * 2).sum(-1).argmax(1) + 0  # through a pointwise op: still (1,)
    return x[:, idx][:, 0]  # the chosen row (1, D)


def max_indices(x):
    return x[:, x.sum(-1).max(1).indices]


def static_argmax(x):
    h = x[:, 0]  # (1, D): the argmax over a static dim
    return h[:, h.argmax(-1)]  # (1, 1)


def full_argmax(x):
    return x.sum(-1)[:, x.sum(-1).argmax()]  # 0-d in the loop: drops the dim


def last_by_size(x):
    return x[:, x.size_as_tensor(1) - 1]  # a 0-d size: drops the dim


def index_select_kept(x):
    return x.index_select(1, x.sum(-1).argmax(1)).squeeze(1)


def gather_row(x):
    i = x.sum(-1).argmax(1)
    return x.sum(-1).gather(1, i.unsqueeze(-1))


CASES = [argmax_row, pointer, max_indices, static_argmax, full_argmax, last_by_size,
         index_select_kept, gather_row]


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("f", CASES, ids=[f.__name__ for f in CASES])
def test_a_per_example_index_indexes_as_the_loop(f, dtype, lengths):
    xs, xb = _batch(lengths, dtype)
    mb_assert(f, [xs], [xb], len(xs))


def test_a_vector_index_keeps_the_dimension_and_a_scalar_drops_it():
    _, xb = _batch((3, 1, 5), torch.float64)
    assert xb[:, xb.sum(-1).argmax(1)].dims == (False, False)
    assert xb[:, xb.size_as_tensor(1) - 1].dims == (False,)


def test_an_index_of_unknown_kind_is_refused_naming_the_rewrite():
    _, xb = _batch((3, 1, 5), torch.float64)
    i = xb.sum(-1).argmax(1).unsqueeze(-1).squeeze(-1)  # shape ops do not record it
    assert i._scalar is None
    with pytest.raises(NotImplementedError, match=(
            r"Tensor\.__getitem__: the index along dimension 1 is a batch of one int per "
            r"example that Matchbox cannot tell apart .*x\.index_select\(1, i\) to keep the "
            r"dimension.*x\.index_select\(1, i\)\.squeeze\(1\) to drop it")):
        xb[:, i]


def test_a_vector_index_beside_an_int_is_refused():
    _, xb = _batch((3, 1, 5), torch.float64)
    i = xb.sum(-1).argmax(1)
    with pytest.raises(NotImplementedError, match=r"a tensor index beside an int"):
        xb[:, i, 0]


def test_assignment_at_a_vector_index_equals_the_loop():
    # The loop's (1,) index keeps the dimension: x[:, j] = v writes (1, 1, D) per example
    # (ops/one_position_writes.py; tests/test_per_example_index_writes.py for the rest).
    xs, xb = _batch((3, 1, 5), torch.float64)

    def f(x):
        y = x * 1
        y[:, y.sum(-1).argmax(1)] = 0.0
        return y

    mb_assert(f, [xs], [xb], len(xs))


def test_adding_booleans_of_one_value_per_example_is_refused():
    # Each example's n is a Python int in the loop, its comparisons Python bools, whose sum
    # is an int (True + True == 2); torch's booleans add as 'or', which the batch gave.
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (5, 2, 1)], (True, False))
    n = xb.size_as_tensor(1)
    with pytest.raises(TypeError, match=r"Tensor.__add__: adding booleans of one value per "
                                        r"example .* True \+ True is 2, where torch adds "
                                        r"booleans as 'or'\); write int\(a\) \+ int\(b\)"):
        (n > 1) + (n > 3)
    with pytest.raises(TypeError, match=r"torch.add: adding booleans of one value per example"):
        torch.add(n > 1, n > 3)
    c = n > 1
    with pytest.raises(TypeError, match=r"Tensor.__iadd__: adding booleans of one value per "
                                        r"example"):
        c += n > 3  # in place (a review found it not refused)
    assert (c.data == torch.tensor([True, True, False])).all()  # refused before the write


def test_an_integer_to_a_negative_integer_power_of_one_value_per_example_is_refused():
    # Each example's n is a Python int in the loop, whose 2 ** -n is a float (0.25); torch's
    # integer power gives 0, which the batch gave, silently (a user trial: 2 ** -k of a
    # per-example int() under @batch).
    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (2, 0, 1)], (True, False))
    n = xb.size_as_tensor(1)
    refused = r"an integer to a negative integer power, one number per example .* 2 \*\* -1 is 0.5"
    with pytest.raises(TypeError, match=r"Tensor.__rpow__: " + refused):
        2 ** -n
    with pytest.raises(TypeError, match=r"Tensor.pow: " + refused):
        n ** (n - 3)
    with pytest.raises(TypeError, match=r"torch.pow: " + refused):
        torch.pow(2, -n)
    with pytest.raises(TypeError, match=r"Tensor.pow: " + refused):
        n ** torch.tensor(-1)
    # Non-negative exponents are ints in Python too; a float base or exponent is a float.
    assert ((2 ** n).data == torch.tensor([4, 1, 2])).all()
    assert ((n ** n).data == torch.tensor([4, 1, 1])).all()
    assert torch.equal((2.0 ** -n).data, torch.tensor([0.25, 1.0, 0.5]))
    assert torch.equal(((n + 1) ** -1.0).data, torch.tensor([1 / 3, 1.0, 0.5]))


def test_counts_of_per_example_booleans_and_sums_of_boolean_rows_equal_the_loop():
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (5, 2, 1, 0)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    n = xb.size_as_tensor(1)
    assert (((n > 1).long() + (n > 3).long()).data == torch.tensor([2, 1, 0, 0])).all()
    assert ((0 + (n > 1) + (n > 3)).data == torch.tensor([2, 1, 0, 0])).all()  # as sum() adds
    # Rows of booleans (a tensor in the loop too): torch's 'or', as each example's.
    mb_assert(lambda x: (x.sum(1) > 0) + (x.sum(1) > 1), [xs], [xb], len(xs),
              check_grad=False)
