"""``x[:, j] = v`` with ``j`` a batch of one int per example (a pointer network masking the
candidate it chose: ``avail[:, j] = -1e9``), against the per-example loop, values and
gradients (into ``x`` and into ``v``).  Padding holds NaN: a padding value that reaches a
real output or a gradient fails the comparison."""

from __future__ import annotations

import pytest
import torch

from matchbox import MaskedBatch
from matchbox.extending import EXAMPLE_SCALAR, mark_example_scalar
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]


def sequences(lengths, width=None, dtype=torch.float64):
    shape = (lambda n: (1, n)) if width is None else (lambda n: (1, n, width))
    xs = [torch.randn(*shape(n), dtype=dtype) for n in lengths]
    dims = (True,) if width is None else (True, False)
    return xs, MaskedBatch.fromlist(xs, dims, padding_value=float("nan"))


def indices(values, scalar):
    """The loop's indices (``(1,)`` tensors, or Python ints) and their batch."""
    if scalar:
        return list(values), mark_example_scalar(MaskedBatch(torch.tensor(values), None, ()),
                                                 EXAMPLE_SCALAR)
    loop = [torch.tensor([v]) for v in values]
    return loop, MaskedBatch.fromlist(loop, ())


def written(index, value=None, number=None):
    """``y = x * 1; y[index(j)] = v`` (``v``: ``value``, or the number ``number``)."""
    def f(x, j, *v):
        y = x * 1  # (x is a leaf that requires grad: write into a result)
        y[index(j)] = number if number is not None else v[0]
        return y
    return f


LENGTHS = [[3, 1, 4], [1], [2, 5, 1, 3]]


def own_indices(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    return [int(torch.randint(-n, n, (1,), generator=g)) for n in lengths]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [True, False])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_number_written_at_each_examples_own_position_equals_the_loop(lengths, scalar, dtype):
    # avail[:, j] = -1e9, j negative too: counted from each example's own end.
    xs, xb = sequences(lengths, dtype=dtype)
    js, jb = indices(own_indices(lengths, 0), scalar)
    mb_assert(written(lambda j: (slice(None), j), number=-1e9), [xs, js], [xb, jb], len(xs))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [True, False])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_a_batch_written_at_each_examples_own_position_equals_the_loop(lengths, scalar, dtype):
    # Gradients into x (around the written rows) and into v (through them).
    xs, xb = sequences(lengths, width=2, dtype=dtype)
    js, jb = indices(own_indices(lengths, 1), scalar)
    vs = [torch.randn(1, 2, dtype=dtype) for _ in lengths]
    vb = MaskedBatch.fromlist(vs, (False,))
    mb_assert(written(lambda j: (slice(None), j)), [xs, js, vs], [xb, jb, vb], len(xs))


@pytest.mark.parametrize("scalar", [True, False])
def test_a_plain_tensor_written_at_each_examples_own_position_equals_the_loop(scalar):
    xs, xb = sequences([3, 1, 4], width=2)
    js, jb = indices([2, -1, -4], scalar)
    v = torch.randn(2, dtype=torch.float64)
    mb_assert(written(lambda j: (slice(None), j)), [xs, js, [v] * 3], [xb, jb, v], 3)


@pytest.mark.parametrize("scalar", [True, False])
def test_a_write_at_a_per_example_int_with_more_indices_equals_the_loop(scalar):
    xs, xb = sequences([3, 1, 4], width=3)
    js, jb = indices([1, 0, -2], scalar)
    # x[:, j, 1:] = v: the indices after j index the row read at j.
    mb_assert(written(lambda j: (slice(None), j, slice(1, None)), number=7.0), [xs, js],
              [xb, jb], 3)
    # x[..., j] along a static dimension, and x[:, :, j] the same.
    ks, kb = indices([2, 0, -1], scalar)
    mb_assert(written(lambda j: (Ellipsis, j), number=-5.0), [xs, ks], [xb, kb], 3)
    mb_assert(written(lambda j: (slice(None), slice(None), j), number=-5.0), [xs, ks], [xb, kb],
              3)


