"""The pointwise family on PackedBatch, op by op over the registry itself.

Every op registered for PackedBatch in the pointwise family (core's rule finds
them) is called on random examples packed into a PackedBatch and compared with
the per-example loop, values and gradients, so a newly registered op is tested
by default.  How to call an op is found by trying argument patterns on one
plain example.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from packed_strategies import examples_of_lengths, packed_examples

from matchbox import _registry
from matchbox.masked_batch import MaskedBatch
from matchbox.ops.pointwise import pointwise_ops
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

POINTWISE = [e.func for e in _registry.entries("PackedBatch") if e.family == "pointwise"]
# Ops that draw random numbers: their values cannot equal the loop's.
RANDOM = {"bernoulli", "bernoulli_", "uniform_", "normal_", "exponential_", "cauchy_",
          "geometric_", "log_normal_", "random_", "rrelu", "rrelu_"}
# Ops PyTorch cannot differentiate: values are compared, not gradients.
NO_DERIVATIVE = {"heaviside", "heaviside_", "acosh_", "asinh_", "atanh_", "floor_divide",
                 "floor_divide_", "__floordiv__", "__rfloordiv__", "__ifloordiv__", "igamma",
                 "igammac", "igamma_", "igammac_", "nextafter", "nextafter_"}
# (kinds of the batch arguments, extra plain arguments), tried in order.
PATTERNS = [
    (("float",), ()), (("float", "float"), ()), (("float", "float", "float"), ()),
    (("unit",), ()), (("unit", "unit"), ()), (("float",), (0.5,)), (("float",), (-0.5, 0.5)),
    (("unit",), (1,)), (("int",), ()), (("int", "int"), ()), (("bool",), ()),
    (("bool", "bool"), ()), (("bool", "float", "float"), ()), (("float", "bool"), (0.5,)),
    (("float", "int"), ()),
]


def _name(func):
    return _registry.op_name(func)


def _of_kind(kind, xs):
    xs = [torch.randn_like(x) for x in xs]
    if kind == "unit":
        return [x.sigmoid() for x in xs]
    if kind == "int":
        return [(x * 5).round().long() for x in xs]
    if kind == "bool":
        return [x > 0 for x in xs]
    return xs


def _apply(func, args, extra):
    name = func.__name__
    method = _registry.tensor_method_name(func) is not None
    if "polygamma" in name:  # polygamma(n, input)
        return getattr(args[0], name)(1, *args[1:]) if method else func(1, *args, *extra)
    if method:  # a Tensor method is called as a method (or operator), as users do
        return getattr(args[0], name)(*args[1:], *extra)
    return func(*args, *extra)


def find_pattern(func):
    patterns = PATTERNS
    if func.__name__ in RANDOM:
        patterns = [(("unit",) * len(k), e) for k, e in PATTERNS]
    for kinds, extra in patterns:
        try:
            with torch.no_grad():
                result = _apply(func, _of_kind_plain(kinds), extra)
        except Exception:  # noqa: BLE001 - probing which signature the op takes
            continue
        if isinstance(result, torch.Tensor):
            return kinds, extra
    return None


def _of_kind_plain(kinds):
    return [_of_kind(k, [torch.zeros(1, 3, 2, dtype=torch.float64)])[0] for k in kinds]


def _is_inplace(func):
    name = func.__name__
    return (name.endswith("_") and not name.startswith("__")) or (
        name.startswith("__i") and name != "__invert__")


def test_the_family_is_cores_rule():
    assert set(POINTWISE) == set(pointwise_ops())


@pytest.mark.parametrize("func", POINTWISE, ids=[_name(f) for f in POINTWISE])
def test_pointwise_op_equals_loop(func):
    pattern = find_pattern(func)
    assert pattern is not None, f"no argument pattern fits {_name(func)}"
    kinds, extra = pattern
    shapes = examples_of_lengths([3, 0, 5, 1], static=(2,))
    xs_args = [_of_kind(kind, shapes) for kind in kinds]
    xb_args = [PackedBatch.fromlist(xs) for xs in xs_args]
    inplace = _is_inplace(func)

    def f(*xs):
        if inplace:  # write into a copy: the inputs are leaves that require grad
            xs = (xs[0] * 1 if xs[0].is_floating_point() else xs[0].clone(),) + xs[1:]
        return _apply(func, xs, extra)

    if func.__name__ in RANDOM:
        result = f(*xb_args)
        assert isinstance(result, PackedBatch) and result.layout is xb_args[0].layout
        assert result.data.shape == xb_args[0].data.shape
        return
    mb_assert(f, xs_args, xb_args, len(shapes), check_grad=func.__name__ not in NO_DERIVATIVE)


@given(packed_examples(static=(3,)))
def test_plain_tensors_broadcast_like_the_examples(pair):
    xs, pb = pair
    bias = torch.randn(3, dtype=xs[0].dtype)
    row = torch.randn(1, 1, 3, dtype=xs[0].dtype)
    mb_assert(lambda x, b, r: (x * 2 - b).tanh() / (1 + x.abs()) + r,
              [xs, [bias] * len(xs), [row] * len(xs)], [pb, bias, row], len(xs))


def test_plain_tensor_spanning_the_longest_example_gives_each_row_its_step(dtype):
    # Positional encodings sliced with maxsize(1): per example that is its own length.
    xs = examples_of_lengths([3, 0, 5, 1], dtype=dtype)
    table = torch.randn(1, 8, 3, dtype=dtype, requires_grad=True)
    pb = PackedBatch.fromlist(xs)
    mb_assert(lambda x, t: x + t[:, : x.maxsize(1)], [xs, [table] * 4], [pb, table], 4)
    mb_assert(lambda x, t: x * t[0, : x.maxsize(1)], [xs, [table] * 4], [pb, table], 4)


def test_two_batches_with_another_tie_order_combine():
    xs = examples_of_lengths([2, 2, 3])
    ys = examples_of_lengths([2, 2, 3])
    pb = PackedBatch.fromlist(xs)
    # The same lengths, rows in another order (what a foreign PackedSequence may hold).
    reordered = PackedBatch.fromlist(ys)
    layout = reordered.layout
    swapped = torch.tensor([2, 1, 0])
    other = PackedBatch(
        reordered.data.view(-1, 3)[_swap_rows(layout, swapped)], layout.batch_sizes, swapped)
    assert not other.layout.same_as(pb.layout)
    result = pb + other
    for r, x, y in zip(result.examples(), xs, ys):
        torch.testing.assert_close(r, x + y)


def _swap_rows(layout, sorted_indices):
    # Rows of `layout` rearranged into the layout with the given slot order.
    rows = []
    for t, size in enumerate(layout.batch_sizes.tolist()):
        for slot in range(size):
            example = int(sorted_indices[slot])
            rows.append(int(layout.offsets[t]) + int(layout.unsorted_cpu[example]))
    return torch.tensor(rows)


def test_inplace_ops_return_the_same_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([3, 1]))
    target = pb * 1
    assert target.add_(1.0) is target and F.relu(target, inplace=True) is target
    target += pb
    assert isinstance(target, PackedBatch)
    torch.testing.assert_close(target.data, (pb.data + 1).relu() + pb.data)


def test_comparisons_and_where(dtype):
    xs = examples_of_lengths([3, 0, 4], dtype=dtype)
    ys = examples_of_lengths([3, 0, 4], dtype=dtype)
    mb_assert(lambda x, y: torch.where(x > y, x, y * 2), [xs, ys],
              [PackedBatch.fromlist(xs), PackedBatch.fromlist(ys)], 3)


def test_errors_name_the_op_and_the_problem():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match=r"torch.add: example 0 has length 2 in one argument and "
                                         r"3 in another along the packed dimension 1"):
        torch.add(pb, PackedBatch.fromlist(examples_of_lengths([3, 3])))
    with pytest.raises(ValueError, match=r"Tensor.__mul__: batch arguments have examples of rank "
                                         r"3 and 2"):
        pb * PackedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)])
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 4 in "
                                         r"dimension 1, the packed dimension"):
        torch.add(pb, torch.zeros(1, 4, 3))
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has size 5 in "
                                         r"dimension 0"):
        torch.add(pb, torch.zeros(5, 1, 3))
    with pytest.raises(ValueError, match=r"torch.add: a plain tensor argument has rank 4, more "
                                         r"than the examples' rank 3"):
        torch.add(pb, torch.zeros(2, 1, 1, 3))
    with pytest.raises(NotImplementedError, match=r"torch.add: out= is not supported"):
        torch.add(pb, 1, out=torch.zeros(5, 3))
    with pytest.raises(ValueError, match=r"torch.add: batch arguments have different batch sizes "
                                         r"\(2 and 3\)"):
        torch.add(pb, PackedBatch.fromlist(examples_of_lengths([2, 3, 1])))
    with pytest.raises(ValueError, match=r"Tensor.add_: an in-place op on a plain tensor cannot "
                                         r"take a batch argument"):
        torch.zeros(3).add_(pb)


def test_one_call_for_the_whole_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([5, 1, 0, 3, 2, 4]))
    with torch.autograd.profiler.profile() as prof:
        torch.tanh(pb * 2)
    names = [e.name for e in prof.function_events]
    assert names.count("aten::tanh") == 1 and names.count("aten::mul") == 1


def test_masked_batch_is_not_a_pointwise_argument_of_the_packed_rule():
    # The packed handler never sees a MaskedBatch: the mixing rule hands it over.
    xs = examples_of_lengths([2, 3])
    assert isinstance(PackedBatch.fromlist(xs) * MaskedBatch.fromlist(xs, (True, False)),
                      MaskedBatch)
