"""Gradient state inside ``@batch`` code where examples differ in it.

``torch.inference_mode()`` around a merge: in the loop ``with torch.inference_mode(): if
c: y = h`` leaves ``y`` the tensor ``h`` itself, with its history, for the examples that
ran it; the batch's merge, run in inference mode, makes a tensor without history (its
gradient was lost, silently where ``y`` then met ``h`` in ``matchbox.functional.stack``):
refused, naming the variable.  Without history anywhere (evaluation) it equals the loop.

``h.requires_grad`` is one answer for the batch; what code does with it on a tensor
(``h.register_hook``, ``h.retain_grad``) is refused for a batch, naming the op."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox


@matchbox.batch
def merged_in_inference_mode(x, w):
    h = x.sum(1) * w
    with torch.inference_mode():
        if h[:, 0] > 0:
            y = h
        else:
            y = h * 2
    return matchbox.functional.stack([y, h], 1)


@matchbox.batch
def merged_in_no_grad(x, w):
    h = x.sum(1) * w
    with torch.no_grad():
        if h[:, 0] > 0:
            y = h
        else:
            y = h * 2
    return y + h


def test_a_merge_of_a_value_with_history_in_inference_mode_is_refused():
    _, xb = sequences([3, 2, 4, 1])
    w = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"@batch: 'y' is merged in "
                                                  r"torch\.inference_mode\(\) with a value that "
                                                  r"has gradient history.*torch\.no_grad\(\)"):
        merged_in_inference_mode(xb, w)


@pytest.mark.parametrize("lengths", [[3, 2, 4, 1], [0, 2], [1]])
def test_inference_mode_without_history_equals_the_loop(lengths):
    w = torch.tensor(1.5, dtype=torch.float64)
    assert_batch_equals_loop(merged_in_inference_mode, sequences(lengths), ([w] * len(lengths), w),
                             check_grad=False)


@pytest.mark.parametrize("lengths", [[3, 2, 4, 1], [2]])
def test_no_grad_keeps_the_history_instead(lengths):
    w = torch.tensor(1.5, dtype=torch.float64)
    assert_batch_equals_loop(merged_in_no_grad, sequences(lengths), ([w] * len(lengths), w))


@matchbox.batch
def hooked(x, w, how):
    h = x.sum(1)
    if h[:, 0] > 0:
        h = h * w        # history for these examples only, in the loop
    if h.requires_grad:  # one answer for the batch
        if how == "hook":
            h.register_hook(lambda g: g * 2)
        else:
            h.retain_grad()
    return h


@pytest.mark.parametrize("how, op", [("hook", "register_hook"), ("retain", "retain_grad")])
def test_what_code_does_on_requires_grad_is_refused_for_a_batch(how, op):
    _, xb = sequences([3, 2, 4, 1])
    w = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match=rf"Tensor\.{op} is not implemented for "
                                                  r"MaskedBatch"):
        hooked(xb, w, how)


@matchbox.batch
def parameter_chosen_in_inference_mode(x, w):
    with torch.inference_mode():
        if x[:, 0, 0] > 0:
            v = w
        else:
            v = w * 2
        out = x.sum(1) * v
    return out


def test_a_parameter_chosen_in_inference_mode_equals_the_loop():
    """A leaf (a parameter chosen per example in evaluation code) is not refused: the
    values are the loop's (a leaf has no history to keep but itself)."""
    w = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    xs, xb = sequences([3, 2, 4, 1])
    out = parameter_chosen_in_inference_mode(xb, w)
    for got, x in zip(out.examples(), xs):
        assert torch.equal(got, parameter_chosen_in_inference_mode(x, w))