def test_a_write_at_a_per_example_int_of_a_batch_of_one_equals_the_loop():
    for lengths in ([1], [4]):
        xs, xb = sequences(lengths)
        js, jb = indices([-1], True)
        mb_assert(written(lambda j: (slice(None), j), number=0.5), [xs, js], [xb, jb], 1)


def test_a_pointer_networks_decoding_steps_equal_the_loop():
    # Choose the best candidate still available, then mask it: every step's choice differs
    # per example, and each example has its own number of candidates.
    def decode(scores):
        avail = scores * 1
        picked = []
        for _ in range(2):
            j = avail.argmax(-1)
            picked.append(avail[:, j])
            avail[:, j] = -1e9
        return avail, picked[0] + picked[1]

    xs, xb = sequences([3, 2, 5])
    mb_assert(lambda x: decode(x)[0], [xs], [xb], 3)
    mb_assert(lambda x: decode(x)[1], [xs], [xb], 3)


def test_a_write_past_an_examples_end_raises_like_the_loop():
    _, xb = sequences([3, 1, 2])
    _, jb = indices([2, 1, 0], True)
    with pytest.raises(IndexError, match=r"Tensor.__setitem__: index 1 is out of range for "
                                         r"example 1, which has size 1 in dimension 1"):
        xb[:, jb] = 0.0
    _, jb = indices([0, -2, 0], False)
    with pytest.raises(IndexError, match=r"Tensor.__setitem__: index -2 is out of range for "
                                         r"example 1, which has size 1 in dimension 1"):
        xb[:, jb] = 0.0


def test_a_write_into_an_empty_example_raises_like_the_loop():
    xs, xb = sequences([2, 0, 1])
    _, jb = indices([0, 0, 0], True)
    with pytest.raises(IndexError, match=r"Tensor.__setitem__: index 0 is out of range for "
                                         r"example 1, which has size 0 in dimension 1"):
        xb[:, jb] = 0.0
    with pytest.raises(IndexError):
        xs[1][:, 0] = 0.0  # the loop's own error


def test_a_write_with_an_index_that_is_padding_raises():
    _, xb = sequences([2, 1])
    jb = MaskedBatch.fromlist([torch.tensor([1]), torch.tensor([0])], (),)
    jb = MaskedBatch._make(jb.data, torch.tensor([True, False]), ())
    jb._scalar = False
    with pytest.raises(IndexError, match="Tensor.__setitem__: index 0 is out of range for "
                                         "example 1"):
        xb[:, jb] = 0.0


def test_writes_at_per_example_ints_that_are_not_supported_are_refused():
    _, xb = sequences([3, 2], width=3)
    _, jb = indices([1, 0], True)
    with pytest.raises(NotImplementedError, match=r"Tensor.__setitem__: x\[.*\] = value with "
                                                  "more than one batch of per-example ints"):
        xb[:, jb, jb] = 0.0
    yb = MaskedBatch.fromlist([torch.randn(1, 2, n) for n in (3, 2)], (False, True))
    with pytest.raises(NotImplementedError, match="after the per-example int, positions that "
                                                  "differ between examples"):
        yb[:, jb, -1:] = 0.0
    with pytest.raises(NotImplementedError, match="before the per-example int, positions that "
                                                  "differ between examples"):
        xb[:, -1, jb] = 0.0


def test_a_write_with_an_index_of_unknown_kind_is_refused():
    _, xb = sequences([3, 2])
    jb = xb.argmax(1).unsqueeze(-1).squeeze(-1)  # shape ops do not record what it is
    assert jb._scalar is None
    with pytest.raises(NotImplementedError, match=r"Tensor\.__setitem__: the index along "
                                                  "dimension 1 is a batch of one int per "
                                                  "example that Matchbox cannot tell apart"):
        xb[:, jb] = 0.0


