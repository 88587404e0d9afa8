"""``x[:, j] = v`` in ``@matchbox.batch`` code, ``j`` one int per example (a pointer network
masking the candidate it chose, a counter of each example's own steps, ``len`` of its own
list, ``int(k)``), under per-example conditions too: values and gradients equal the loop
over examples, and an index out of range raises the loop's error, with host reads on (at
the op) and off (the accelerator's path: when the call ends)."""

from __future__ import annotations

import re

import pytest
import torch
from control_cases import assert_batch_equals_loop, compiled_for_batches, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads


def candidates(lengths, dtype):
    """Scores ``(1, n)`` per example, each its own number of candidates, NaN padding."""
    xs = [torch.randn(1, n, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True,), padding_value=float("nan"))


@matchbox.batch
def pointer_decode(scores):
    avail = scores * 1
    total = scores.sum(1) * 0
    for _ in range(3):
        j = avail.argmax(-1)  # each example's own choice: a (1,) index
        best = avail[:, j]
        if best.sum() > -1:  # only some examples take it, at each step
            avail[:, j] = -1e9
            total = total + best.sum(1) * 2
        else:
            avail[:, int(j)] = avail[:, int(j)] * 0.5 - 1e9  # a Python int
    return avail, total


@pytest.mark.parametrize("lengths", [[3, 1, 4, 2], [1], [5]])
def test_a_pointer_networks_masked_choices_equal_the_loop(lengths, dtype):
    assert_batch_equals_loop(pointer_decode, candidates(lengths, dtype))


@matchbox.batch
def bumped(scores):
    avail = scores * 1
    j = scores.argmax(-1)
    if scores.sum() > 0:
        avail[:, j] += scores.sum(1, keepdim=True)  # x[:, j] a copy in the loop too
    else:
        k = int(j)
        avail[:, k] -= scores.sum()  # the loop's int: a view of avail, written through
        row = avail[:, -1]
        row.add_(1.0)
    return avail


@pytest.mark.parametrize("lengths", [[3, 1, 4, 2, 3, 2], [1], [5]])
def test_an_augmented_write_at_a_chosen_candidate_equals_the_loop(lengths, dtype):
    assert_batch_equals_loop(bumped, candidates(lengths, dtype))


@matchbox.batch
def written_at_own_steps(x):
    y = x * 1
    items = []
    for i, xt in enumerate(x.unbind(1)):  # i: each example's own step
        if xt.sum() > 0:
            y[:, i] = xt * 2  # a batch value: gradient into x through it
            items.append(xt)
        if len(items) > 0:
            y[:, len(items) - 1, 1:] = xt[:, :2].exp()
        y[:, -1 - i] = y[:, -1 - i] + 1  # counted from each example's own end
    return y


@pytest.mark.parametrize("lengths", [[3, 1, 0, 2, 4], [1], [0, 2], [4]])
def test_writes_at_per_example_counters_equal_the_loop(lengths, dtype):
    assert_batch_equals_loop(written_at_own_steps, sequences(lengths, dtype=dtype))


@matchbox.batch
def written_past_the_end(x, k, go):
    y = x * 1
    if go > 0:
        y[:, int(k)] = 0.0
    reached.append("after the write")
    return y


reached: list[str] = []


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_write_past_an_examples_end_raises_the_loops_error(reads):
    reached.clear()
    xs, xb = sequences([3, 0, 2])
    kb = MaskedBatch.fromlist([torch.tensor([k]) for k in (1, 0, -2)], ())
    message = re.escape("Tensor.__setitem__: index 0 is out of range for example 1, which has "
                        "size 0 in dimension 1")
    go = MaskedBatch.fromlist([torch.tensor([1.0])] * 3, ())
    with host_reads(reads), pytest.raises(IndexError, match=f"^{message}$"):
        written_past_the_end(xb, kb, go)
    # Host reads on: raised at the op. Off: the op went on, and the call raised at its end.
    assert reached == ([] if reads else ["after the write"])
    with pytest.raises(IndexError):
        xs[1][:, 0] = 0.0  # the loop's own error
    # An example that does not run the write is not checked.
    reached.clear()
    go = MaskedBatch.fromlist([torch.tensor([v]) for v in (1.0, -1.0, 1.0)], ())
    with host_reads(reads):
        ok = written_past_the_end(xb, kb, go)
    assert reached == ["after the write"]
    expected = [xs[0].index_fill(1, torch.tensor(1), 0.0), xs[1], xs[2].index_fill(1, torch.tensor(0), 0.0)]
    for got, want in zip(ok.examples(), expected):
        torch.testing.assert_close(got, want)


def test_per_example_writes_compiled_equal_the_loop(dtype):
    # Captured as a graph (no eager fallback); its range check is the graph's flag.
    for f, pair in ((pointer_decode, candidates([3, 1, 4, 2], dtype)),
                    (bumped, candidates([3, 1, 4, 2, 3, 2], dtype)),
                    (written_at_own_steps, sequences([3, 1, 0, 2], dtype=dtype))):
        run = compiled_for_batches(f)
        assert_batch_equals_loop(run, pair)
        assert [s.eager_reason for s in run.compiled.specializations] == [None]
    run = compiled_for_batches(written_past_the_end)
    _, xb = sequences([3, 0, 2])
    kb = MaskedBatch.fromlist([torch.tensor([k]) for k in (1, 0, -2)], ())
    go = MaskedBatch.fromlist([torch.tensor([1.0])] * 3, ())
    with pytest.raises(IndexError, match="^Tensor.__setitem__: index 0 is out of range for "
                                         "example 1, which has size 0 in dimension 1$"):
        run(xb, kb, go)


@matchbox.batch
def aug_of_a_row(x, how):
    i = 0
    if x[:, 0, 0] > 0:
        i = 1
    t = x[:, i] if how == "row" else x[:, 1:][:, -1:]
    if x[:, 0, 1] > 0:
        t += 5.0  # a view of x in the loop: x changes too
    return x.sum(-1).sum(-1)


def test_an_augmented_assignment_to_a_row_read_per_example_reaches_the_batch_read(dtype):
    # Under a per-example condition @batch writes the row's running examples itself (not
    # through an in-place op): the write goes back into x too (before, silently not).
    xs = [torch.tensor([[[1.0, 2], [3, 4]]], dtype=dtype),
          torch.tensor([[[-1.0, 2], [3, 4]]], dtype=dtype),
          torch.tensor([[[1.0, -2], [3, 4]]], dtype=dtype)]
    assert_batch_equals_loop(lambda x: aug_of_a_row(x * 1, "row"),
                             (xs, MaskedBatch.fromlist(xs, (False, False))))


def test_an_augmented_assignment_to_a_copy_standing_for_a_view_is_refused():
    xs = [torch.tensor([[[1.0, 2], [3, 4]]]), torch.tensor([[[-1.0, 2], [3, 4]]])]
    xb = MaskedBatch.fromlist(xs, (True, False))
    with pytest.raises(NotImplementedError, match=r"^'t': the batch was indexed along a "
                                                  r"dynamic dimension at positions that differ"):
        aug_of_a_row(xb * 1, "tail")
