"""A module's buffer updated and read in one call, compiled as eager runs it: updated in
place (a counter ``self.steps += 1``, a running statistic) it is an input the graph
changes, read after the change; assigned a new tensor (``self.steps = self.steps + 1``) it
was silently wrong: ``functional_call`` put the old buffer back after the capture, and
the graph read the new value without keeping it, so every call started from the old
buffer.  That call is refused now (eager, with a warning naming the buffer)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import CaptureError

BACKEND = "aot_eager"


def _batch(dtype=torch.float64):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (3, 0, 5, 1)]
    return MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


class Counter(nn.Module):
    """Counts its calls in a buffer and reads the count in the same call."""

    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("steps", torch.zeros((), dtype=dtype))

    def forward(self, x):
        self.steps += 1
        return x.sum(1) * self.steps


class Interleaved(nn.Module):
    """Updates a buffer twice in one call, reading it before, between and after."""

    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("state", torch.ones(3, dtype=dtype))
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 3, dtype=dtype))

    def forward(self, x, t):
        before = x.sum(1) * self.state
        self.state.mul_(0.5).add_(t, alpha=0.5)  # a running statistic of t
        middle = x.sum(1) * self.weight + self.state
        self.state.add_(1.0)
        return before + middle + self.state


class Rebound(Counter):
    def forward(self, x):
        self.steps = self.steps + 1
        return x.sum(1) * self.steps


def _run_both(model_class, dtype, calls, *extra):
    xb = _batch(dtype)
    eager, compiled_model = model_class(dtype), model_class(dtype)
    compiled = matchbox.compile(compiled_model, backend=BACKEND)
    for step in range(calls):
        args = [t * (step + 1) for t in extra]
        expected, got = eager(xb, *args), compiled(xb, *args)
        for value, example in zip(got.examples(), expected.examples()):
            torch.testing.assert_close(value, example)
        for (name, mine), (_, theirs) in zip(compiled_model.named_buffers(),
                                             eager.named_buffers()):
            torch.testing.assert_close(mine, theirs, msg=name)
        if any(p.requires_grad for p in eager.parameters()):
            grads = torch.autograd.grad(sum(e.sum() for e in got.examples()),
                                        list(compiled_model.parameters()))
            expected_grads = torch.autograd.grad(sum(e.sum() for e in expected.examples()),
                                                 list(eager.parameters()))
            for g, e in zip(grads, expected_grads):
                torch.testing.assert_close(g, e)
    return compiled


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_buffer_updated_in_place_and_read_in_one_call_is_captured(dtype):
    compiled = _run_both(Counter, dtype, 3)
    assert [s.eager_reason for s in compiled.specializations] == [None]
    compiled = _run_both(Interleaved, dtype, 3, torch.tensor([1.0, -2.0, 4.0], dtype=dtype))
    assert [s.eager_reason for s in compiled.specializations] == [None]


REBOUND = (r"runs batch\(B=4, <=8, 3\) eagerly, as it cannot be captured as one graph: "
           r"NotCapturable: the call assigns the buffer self\.steps a new tensor \(self\.steps "
           r"= \.\.\.\): a graph replays the call's tensor ops, not the assignment, so every "
           r"call would start from the old buffer again; update it in place \(self\.steps "
           r"\+= \.\.\., self\.steps\.copy_\(\.\.\.\)\)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_buffer_assigned_a_new_tensor_runs_eagerly(dtype):
    with pytest.warns(UserWarning, match=REBOUND):
        compiled = _run_both(Rebound, dtype, 3)
    assert compiled.specializations[0].eager_reason.startswith("NotCapturable: the call assigns")
    model = Rebound(dtype)
    with pytest.raises(CaptureError, match="assigns the buffer self.steps a new tensor"):
        matchbox.compile(model, backend=BACKEND, fallback="raise")(_batch(dtype))
    assert model.steps.item() == 0.0  # the capture changed nothing


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Counter(torch.float64)
        self.scale = nn.Parameter(torch.ones((), dtype=torch.float64))

    def forward(self, x):
        self.scale = nn.Parameter(self.scale * 2)
        return self.inner(x)


def test_a_submodules_parameter_assigned_is_named():
    with pytest.warns(UserWarning, match=r"the call assigns the parameter self\.scale a new "
                                         r"tensor .* so every call would start from the old "
                                         r"parameter again"):
        matchbox.compile(Outer(), backend=BACKEND)(_batch())

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.counter = Rebound(torch.float64)

        def forward(self, x):
            return self.counter(x)

    with pytest.warns(UserWarning, match=r"assigns the buffer counter\.steps a new tensor "
                                         r"\(counter\.steps = \.\.\.\)"):
        matchbox.compile(Wrapper(), backend=BACKEND)(_batch())
