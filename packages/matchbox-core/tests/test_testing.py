"""matchbox.testing: the per-example-loop oracle itself, and its failure messages."""

from __future__ import annotations

import random

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.testing import mb_assert, mb_rand, mb_test


def test_mb_rand_gives_examples_and_their_batch():
    xs, xb = mb_rand(6, (True, 5), (False, 3), dtype=torch.float32, min_size=0)
    assert len(xs) == 6 and xb.dims == (True, False) and xb.dtype == torch.float32
    assert all(x.shape[0] == 1 and x.shape[2] == 3 and 0 <= x.shape[1] <= 5 for x in xs)
    for x, y in zip(xs, xb.examples()):
        assert torch.equal(x, y)
    # Padding holds NaN unless asked otherwise.
    assert torch.isnan(xb.data[~xb.mask.expand_as(xb.data)]).all()


def test_mb_rand_names_a_dimension_that_is_not_a_pair():
    with pytest.raises(TypeError, match=r"^mb_rand: each dimension is a \(dynamic, size\) "
                                        r"pair, such as \(True, 5\) or \(False, 3\); "
                                        r"dimension 0 is None"):
        mb_rand(3, None, 3)


def test_mb_test_passes_for_a_correct_batched_function():
    weight = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    mb_test(lambda x, w: (x @ w).tanh().sum(1), ((True, 4), (False, 3)), weight,
            dtype=torch.float64)


def test_value_mismatch_names_example_and_position():
    def wrong(x):
        return x * 1.5 if isinstance(x, MaskedBatch) else x

    with pytest.raises(AssertionError, match=r"example 0, output 0 value differs at position "
                                             r"\(0, 0, 0\): batch gave"):
        xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=1)
        mb_assert(wrong, [xs], [xb], 2)


def test_gradient_mismatch_is_caught():
    def detached_on_batches(x):
        return x.detach() * 1 if isinstance(x, MaskedBatch) else x * 1

    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=1)
    with pytest.raises(AssertionError, match=r"gradient of argument 0 of example 0 differs"):
        mb_assert(detached_on_batches, [xs], [xb], 2)


def test_parameter_gradients_are_compared():
    layer = torch.nn.Parameter(torch.randn(2, dtype=torch.float64))

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = layer

        def forward(self, x):
            w = self.w.detach() if isinstance(x, MaskedBatch) else self.w
            return x * w

    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=1)
    with pytest.raises(AssertionError, match=r"gradient of parameter 0"):
        mb_assert(Scale(), [xs], [xb], 2)


def test_shape_mismatch_is_reported():
    def drops_a_row(x):
        return x[:, 1:] if isinstance(x, MaskedBatch) else x

    xs, xb = mb_rand(2, (True, 3), (False, 2), min_size=2)
    with pytest.raises(AssertionError, match=r"example 0, output 0: batch gave shape"):
        mb_assert(drops_a_row, [xs], [xb], 2)


def test_output_count_mismatch_is_reported():
    def extra(x):
        return (x, x) if isinstance(x, MaskedBatch) else x

    xs, xb = mb_rand(2, (False, 2), min_size=0)
    with pytest.raises(AssertionError, match=r"the batch gave 2 outputs but an example gave"):
        mb_assert(extra, [xs], [xb], 2)


def test_integer_batches_keep_their_own_padding():
    # Float inputs are rebuilt (fresh leaves, NaN padding); an integer batch (ids,
    # targets) gets no gradient and is passed as given, so padding the user chose to
    # be out of range (an id no embedding has) really reaches the batched call.
    xs = [torch.tensor([[1, 2, 3]]), torch.tensor([[4]])]
    xb = MaskedBatch.fromlist(xs, (True,), padding_value=10**6)
    seen = []

    def f(ids):
        seen.append(ids)
        return ids * 2

    mb_assert(f, [xs], [xb], 2)
    batched = seen[-1]
    assert isinstance(batched, MaskedBatch)
    assert batched.data[1, 1:].tolist() == [10**6, 10**6]


@pytest.mark.parametrize("extra", ["a kept size-one dimension", "a scalar kept as (1,)"])
def test_an_extra_size_one_dimension_is_a_shape_mismatch(extra):
    # Found in a user trial: the comparison used to reshape such outputs, so an op
    # that forgot to drop a dimension (keepdim) passed its tests.
    def f(x):
        if extra == "a kept size-one dimension":
            return x.sum(1, keepdim=isinstance(x, MaskedBatch))
        total = x.sum((1, 2))
        return total.unsqueeze(1) if isinstance(x, MaskedBatch) else total

    with pytest.raises(AssertionError, match=r"example 0, output 0: batch gave shape \(1, 1"):
        mb_test(f, ((True, 5), (False, 4)))


def test_a_per_example_scalar_equals_the_loops_zero_dimensional_result():
    # A batch of per-example scalars holds each as (1,); the loop's full reduction is 0-d.
    mb_test(lambda x: x.sum(), ((True, 5), (False, 4)))


