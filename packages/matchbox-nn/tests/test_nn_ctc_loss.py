"""ctc_loss / nn.CTCLoss on batches equal the per-example loop, values and gradients.

Per-example code runs CTC on one example's ``(1, T, C)`` scores as PyTorch takes a batch
of one: ``F.ctc_loss(x.log_softmax(2).transpose(0, 1), targets, input_lengths,
target_lengths)``.  On a batch the transpose is the time-major view, the targets a batch
of ``(1, S)`` class indices padded with garbage, and the lengths batches of one int per
example.  Scores are padded with NaN.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from matchbox import MaskedBatch
from matchbox._masking import EXECUTION_MASK
from matchbox.testing import mb_assert

NAN = float("nan")
C = 5  # classes, blank 0


def ctc_case(steps, labels, rng, dtype, *, shorter=False):
    """Scores ``(1, T, C)``, targets ``(1, S)`` (no blank), and lengths per example."""
    xs = [torch.randn(1, t, C, dtype=dtype) for t in steps]
    ts = [torch.tensor([[rng.randint(1, C - 1) for _ in range(s)]], dtype=torch.long)
          for s in labels]
    il = [torch.tensor([rng.randint(1, t) if shorter and t else t]) for t in steps]
    tl = [torch.tensor([rng.randint(0, s) if shorter else s]) for s in labels]
    batches = [MaskedBatch.fromlist(xs, (True, False), padding_value=NAN),
               MaskedBatch.fromlist(ts, (True,), padding_value=10**6),
               MaskedBatch.fromlist(il, ()), MaskedBatch.fromlist(tl, ())]
    return [xs, ts, il, tl], batches


def ctc(reduction, **options):
    return lambda x, t, il, tl: F.ctc_loss(x.log_softmax(2).transpose(0, 1), t, il, tl,
                                           reduction=reduction, **options)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("steps, labels", [
    ([6, 3, 9, 4], [2, 1, 3, 0]),   # an empty target included
    ([5, 5], [2, 2]),                # no padding
    ([7], [3]),                      # a batch of one
    ([4, 1, 6], [1, 1, 4]),          # an example of one time step
])
@pytest.mark.parametrize("shorter", [False, True], ids=["full-lengths", "shorter-lengths"])
def test_ctc_loss_matches_loop(reduction, steps, labels, shorter, dtype):
    rng = random.Random(f"{steps}{labels}{shorter}")
    loop, batches = ctc_case(steps, labels, rng, dtype, shorter=shorter)
    mb_assert(ctc(reduction, zero_infinity=True), loop, batches, len(steps))


def test_infinite_losses_are_the_loops_without_zero_infinity(dtype):
    # An example with more labels than time steps has an infinite loss, in the loop too.
    loop, batches = ctc_case([2, 6], [3, 2], random.Random(0), dtype)
    mb_assert(ctc("none"), loop, batches, 2, check_grad=False)


@given(st.lists(st.tuples(st.integers(1, 8), st.integers(0, 4)), min_size=1, max_size=5),
       st.sampled_from(["none", "sum", "mean"]), st.integers(0, 2**16),
       st.sampled_from([torch.float32, torch.float64]))
def test_ctc_loss_on_random_lengths_matches_loop(pairs, reduction, seed, dtype):
    steps = [t for t, _ in pairs]
    labels = [min(s, t) for t, s in pairs]
    loop, batches = ctc_case(steps, labels, random.Random(seed), dtype, shorter=True)
    mb_assert(ctc(reduction, zero_infinity=True), loop, batches, len(steps))


def test_ctc_loss_module_with_lengths_the_same_for_every_example(dtype):
    rng = random.Random(1)
    loop, batches = ctc_case([6, 6, 6], [2, 3, 1], rng, dtype)
    module = nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
    f = lambda x, t, tl: module(x.log_softmax(2).transpose(0, 1), t, torch.tensor([6]),  # noqa: E731
                                tl)
    mb_assert(f, [loop[0], loop[1], loop[3]], [batches[0], batches[1], batches[3]], 3)
    shared = torch.tensor([[1, 2]])
    g = lambda x: F.ctc_loss(x.log_softmax(2).transpose(0, 1), shared, (6,), (2,))  # noqa: E731
    mb_assert(g, [loop[0]], [batches[0]], 3)


def test_per_example_lengths_from_size_as_tensor_match_loop(dtype):
    # The lengths computed per example from the data, as per-example code would.
    rng = random.Random(2)
    loop, batches = ctc_case([5, 2, 7], [2, 1, 3], rng, dtype)
    f = lambda x, t: F.ctc_loss(x.log_softmax(2).transpose(0, 1), t,  # noqa: E731
                                x.size_as_tensor(1).view(1), t.size_as_tensor(1).view(1),
                                reduction="sum")
    mb_assert(f, loop[:2], batches[:2], 3)


def test_ctc_loss_errors_name_the_op_and_the_example():
    loop, (x, t, il, tl) = ctc_case([3, 2], [1, 2], random.Random(3), torch.float64)
    lp = x.log_softmax(2)
    with pytest.raises(TypeError, match=r"^torch\.nn\.functional\.ctc_loss: log_probs must be "
                                        r"each example's \(T, 1, C\) log-probabilities"):
        F.ctc_loss(lp, t, il, tl)
    too_long = MaskedBatch.fromlist([torch.tensor([3]), torch.tensor([3])], ())
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.ctc_loss: example 1 has 2 "
                                         r"time steps but a length of 3"):
        F.ctc_loss(lp.transpose(0, 1), t, too_long, tl)
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.ctc_loss: example 0 has 1 "
                                         r"targets but a length of 2"):
        F.ctc_loss(lp.transpose(0, 1), t, il, 2)
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.ctc_loss: a plain "
                                         r"input_lengths is the same for every example and "
                                         r"must be one value"):
        F.ctc_loss(lp.transpose(0, 1), t, torch.tensor([3, 2]), tl)
    empty = MaskedBatch.fromlist([torch.randn(1, 3, C), torch.randn(1, 0, C)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.ctc_loss: example 1 has no "
                                         r"time steps"):
        F.ctc_loss(empty.transpose(0, 1), t, MaskedBatch(torch.tensor([3, 0]), None, ()), 0)
    token = EXECUTION_MASK.set(torch.tensor([True, False]))
    try:  # example 1 does not run this code: nothing to refuse for it
        F.ctc_loss(empty.log_softmax(2).transpose(0, 1), t,
                   MaskedBatch(torch.tensor([3, 0]), None, ()), 0)
    finally:
        EXECUTION_MASK.reset(token)
    with pytest.raises(ValueError, match=r"^torch\.nn\.functional\.ctc_loss: reduction='max'"):
        F.ctc_loss(lp.transpose(0, 1), t, il, tl, reduction="max")
