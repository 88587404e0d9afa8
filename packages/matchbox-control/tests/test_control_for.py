"""``for`` over ``unbind``, ``reversed``, ``range``, ``zip`` and ``enumerate``: each
example iterates over its own items (its own length along a dynamic dimension,
its own count for a range with a per-example bound)."""

from __future__ import annotations

import pytest
import torch
from control_cases import (
    assert_batch_equals_loop,
    assert_oracle,
    assert_shared_weight_model_equals_loop,
    scalars,
    sequences,
)
from hypothesis import given
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch


@matchbox.batch
def count_up(n):
    total = 0
    for i in range(n):
        total = total + i
    return total


def test_oracle_range_with_per_example_bound():
    assert_oracle(count_up, [0, 1, 3, 4], [0, 0, 3, 6], dtype=torch.int64)


@matchbox.batch
def running_sum(x, w):
    h = x.batch_zeros(x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
    return h


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_unbind_over_a_dynamic_dimension(lengths):
    assert_shared_weight_model_equals_loop(running_sum, lengths)


@pytest.mark.parametrize("lengths", [[0, 0], [1], [0, 1, 2], [3, 1, 0, 2]])
def test_unbind_zero_and_one_length_examples(lengths, dtype):
    assert_shared_weight_model_equals_loop(running_sum, lengths, dtype)


@matchbox.batch
def from_learned_state(x, w, h0):
    # A learned initial state: `x.size(0)` is 1 for one example and the batch size
    # for a batch, so `h` is plain, expanded (stride 0) to the batch size, as core
    # takes it beside a batch; an empty example keeps it, merged with the batch
    # the others' steps give.
    h = h0.expand(x.size(0), -1)
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
    return h


@pytest.mark.parametrize("lengths", [[0, 2], [2, 0, 3], [0], [3], [1, 2]])
def test_a_learned_initial_state_expanded_to_the_batch_size(lengths, dtype):
    # Values and gradients, that of h0 included (one leaf shared by every example).
    w = torch.randn(3, 3, dtype=dtype)
    h0 = torch.randn(1, 3, dtype=dtype)
    n = len(lengths)
    assert_batch_equals_loop(from_learned_state, sequences(lengths, dtype=dtype),
                             ([w] * n, w), ([h0] * n, h0))


@matchbox.batch
def backwards(x, w):
    h = x.batch_zeros(x.size(-1))
    for xt in reversed(x.unbind(1)):
        h = (xt @ w + h).tanh()
    return h


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_reversed_unbind(lengths):
    assert_shared_weight_model_equals_loop(backwards, lengths)


@matchbox.batch
def zipped(x, y):
    h = x.batch_zeros(x.size(-1))
    for xt, yt in zip(x.unbind(1), y.unbind(1)):
        h = h + xt * yt
    return h


def test_zip_stops_at_each_examples_shorter_sequence(dtype):
    xs, xb = sequences([3, 1, 4, 0], dtype=dtype)
    ys, yb = sequences([2, 2, 4, 1], dtype=dtype)
    assert_batch_equals_loop(zipped, (xs, xb), (ys, yb))


@matchbox.batch
def weighted_by_position(x):
    h = x.batch_zeros(x.size(-1))
    for i, xt in enumerate(x.unbind(1)):
        h = h + xt * (i + 1)
    return h


@matchbox.batch
def weighted_from_the_end(x):
    h = x.batch_zeros(x.size(-1))
    for i, xt in enumerate(reversed(x.unbind(1))):
        h = h + xt * (i + 1)  # each example counts its own steps
    return h


@pytest.mark.parametrize("f", [weighted_by_position, weighted_from_the_end])
@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_enumerate(f, lengths):
    assert_batch_equals_loop(f, sequences(lengths))


@matchbox.batch
def indexed_steps(x):
    h = x.batch_zeros(x.size(-1))
    for t in range(x.size_as_tensor(1)):
        h = h * 0.5 + x.sum(1) * t
    return h


def test_range_over_per_example_sizes(dtype):
    assert_batch_equals_loop(indexed_steps, sequences([2, 0, 3, 1], dtype=dtype))


@matchbox.batch
def start_stop_step(n):
    total = 0
    for i in range(1, n, 2):
        total = total + i
    return total


def test_oracle_range_with_start_and_step():
    assert_oracle(start_stop_step, [0, 2, 6, 7], [0, 1, 9, 9], dtype=torch.int64)


@matchbox.batch
def per_example_start(a):
    total = 0
    for i in range(a, 4):
        total = total + i
    return total


def test_oracle_range_with_per_example_start():
    assert_oracle(per_example_start, [0, 2, 5], [6, 5, 0], dtype=torch.int64)


@matchbox.batch
def nested_loops(x):
    total = x.batch_zeros(x.size(-1))
    for xt in x.unbind(1):
        for k in range(2):
            total = total + xt * (k + 1)
    return total


def test_nested_loops(dtype):
    assert_batch_equals_loop(nested_loops, sequences([2, 0, 3, 1], dtype=dtype))


@matchbox.batch
def stacked_outputs(x, w):
    h = x.batch_zeros(x.size(-1))
    outputs = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        outputs.append(h)
    return F.stack(outputs, 1, dynamic=True)


def test_list_appended_in_a_loop_then_stacked(dtype):
    lengths = [3, 1, 2]
    assert_shared_weight_model_equals_loop(stacked_outputs, lengths, dtype)


@matchbox.batch
def kept_where_positive(x, w):
    kept = [x.batch_zeros(x.size(-1))]
    for xt in x.unbind(1):
        h = (xt @ w).tanh()
        if h.sum() > 0:
            kept.append(h * 2)
    return F.stack(kept, 1, dynamic=True)


@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=5))
def test_items_appended_under_a_per_example_condition_are_each_examples_own(lengths):
    # Each example appends at its own steps, with gaps: the stacked items are the
    # ones it appended, in order (the first gather of the present steps), not
    # the first n steps of the list.
    assert_shared_weight_model_equals_loop(kept_where_positive, lengths)