def test_specs_in_the_original_form_give_the_batch_size_first():
    # (batch_size, *dims) as mb_rand takes it; an int names an earlier argument;
    # a tuple of ints is a plain tensor shared by every example (a weight).
    seen = []

    def f(x, y, w):
        pairs = zip(x.examples(), y.examples()) if isinstance(x, MaskedBatch) else [(x, y)]
        seen.append((type(x).__name__, all(torch.equal(a, b) for a, b in pairs), w.shape))
        return (x + y) @ w

    mb_test(f, (3, (True, 4), (False, 2)), 0, (2, 5))
    assert seen == [("Tensor", True, (2, 5))] * 3 + [("MaskedBatch", True, (2, 5))]


class _Mix(torch.nn.Module):
    """A module with float32 parameters (core ops only: no matchbox-nn needed)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(2, 3))

    def forward(self, x, h):
        return (x @ self.weight).tanh() + h


def test_a_modules_parameters_set_the_dtype_and_sizes_start_at_one():
    dtypes = []

    def f(x, h):
        dtypes.append(x.dtype)
        return x.tanh() + h

    mb_test(_Mix(), (4, (False, 2)), (4, (False, 3)))  # float32, from the parameters
    mb_test(_Mix().double(), (4, (True, 3), (False, 2)), (4, (False, 3)))
    mb_test(f, (4, (False, 3)), (4, (False, 3)))
    assert set(dtypes) == {torch.get_default_dtype()}  # a plain function: torch's default
    xs, _ = mb_rand(50, (True, 2))
    assert min(x.size(1) for x in xs) >= 1  # the original drew sizes from [1, size]


def test_differing_batch_sizes_in_the_specs_are_refused():
    with pytest.raises(ValueError, match=r"mb_test: the arguments ask for different batch "
                                         r"sizes \[3, 4\]"):
        mb_test(lambda x, y: x + y, (3, (False, 2)), (4, (False, 2)))


def test_mb_rand_with_two_dynamic_dimensions_draws_examples_empty_in_part():
    # An example may be empty in one dynamic dimension and not in the other; the batch
    # holds its sizes exactly.
    rng = random.Random(0)
    shapes = set()
    for _ in range(20):
        xs, xb = mb_rand(6, (True, 3), (True, 3), min_size=0, generator=rng)
        assert xb.dims == (True, True)
        assert [tuple(e.shape) for e in xb.examples()] == [tuple(x.shape) for x in xs]
        shapes |= {tuple(x.shape[1:]) for x in xs}
    assert any(0 in s and s != (0, 0) for s in shapes)


def test_every_spec_form_of_the_original_is_a_batch_or_a_tensor():
    # The original Matchbox's tests: (4, ()) per-example scalars (its control-flow tests),
    # (4, (False, 2)), (4, (True, 3), (False, 2)), () entries anywhere, 0 naming an
    # earlier argument, and a tuple of ints for a plain tensor.
    seen = []

    def record(*args):
        seen.append([(type(a).__name__, a.dims if isinstance(a, MaskedBatch) else tuple(a.shape))
                     for a in args])
        return sum((a.sum() for a in args[1:]), args[0] * 2)

    mb_test(record, (4, ()), (4, (), (True, 3), ()), (4, (False, 2)), 1, (2,))
    assert seen[-1] == [("MaskedBatch", ()), ("MaskedBatch", (True,)),
                        ("MaskedBatch", (False,)), ("MaskedBatch", (True,)), ("Tensor", (2,))]
    assert seen[0][0] == ("Tensor", (1,)) and seen[0][4] == ("Tensor", (2,))
    assert len(seen) == 5
    xs, xb = mb_rand(4, ())
    assert [tuple(x.shape) for x in xs] == [(1,)] * 4 and xb.dims == ()


def test_a_batch_of_scalars_is_compared_with_the_loop():
    # (4, ()) used to be passed to f unchanged, so a wrong batched f passed.
    def wrong(x):
        return x * 2 if isinstance(x, MaskedBatch) else x * 3

    with pytest.raises(AssertionError, match="example 0, output 0 value differs"):
        mb_test(wrong, (4, ()))
    mb_test(lambda x: (x * 2).exp(), (4, ()), dtype=torch.float64)
    mb_test(lambda x: (x * 2).exp(), (1, ()), dtype=torch.float32)


def test_a_malformed_dimension_of_an_original_spec_is_refused():
    with pytest.raises(ValueError, match=r"mb_test: argument spec \(4, \(True, 'a'\)\): each "
                                         r"dimension after the batch size is \(dynamic, size\) "
                                         r"or \(\), got \(True, 'a'\)"):
        mb_test(lambda x: x, (4, (True, "a")))


def test_mb_assert_takes_the_batch_size_as_xb_size_0():
    # x.size(0) of a batch is the batch size as a size and refuses arithmetic (it is 1 in
    # each example); the oracle repeats a plain result once per example with it.
    xs, xb = mb_rand(3, (True, 4), (False, 2), dtype=torch.float64)
    w = torch.randn(2, dtype=torch.float64, requires_grad=True)
    mb_assert(lambda x, w: x.sum(1) * w, [xs, [w] * 3], [xb, w], xb.size(0))
    mb_assert(lambda x, w: w * 2, [xs, [w] * 3], [xb, w], xb.size(0))  # a plain result
