"""``zip``, ``enumerate`` and ``reversed`` combined, nested in a ``for`` header: each example
pairs and counts its own steps, as the loop over examples does.

``reversed(x.unbind(1))`` gives a short example its steps last (after the
padding of the longer ones); zipped with a forward sequence, the batch pairs
each example's own steps, which takes moving them to the front first.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
from matchbox import MaskedBatch

LENGTHS = st.lists(st.integers(0, 4), min_size=1, max_size=4)


@matchbox.batch
def forward_times_backward(x, w):
    acc = x[:, :1].sum(1) * 0.0
    for a, b in zip(x.unbind(1), reversed(x.unbind(1))):
        acc = (acc + a * b) @ w  # a bidirectional pairing written by hand
    return acc


@given(lengths=LENGTHS)
def test_zip_of_a_sequence_and_its_reverse(lengths):
    w = torch.randn(3, 3, dtype=torch.float64) * 0.5
    assert_batch_equals_loop(forward_times_backward, sequences(lengths), ([w] * len(lengths), w))


def test_zip_of_a_sequence_and_its_reverse_dtypes(dtype):
    w = torch.randn(3, 3, dtype=dtype) * 0.5
    assert_batch_equals_loop(forward_times_backward, sequences([3, 1, 0, 2], dtype=dtype),
                             ([w] * 4, w))


@matchbox.batch
def counted_backwards(x):
    acc = x[:, :1].sum(1) * 0.0
    for i, (a, b) in enumerate(zip(reversed(x.unbind(1)), x.unbind(1)), 1):
        acc = acc * 0.5 + a * b * i
    return acc


@given(lengths=LENGTHS)
def test_enumerate_of_a_zip_with_a_reverse_and_a_positional_start(lengths):
    assert_batch_equals_loop(counted_backwards, sequences(lengths))


@matchbox.batch
def reverse_pairs_of_a_list(x):
    outs = []
    h = x[:, :1].sum(1) * 0.0
    for xt in x.unbind(1):
        h = h + xt
        outs.append(h)
    acc = h * 0.0
    for a, b in zip(outs, reversed(outs)):
        acc = acc * 0.5 + a * b
    return acc


@given(lengths=LENGTHS)
def test_zip_of_an_appended_list_and_its_reverse(lengths):
    assert_batch_equals_loop(reverse_pairs_of_a_list, sequences(lengths))


@matchbox.batch
def pairs_of_two_lists(x, w):
    ups, downs = [], []
    for xt in x.unbind(1):
        if xt.sum() > 0:
            ups.append(xt)
        else:
            downs.append(xt * 2)
    acc = x[:, :1].sum(1) * 0.0
    for a, b in zip(ups, downs):  # the i-th rising step with the i-th falling one
        acc = (acc + a * b) @ w
    return acc


@given(lengths=LENGTHS, data=st.data())
def test_zip_of_two_lists_appended_in_the_sides_of_an_if(lengths, data):
    # An example's i-th item of one list may sit past the other list's last position
    # (each list holds every example's items, by step): a user trial found such pairs
    # lost when the lists were cut at the shorter one before each example's own items
    # came first.  Signs chosen so that some examples' items of `ups` come late.
    w = torch.randn(3, 3, dtype=torch.float64) * 0.5
    xs = [torch.randn(1, n, 3, dtype=torch.float64).abs()
          * torch.tensor(data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n,
                                            max_size=n)), dtype=torch.float64).view(1, n, 1)
          for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_batch_equals_loop(pairs_of_two_lists, (xs, xb), ([w] * len(lengths), w))


def test_zip_of_two_lists_where_one_examples_items_come_last(dtype):
    # The trial's case: the last example's rising steps come after every falling one.
    signs = [[1, 1, -1, -1], [], [-1], [-1, -1, -1, 1, 1, 1]]
    xs = [torch.tensor(row, dtype=dtype).view(1, len(row), 1).expand(1, len(row), 3).clone()
          for row in signs]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    w = torch.eye(3, dtype=dtype)
    assert_batch_equals_loop(pairs_of_two_lists, (xs, xb), ([w] * len(xs), w))


@matchbox.batch
def ranges(y, n):
    acc = y[:, 0] * 0.0
    for i, yt in zip(reversed(range(n)), y.unbind(1)):
        acc = acc * 0.5 + y[:, i] * yt
    for i in reversed(range(n)):
        acc = acc + y[:, i] * (i + 1)
    return acc


@given(counts=st.lists(st.integers(0, 3), min_size=1, max_size=4))
def test_reversed_and_zipped_ranges_with_per_example_bounds(counts):
    ys = [torch.randn(1, 3, 2, dtype=torch.float64) for _ in counts]
    ns = [torch.tensor([n]) for n in counts]
    assert_batch_equals_loop(ranges, (ys, MaskedBatch.fromlist(ys, (False, False))),
                             (ns, MaskedBatch.fromlist(ns, ())))


@matchbox.batch
def zip_of_an_enumerate(x):
    acc = x[:, :1].sum(1) * 0.0
    for (i, a), b in zip(enumerate(reversed(x.unbind(1))), x.unbind(1)):
        acc = acc + a * b * i
    return acc


def test_zip_of_a_per_example_enumerate_is_refused():
    _, xb = sequences([3, 1])  # the short example's reversed steps come last
    with pytest.raises(NotImplementedError, match=r"@batch: zip of an argument whose steps come, "
                                                  r"for some example, after steps it does not "
                                                  r"have .* zip the sequences first"):
        zip_of_an_enumerate(xb)


@matchbox.batch
def reversed_enumerate(x):
    acc = x[:, :1].sum(1) * 0.0
    for i, a in reversed(enumerate(x.unbind(1))):
        acc = acc + a * i
    return acc


def test_reversed_enumerate_raises_as_python_does():
    xs, xb = sequences([3, 1])
    with pytest.raises(TypeError, match="'enumerate' object is not reversible"):
        reversed_enumerate(xs[0])
    with pytest.raises(TypeError, match="'enumerate' object is not reversible"):
        reversed_enumerate(xb)


@matchbox.batch
def zipped(x, y):
    acc = x[:, :1].sum(1) * 0.0
    for a, b in zip(x.unbind(1), y.unbind(1)):
        acc = acc + a * b
    return acc


def test_zip_of_batches_of_different_batch_sizes_is_refused():
    _, xb = sequences([3, 1, 2])
    _, yb = sequences([2, 2])
    with pytest.raises(ValueError, match=r"zip: the sequences hold batches of different batch "
                                         r"sizes \[2, 3\]; every batch"):
        zipped(xb, yb)


@matchbox.batch
def ranges_with_starts(y, s, n):
    acc = y[:, 0] * 0.0
    for i, yt in zip(reversed(range(s, n)), y.unbind(1)):
        acc = acc * 0.5 + y[:, i] * yt
    return acc


@given(bounds=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=4))
def test_zip_of_a_reversed_range_with_per_example_starts(bounds):
    # A range with a per-example start has batch items (each example's own values).
    ys = [torch.randn(1, 3, 2, dtype=torch.float64) for _ in bounds]
    ss = [torch.tensor([min(a, b)]) for a, b in bounds]
    ns = [torch.tensor([max(a, b)]) for a, b in bounds]
    assert_batch_equals_loop(ranges_with_starts, (ys, MaskedBatch.fromlist(ys, (False, False))),
                             (ss, MaskedBatch.fromlist(ss, ())), (ns, MaskedBatch.fromlist(ns, ())))


@matchbox.batch
def index_of_the_end(x, how):
    end = x[:, 0] * 0 + 100.0
    position = x[:, 0, 0] * 0
    if how == "enumerate":
        for i, item in enumerate(itertools.chain(x.unbind(1), [end])):
            if item[:, 0] == 100.0:
                position = position + i
    else:
        for i, item in zip(itertools.count(), (s for s in [*x.unbind(1), end])):
            if item[:, 0] == 100.0:
                position = position + i
    return position


@pytest.mark.parametrize("how", ["enumerate", "zip"])
def test_a_lazy_iterable_with_items_after_missing_ones_is_refused(how):
    # enumerate/zip of a lazy iterable went by position over every example's items: the end
    # item's index was the longest example's length for every example, silently (a user
    # trial).
    xs = [torch.arange(1.0, n + 1, dtype=torch.float64).view(1, n, 1) for n in (3, 1)]
    with pytest.raises(NotImplementedError, match=rf"^@batch: {how}\(\) over a lazy iterable "
                                                  r"\(a generator, itertools.chain\) \(.*\) "
                                                  r"reaches an item that some example has "
                                                  r"after one it lacks"):
        index_of_the_end(MaskedBatch.fromlist(xs, (True, False)), how)


@pytest.mark.parametrize("how", ["enumerate", "zip"])
def test_a_lazy_iterable_whose_examples_have_every_item_equals_the_loop(how):
    xs = [torch.arange(1.0, 4, dtype=torch.float64).view(1, 3, 1) * k for k in (1, 2)]
    out = index_of_the_end(MaskedBatch.fromlist(xs, (True, False)), how)
    assert [e.item() for e in out.examples()] == [index_of_the_end(x, how).item() for x in xs]