def test_plain_python_loop_keeps_its_semantics():
    @matchbox.batch
    def f(xs):
        out = []
        for i, x in enumerate(xs):
            if i % 2:
                out.append(x)
        else:
            out.append("done")
        return out

    assert f(["a", "b", "c", "d"]) == ["b", "d", "done"]


def test_for_over_a_generator_is_lazy():
    seen = []

    def items():
        for i in range(5):
            seen.append(i)
            yield i

    @matchbox.batch
    def f():
        for i in items():
            if i == 2:
                break
        return i

    assert f() == 2
    assert seen == [0, 1, 2]  # a break stops the generator exactly where Python does


def test_range_bound_must_be_per_example_ints():
    @matchbox.batch
    def f(n):
        for _i in range(n):
            pass
        return n

    _, xb = scalars([1.5, 2.0])
    with pytest.raises(TypeError, match=r"range\(\): the stop must be an int or a batch of "
                                        r"per-example ints"):
        f(xb)


@matchbox.batch
def index_each_step(x, w):
    h = x.batch_zeros(x.size(-1))
    for t in range(x.size_as_tensor(1)):
        h = (x[:, t] @ w + h).tanh()  # x[:, t] exists only for the examples running step t
    return h


@given(lengths=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_range_over_sizes_indexing_each_step(lengths):
    assert_shared_weight_model_equals_loop(index_each_step, lengths)


def test_range_over_sizes_indexing_each_step_dtypes(dtype):
    w = torch.randn(3, 3, dtype=dtype)
    assert_batch_equals_loop(index_each_step, sequences([3, 0, 1], dtype=dtype),
                             ([w] * 3, w))


def test_a_partial_step_mask_view_is_the_items_own_mask():
    # Handing back the item's own mask lets the merge of `h = cell(xt, h)` (real
    # where xt is) skip an `and` of the two masks; the values must be those of
    # the step anyway.
    from matchbox import _masking
    from matchbox.control.runtime import for_steps

    _, xb = sequences([3, 1, 2, 0])
    seen = 0
    for mask, item in for_steps(xb.unbind(1), None):
        if mask is not None:
            seen += 1
            assert _masking.mask_view(mask, 2) is item._mask
            assert torch.equal(mask, item.mask.reshape(-1))
    assert seen == 3


@matchbox.batch
def shrinking(x, c):
    for _ in x.unbind(1):
        c = c - 1 + 0.01 * (c - 0.75).sqrt()
    return c


def test_a_region_guards_what_it_computes_from_a_real_state_for_ended_examples(dtype):
    # For an example whose sequence has ended, c is its final value, below
    # 0.75: (c - 0.75).sqrt() is NaN there although c is real (core cannot tell;
    # only the step's mask says the example does not run the step).  The loop
    # never computes it, and the batch's gradient must not see it either.
    lengths = [4, 1, 2, 0]
    xs, xb = sequences(lengths, dtype=dtype)
    cs = [torch.tensor([n + 0.3], dtype=dtype) for n in lengths]
    assert_batch_equals_loop(shrinking, (xs, xb), (cs, MaskedBatch.fromlist(cs, ())))


@matchbox.batch
def per_sentence(doc, w):
    # doc: (1, sentences, words, 3); a sentence may have no words, a document no sentence.
    count = doc.sum(1).sum(1).sum(-1) * 0
    total = doc.new_zeros(1, 3)
    for sentence in doc.unbind(1):
        count = count + 1
        total = (total + sentence.sum(1) + 1.0) @ w
    return count + len(doc.unbind(1)), total


@pytest.mark.parametrize("shapes", [[(3, 0), (1, 4), (0, 0), (2, 3)], [(1, 0)], [(2, 0), (0, 0)]])
def test_a_loop_over_sentences_of_no_words_takes_each_of_them(shapes, dtype):
    # An example empty in another dynamic dimension has an all-false mask: its steps
    # were taken as steps it does not have, and skipped (a user trial's hierarchical
    # model, silently wrong).  Its lengths are known: each of its sentences is a step.
    docs = [torch.randn(1, s, n, 3, dtype=dtype) for s, n in shapes]
    batch = MaskedBatch.fromlist(docs, (True, True, False), padding_value=float("nan"))
    w = torch.randn(3, 3, dtype=dtype) * 0.5
    assert_batch_equals_loop(per_sentence, (docs, batch), ([w] * len(docs), w))


@matchbox.batch
def per_channel(x):
    n = 0
    total = x.new_zeros(1)
    for channel in x.unbind(2):  # a static dimension: every example has each channel
        n += 1
        total = total + channel.sum(1) + 1.0
    return total * n


def test_a_loop_over_a_static_dimension_takes_every_step_of_an_empty_example(dtype):
    # The channels of an example of no time steps have all-false masks: they were
    # skipped as steps it does not have (a user trial; the loop runs each).
    xs, xb = sequences([0, 2, 1], dtype=dtype)
    assert_batch_equals_loop(per_channel, (xs, xb))
