"""torch.profiler traces label Matchbox's work: one range per op, named after its family
(``matchbox.pointwise``, ``matchbox.reduction``, ...), around the aten ops it runs.  Without a
profiler the dispatch does no labelling work at all."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from matchbox import MaskedBatch, _dispatch


def _batch():
    xs = [torch.randn(1, n, 3) for n in (2, 4, 1)]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def _ranges(run):
    """The matchbox ranges a profile of ``run()`` holds: [(name, [child op names])]; and
    ``run()``'s result."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = run()
    return [(e.name, [c.name for c in e.cpu_children]) for e in prof.events()
            if e.name.startswith("matchbox.")], result


@pytest.mark.parametrize("run, label, aten", [
    (lambda xb: xb.tanh(), "matchbox.pointwise", "aten::tanh"),  # a generated fast method
    (lambda xb: torch.tanh(xb), "matchbox.pointwise", "aten::tanh"),  # __torch_function__
    (lambda xb: xb * xb, "matchbox.pointwise", "aten::mul"),
    (lambda xb: xb.add_(1), "matchbox.pointwise", "aten::add_"),  # an in-place method
    (lambda xb: xb.sum(1), "matchbox.reduction", "aten::sum"),
    (lambda xb: xb.transpose(1, 2), "matchbox.shape", "aten::transpose"),
], ids=["method", "torch function", "operator", "in-place", "reduction", "shape"])
def test_each_op_is_one_range_named_after_its_family_around_its_aten_ops(run, label, aten):
    xs, xb = _batch()
    ranges, result = _ranges(lambda: run(xb))
    assert [name for name, _ in ranges] == [label]
    assert aten in ranges[0][1]
    # The same result as without a profiler, example by example.
    for x, got in zip(xs, result.examples()):
        torch.testing.assert_close(got, run(x.clone()))


def test_without_a_profiler_no_label_is_made(monkeypatch):
    def refuse(*args):
        raise AssertionError("labelled while no profiler records")

    monkeypatch.setattr(_dispatch, "labelled", refuse)  # what the dispatch calls
    _, xb = _batch()
    (torch.tanh(xb.tanh() + xb) * 2).transpose(1, 2).sum(2).add_(1)