def test_a_per_example_int_as_the_first_index_is_refused_saying_what_to_write():
    _, xb = sequences([3, 2])
    _, jb = indices([1, 0], True)
    with pytest.raises(IndexError, match=r"the first index must be ':'.*indexes each "
                                         r"example's dimension 0 in the loop.*write x\[:, j\]"):
        xb[jb] = 0.0
    with pytest.raises(IndexError, match=r"the first index must be ':'.*write x\[:, j\]"):
        xb[jb]


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_augmented_write_at_a_vector_index_equals_the_loop(dtype):
    # x[:, j] += v with the loop's (1,) index: x[:, j] is a copy in the loop too, which
    # += updates before the write puts it back.
    xs, xb = sequences([3, 1, 4], width=2, dtype=dtype)
    js, jb = indices([1, 0, -1], False)
    vs = [torch.randn(1, 2, dtype=dtype) for _ in range(3)]

    def f(x, j, v):
        y = x * 1
        y[:, j] += v
        row = y[:, j]
        row *= 2  # a copy: y stays as it was, in the loop too
        return y, row

    mb_assert(lambda x, j, v: f(x, j, v)[0], [xs, js, vs],
              [xb, jb, MaskedBatch.fromlist(vs, (False,))], 3)
    mb_assert(lambda x, j, v: f(x, j, v)[1], [xs, js, vs],
              [xb, jb, MaskedBatch.fromlist(vs, (False,))], 3)


IN_PLACE = {
    "x[:, j] += v": lambda x, j, v: x.__setitem__((slice(None), j),
                                                  x[:, j].__iadd__(v)),
    "t = x[:, j]; t.mul_(v)": lambda x, j, v: x[:, j].mul_(v),
    "x[:, -1] += v; x[:, -1].sub_(1)": lambda x, j, v: (
        x.__setitem__((slice(None), -1), x[:, -1].__iadd__(v)), x[:, -1].sub_(1)),
    "t = x[:, j]; t += v; t *= v": lambda x, j, v: x[:, j].__iadd__(v).__imul__(v),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_an_in_place_op_at_an_int_index_writes_through_as_the_loops_view(name, dtype):
    # The loop's int index: x[:, j] is a view there; the batch's copy writes back.
    xs, xb = sequences([3, 1, 4], width=2, dtype=dtype)
    js, jb = indices([1, 0, -1], True)
    vs = [torch.randn(1, 2, dtype=dtype) for _ in range(3)]

    def f(x, j, v):
        y = x * 1
        IN_PLACE[name](y, j, v)
        return y

    mb_assert(f, [xs, js, vs], [xb, jb, MaskedBatch.fromlist(vs, (False,))], 3)


def test_an_in_place_op_on_a_read_of_a_batch_written_since_is_refused():
    # The loop's view would show the write made after the read; the batch's copy does not.
    _, xb = sequences([3, 1, 4], width=2)
    _, jb = indices([1, 0, -1], True)
    y = xb * 1
    t = y[:, jb]
    y[:, 0] = 5.0
    with pytest.raises(NotImplementedError, match=r"^Tensor.__iadd__: the batch was indexed at "
                                                  r"positions that differ between examples .*"
                                                  r"written after that read.*index the batch "
                                                  r"again after writing it"):
        t += 1.0
    with pytest.raises(NotImplementedError, match=r"^Tensor.add_: the batch was indexed along "
                                                  r"a dynamic dimension"):
        y[:, jb][..., :1].add_(1.0)  # a view of the copy: refused, as before


def test_an_in_place_op_on_a_read_of_a_batch_gone_is_refused():
    # The batch read is gone: in the loop its data may still be seen (through another view
    # of it, y's here), which the op would reach; the batch's copy cannot.
    _, xb = sequences([3, 1, 4], width=2)
    _, jb = indices([1, 0, -1], True)
    y = xb * 1
    t = y.unsqueeze(1).squeeze(1)[:, jb]
    with pytest.raises(NotImplementedError, match=r"^Tensor.__iadd__: .*the batch indexed is "
                                                  r"gone: in the loop the result is a view"):
        t += 1.0
    t = y[:, jb]  # the batch read held: written through
    t += 1.0
    torch.testing.assert_close(y[:, jb].data, t.data)


def test_an_in_place_op_on_a_read_of_a_copy_stays_refused():
    _, xb = sequences([3, 2, 4], width=2)
    _, jb = indices([1, 0, -1], True)
    y = xb * 1
    part = y[:, :-1]  # a copy (counted from each example's end)
    t = part[:, jb]
    with pytest.raises(NotImplementedError, match=r"^Tensor.__iadd__: the batch was indexed "
                                                  r"along a dynamic dimension"):
        t += 1.0
