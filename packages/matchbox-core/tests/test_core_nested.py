"""MaskedBatch <-> jagged torch.nested tensors: exact values, gradients equal to the loop's, and a
clear error for an op mixing the two."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from nested_checks import assert_examples, check_from_nested_refusals, check_from_nested_with_holes
from strategies import example_lists

import matchbox
from matchbox import MaskedBatch


@given(example_lists(dims=(True, False)) | example_lists(dims=(True,))
       | example_lists(dims=(True, False, False), max_size=4))
def test_round_trip_holds_each_example_exactly(pair):
    xs, xb = pair  # NaN padding: it must not reach the nested tensor
    nested = xb.to_nested()
    assert nested.is_nested and nested.layout == torch.jagged
    for component, x in zip(nested.unbind(), xs):
        assert torch.equal(component, x[0])
    back = MaskedBatch.from_nested(nested)
    assert back.dims == xb.dims
    assert_examples(back, xs)


def test_a_batch_without_dynamic_dimensions_gives_components_of_one_length():
    xs = [torch.randn(1, 3, 2) for _ in range(2)]
    nested = MaskedBatch.fromlist(xs, (False, False)).to_nested()
    assert [c.shape for c in nested.unbind()] == [(3, 2), (3, 2)]
    back = MaskedBatch.from_nested(nested)
    assert back.dims == (True, False) and back._mask is None  # no padding to mark
    assert_examples(back, xs)


def test_to_nested_gradients_equal_the_loop(dtype):
    xs = [torch.randn(1, n, 3, dtype=dtype, requires_grad=True) for n in (2, 0, 4, 1)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    weights = torch.randn(3, dtype=dtype)
    nested = xb.to_nested()
    (nested.values() * weights).tanh().sum().backward()
    for x in xs:  # the loop: each example's own rows through the same function
        alone = x.detach().clone().requires_grad_()
        (alone[0] * weights).tanh().sum().backward()
        torch.testing.assert_close(x.grad, alone.grad)


def test_from_nested_gradients_equal_the_loop(dtype):
    xs = [torch.randn(n, 3, dtype=dtype, requires_grad=True) for n in (2, 0, 4, 1)]
    nested = torch.nested.as_nested_tensor(xs, layout=torch.jagged)
    weights = torch.randn(3, dtype=dtype)

    def loss(x):  # one example (1, n, 3) -> its scalar
        return (x * weights).tanh().sum(2).sum(1)

    batch = MaskedBatch.from_nested(nested)
    grads = torch.autograd.grad(matchbox.batch_sum(loss(batch)), xs)
    for x, grad in zip(xs, grads):
        expected, = torch.autograd.grad(loss(x.unsqueeze(0)).sum(), x)
        torch.testing.assert_close(grad, expected)


def test_from_nested_with_holes_reads_only_each_examples_rows():
    batch = check_from_nested_with_holes(MaskedBatch.from_nested)
    assert torch.equal(batch.data[~batch.mask.expand_as(batch.data)],
                       torch.zeros(int((~batch.mask).sum()) * 2))  # zeros in the padding


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_conversion_errors_name_the_way_out():
    check_from_nested_refusals(MaskedBatch.from_nested)
    xb = MaskedBatch.fromlist([torch.zeros(1, 2, 3), torch.zeros(1, 2, 1)], (False, True))
    with pytest.raises(ValueError, match=r"MaskedBatch.to_nested: dimension 2 is dynamic; a jagged "
                                         r"nested tensor is ragged in one dimension, 1"):
        xb.to_nested()
    with pytest.raises(ValueError, match=r"examples of rank 1 have no dimension 1"):
        MaskedBatch.fromlist([torch.zeros(1)], ()).to_nested()


_MIXING = (r"an op between a MaskedBatch and a jagged torch.nested tensor: .*convert one first: "
           r"MaskedBatch.from_nested\(nested\) for a MaskedBatch, or batch.to_nested\(\)")


@pytest.mark.parametrize("op", [
    lambda b, n: b + n,
    lambda b, n: b * n,
    lambda b, n: torch.add(b, n),
    lambda b, n: b.add(n),
    lambda b, n: b.add_(n),
    lambda b, n: torch.cat([b, n], 1),
    lambda b, n: b @ n,
    lambda b, n: torch.where(b > 0, b, n),
], ids=["b + n", "b * n", "torch.add", "b.add", "b.add_", "cat", "matmul", "where"])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_an_op_mixing_a_batch_and_a_nested_tensor_names_both_and_the_conversions(op, padded):
    lengths = (2, 4, 3) if padded else (3, 3, 3)
    xs = [torch.randn(1, n, 2) for n in lengths]
    batch = MaskedBatch.fromlist(xs, (True, False))
    nested = batch.to_nested()
    with pytest.raises(TypeError, match=_MIXING):
        op(batch, nested)


@pytest.mark.parametrize("op", [lambda b, n: n + b, lambda b, n: torch.add(n, b)],
                         ids=["n + b", "torch.add(n, b)"])
def test_ops_the_nested_tensor_dispatches_first_raise_naming_the_batch(op):
    # The nested tensor's own dispatch sees these first: depending on the torch, it hands
    # them on to the batch (Matchbox's error) or to torch's argument parser (torch's,
    # which names the batch's type).
    xs = [torch.randn(1, n, 2) for n in (2, 4)]
    batch = MaskedBatch.fromlist(xs, (True, False))
    with pytest.raises(TypeError, match=_MIXING + r"|must be Tensor, not MaskedBatch"):
        op(batch, batch.to_nested())
