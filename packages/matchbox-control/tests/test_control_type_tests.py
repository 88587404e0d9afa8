"""``torch.is_tensor``, ``isinstance(_, torch.Tensor)`` and ``type(_) is torch.Tensor``
are False for a batch: under ``@batch`` they warn, at the user's line, saying what to
write instead."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox.control import BatchTypeTestWarning


@matchbox.batch
def masked_if_tensor(x):
    s = x.sum(-1)
    mask = s > 0
    if torch.is_tensor(mask):
        s = s.masked_fill(mask, 0.0)
    return s


@matchbox.batch
def masked_if_instance(x):
    s = x.sum(-1)
    mask = s > 0
    if isinstance(mask, (torch.Tensor, MaskedBatch)):  # the spelling the warning advises
        s = s.masked_fill(mask, 0.0)
    return s


def _line(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_is_tensor_of_a_batch_warns_at_the_users_line():
    _, xb = sequences([3, 1])
    with pytest.warns(BatchTypeTestWarning,
                      match=r"@batch: torch.is_tensor\(x\) is False for a MaskedBatch: .* test "
                            r"isinstance\(x, \(torch.Tensor, matchbox.MaskedBatch\)\) instead") \
            as record:
        masked_if_tensor(xb)
    assert record[0].filename == __file__
    assert record[0].lineno == _line(masked_if_tensor, "torch.is_tensor(mask)")


@pytest.mark.parametrize("test, message", [
    ("isinstance", r"isinstance\(x, torch.Tensor\) is False for a MaskedBatch"),
    ("isinstance_tuple", r"isinstance\(x, torch.Tensor\) is False for a MaskedBatch"),
    ("type_is", r"type\(x\) is torch.Tensor treats a MaskedBatch as a non-tensor"),
    ("type_eq", r"type\(x\) == torch.Tensor treats a MaskedBatch as a non-tensor"),
])
def test_each_type_test_warns(test, message):
    @matchbox.batch
    def f(x):
        if test == "isinstance":
            return isinstance(x, torch.Tensor)
        if test == "isinstance_tuple":
            return isinstance(x, (torch.Tensor, list))
        if test == "type_is":
            return type(x) is torch.Tensor
        return type(x) == torch.Tensor  # noqa: E721 - the spelling users write

    _, xb = sequences([2])
    with pytest.warns(BatchTypeTestWarning, match=message):
        assert f(xb) is False  # the answer stays Python's


def test_the_advised_spelling_is_per_example_right_and_silent(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchTypeTestWarning)
        assert_batch_equals_loop(masked_if_instance, sequences([3, 1, 0], dtype=dtype))


def test_plain_tensors_and_batch_aware_tests_do_not_warn():
    @matchbox.batch
    def plain(x):
        return torch.is_tensor(x), isinstance(x, torch.Tensor), type(x) is torch.Tensor

    @matchbox.batch
    def aware(x):
        return isinstance(x, MaskedBatch), type(x) is MaskedBatch, isinstance(x, list)

    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchTypeTestWarning)
        assert plain(torch.ones(2)) == (True, True, True)
        assert aware(sequences([1])[1]) == (True, True, False)


@matchbox.batch
def counts_then_asks_for_int(x, how):
    n = 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            n = n + 1
    out = x.sum(1)
    if how == "isinstance" and isinstance(n, int):
        out = out + 100
    if how == "type" and type(n) is int:
        out = out + 100
    return out + n


@pytest.mark.parametrize("how, what", [("isinstance", r"isinstance\(x, \.\.\.\)"),
                                       ("type", r"type\(x\) is \.\.\.")])
def test_a_number_test_of_a_per_example_number_is_refused(how, what):
    # The loop's n is an int for every example (True); the batch's is a MaskedBatch of every
    # example's count, which answered False for every example.
    _, xb = sequences([3, 0, 2])
    with pytest.raises(NotImplementedError,
                       match=rf"@batch: {what} of a value that is one number per example "
                             r"\(.*\): under @batch it is a MaskedBatch of every example's "
                             r"number"):
        counts_then_asks_for_int(xb, how)


@matchbox.batch
def asks_classes_of_a_batch_and_a_count(x):
    s = x.sum(1)
    out = s
    if isinstance(s, (torch.Tensor, MaskedBatch)) and not isinstance(s, int):
        out = out + 1  # a batch of rows: its number tests are Python's, as the loop's
    if isinstance(len(x.unbind(1)), str):
        out = out + 100  # a test for a class that is not a number is answered
    return out


def test_number_tests_of_batches_of_rows_and_tests_for_other_classes_equal_the_loop(dtype):
    assert_batch_equals_loop(asks_classes_of_a_batch_and_a_count,
                             sequences([3, 0, 2], dtype=dtype))
