"""F.pad on batches (every mode, per example) and nn.Conv1d/Conv2d padding_mode, against the loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conv_oracle import batch, examples, loop_or_empty
from hypothesis import assume, given
from hypothesis import strategies as st
from torch_features import PAD_TAKES_EMPTY_DIMENSIONS, needs

from matchbox import _registry
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
MODES = ["constant", "reflect", "replicate", "circular"]


def pytorch_pads(x, pad, mode):
    """Whether PyTorch pads the example ``x`` alone with a defined result.

    PyTorch accepts a circular pad that wraps more than once around what a
    negative pad leaves and then returns uninitialised memory; the batch refuses it.
    """
    try:
        F.pad(x, pad, mode=mode)
    except RuntimeError:
        return False
    if mode == "circular":
        for k in range(len(pad) // 2):
            left, right = pad[2 * k], pad[2 * k + 1]
            kept = x.size(-1 - k) - max(-left, 0) - max(-right, 0)
            if min(left, right) < 0 and max(left, right) > kept:
                return False
    return True


@pytest.mark.parametrize("name", sorted(e.name for e in _registry.entries()
                                        if e.family == "padding"))
def test_every_registered_padding_op_equals_the_loop(name, dtype):
    assert name == "torch.nn.functional.pad", f"{name} has no case here"
    xs = examples([5, 0, 2, 9], 3, dtype)
    mb_assert(lambda x: F.pad(x, [2, 1], value=-1.0), [xs], [batch(xs, (False, True))], 4)


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=5),
       left=st.integers(-2, 3), right=st.integers(-2, 3), mode=st.sampled_from(MODES),
       value=st.sampled_from([None, 0.5]), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_pad_1d_equals_the_loop(lengths, left, right, mode, value, dtype, seed):
    xs = examples(lengths, 2, dtype, seed)
    assume(all(pytorch_pads(x, [left, right], mode) for x in xs))
    value = value if mode == "constant" else None
    mb_assert(lambda x: F.pad(x, [left, right], mode=mode, value=value), [xs],
              [batch(xs, (False, True))], len(xs))


@given(sides=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=4),
       pad=st.tuples(*[st.integers(-1, 2)] * 4), mode=st.sampled_from(MODES),
       dims=st.sampled_from([(False, True, True), (False, False, True), (False, True, False)]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_pad_2d_equals_the_loop(sides, pad, mode, dims, dtype, seed):
    sides = [tuple(s if d else sides[0][i] for i, (s, d) in enumerate(zip(side, dims[1:])))
             for side in sides]  # static dimensions have every example's size
    xs = examples(sides, 2, dtype, seed)
    assume(all(pytorch_pads(x, list(pad), mode) for x in xs))
    mb_assert(lambda x: F.pad(x, list(pad), mode=mode), [xs], [batch(xs, dims)], len(xs))


@needs(PAD_TAKES_EMPTY_DIMENSIONS, "pads an example that is empty in a dimension it does "
       "not pad (F.pad([0, 0, ...]) of a zero-length example)")
def test_pad_of_a_channel_dimension_and_static_padding(dtype):
    # Padding only static dimensions is PyTorch's pad on the data; the mask is kept.
    xs = examples([5, 0, 2], 3, dtype)
    mb_assert(lambda x: F.pad(x, [0, 0, 1, 2], value=3.0), [xs], [batch(xs, (False, True))], 3)


@given(lengths=st.lists(st.integers(3, 12), min_size=1, max_size=5),
       mode=st.sampled_from(["reflect", "replicate", "circular"]), padding=st.integers(0, 2),
       kernel=st.integers(1, 4), stride=st.integers(1, 2), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_conv1d_padding_modes_equal_the_loop(lengths, mode, padding, kernel, stride, dtype,
                                             seed):
    torch.manual_seed(seed)
    conv = torch.nn.Conv1d(2, 3, kernel, stride=stride, padding=padding,
                           padding_mode=mode).to(dtype)
    xs = examples(lengths, 2, dtype, seed)  # longer than the padding: PyTorch pads each
    mb_assert(loop_or_empty(conv), [xs], [batch(xs, (False, True))], len(xs),
              params=list(conv.parameters()))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv2d_padding_modes_equal_the_loop(mode, dtype):
    conv = torch.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode).to(dtype)
    xs = examples([(3, 4), (2, 3), (5, 6)], 2, dtype)
    mb_assert(conv, [xs], [batch(xs, (False, True, True))], 3, params=list(conv.parameters()))
    conv = torch.nn.Conv2d(2, 3, 3, padding="same", padding_mode=mode).to(dtype)
    mb_assert(conv, [xs], [batch(xs, (False, True, True))], 3, params=list(conv.parameters()))


# ---------------------------------------------------------------- errors


def test_an_example_pytorch_cannot_pad_makes_the_batch_raise_naming_it():
    xb = batch(examples([5, 1, 4], 2), (False, True))
    with pytest.raises(RuntimeError, match=r"torch.nn.functional.pad: example 1 \(size 1 in "
                                           r"dimension 2\) cannot be padded with \(2, 2\) in "
                                           r"mode 'reflect': .*Padding size should be less"):
        F.pad(xb, [2, 2], mode="reflect")
    conv = torch.nn.Conv1d(2, 3, 3, padding=2, padding_mode="reflect")
    with pytest.raises(RuntimeError, match=r"example 1 \(size 1 in dimension 2\) cannot be "
                                           r"padded"):
        conv(batch(examples([5, 1, 4], 2, torch.float32), (False, True)))


def test_circular_wrapping_after_a_crop_is_refused():
    xb = batch(examples([5, 3], 2), (False, True))
    with pytest.raises(ValueError, match=r"torch.nn.functional.pad: circular padding \(-2, 2\) "
                                         r"of dimension 2 wraps example 1 more than once after "
                                         r"cropping \(it keeps 1 positions\)"):
        F.pad(xb, [-2, 2], mode="circular")


def test_bad_pad_arguments_are_named():
    xb = batch(examples([5, 3], 2), (False, True))
    with pytest.raises(ValueError, match=r"pad \(1, 1, 0, 0, 1, 1\) must hold a \(left, right\) "
                                         r"pair for each of at most 2 trailing dimensions; "
                                         r"dimension 0 is each example's batch dimension"):
        F.pad(xb, [1, 1, 0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"pad \(1,\) must hold a \(left, right\) pair"):
        F.pad(xb, [1])
    with pytest.raises(ValueError, match=r"mode must be one of .*got 'wrap'"):
        F.pad(xb, [1, 1], mode="wrap")


def test_a_pad_width_of_one_value_per_example_is_refused_naming_it():
    # A width per example (a @batch int(), size_as_tensor) said only that int() of a batch
    # has no answer, naming neither the op nor the argument (a user trial).
    xb = batch(examples([5, 3], 2), (False, True))
    width = xb.size_as_tensor(2)
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.pad: a pad width is a "
                                                  r"batch \(one value per example\); per-example "
                                                  r"widths are not implemented"):
        F.pad(xb, (0, width))
