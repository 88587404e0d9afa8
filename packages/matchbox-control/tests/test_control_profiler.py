"""torch.profiler traces label @batch's own work: each region run under an execution mask of
its own (a branch some examples take, a loop iteration) is a ``matchbox.batch.step`` range,
with the ops it runs inside, and each merge of a variable after one is ``matchbox.batch.merge``."""

from __future__ import annotations

import torch
from control_cases import assert_oracle, scalars
from torch.profiler import ProfilerActivity, profile

import matchbox


@matchbox.batch
def collatz_steps(x):
    n = x * 0
    while x > 1:
        if x % 2 == 0:
            x = x / 2
        else:
            x = 3 * x + 1
        n = n + 1
    return n


def test_masked_regions_and_merges_are_labelled_and_the_result_unchanged():
    _, batch = scalars([1, 6, 3])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = collatz_steps(batch)
    events = [e for e in prof.events() if e.name.startswith("matchbox.batch.")]
    names = {e.name for e in events}
    assert names == {"matchbox.batch.step", "matchbox.batch.merge"}
    steps = [e for e in events if e.name == "matchbox.batch.step"]
    # A step holds the labelled ops of the user's code (x % 2, 3 * x + 1, ...).
    assert any(c.name == "matchbox.pointwise" for e in steps for c in e.cpu_children)
    assert [e.item() for e in result.examples()] == [0, 8, 7]
    assert_oracle(collatz_steps, [1, 6, 3], [0, 8, 7])


def test_without_a_profiler_no_range_is_opened(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a range opened while no profiler records")

    monkeypatch.setattr(torch.profiler, "record_function", refuse)
    assert_oracle(collatz_steps, [1, 6, 3], [0, 8, 7])
