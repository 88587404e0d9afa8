"""``matchbox.compile(..., reuse=2.0)``: a call with no graph of its own runs on a graph
compiled for the same batch size and longer padded sizes when that costs at most
``reuse`` times its own work, padded to the graph's sizes; never on a graph for more
examples.  Against the loop, values and gradients (NaN padding, empty and one-long
examples, batch size one).  Also ``warmup=``: eager calls before compiling.

Reuse serves graphs of fixed sizes: these tests compile with ``dynamic=False`` (with
symbolic sizes, the default, one graph serves most of these calls by itself:
``test_compile_symbolic.py``).
"""

from __future__ import annotations

import pytest
import torch
from test_compile import BACKEND, Scores, assert_examples_close, batch_of, scores

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


def compile_fixed(*args, **kwargs):
    """``matchbox.compile`` with a graph per padded size and batch size."""
    return matchbox.compile(*args, dynamic=False, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shorter_batches_run_on_the_longer_graph_equal_to_the_loop(dtype):
    torch.manual_seed(0)
    model = Scores().to(dtype)
    # (reuse=16: any of these shorter batches of four runs on the first graph)
    compiled = compile_fixed(model, backend=BACKEND, reuse=16)
    calls = []

    def run(x):
        if isinstance(x, MaskedBatch):
            calls.append(tuple(x.data.shape[:2]))
            return compiled(x)
        return model(x)

    for lengths in ([9, 3, 16, 1], [12, 1, 4, 2], [5, 1, 1, 1], [16, 16, 2, 7]):  # (amax)
        examples = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
        xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
        mb_assert(run, [examples], [xb], len(examples), params=list(model.parameters()))
    [spec] = compiled.specializations  # batch 4, padded 16: every call ran on it
    shorter = sum(1 for _, length in calls if length <= 8)  # the bucket of 8, not 16
    assert (spec.calls, spec.padded_calls) == (len(calls), shorter)
    assert spec.padded_calls > 0


def test_a_graph_more_than_reuse_times_the_work_is_not_used():
    w = torch.randn(3, 3)
    compiled = compile_fixed(scores, backend=BACKEND)
    for lengths in ([32, 2], [20, 3], [9, 1], [5, 2], [16, 16], [3, 3]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [scores(x, w) for x in examples])
    # Padded 32 serves 24 and 16 (at most twice their work) but not 8, which compiles its
    # own and then serves 8 again.
    assert [s.summary for s in compiled.specializations] == [
        "batch(B=2, <=32, 3), tensor(3, 3)", "batch(B=2, <=8, 3), tensor(3, 3)"]
    assert [s.padded_calls for s in compiled.specializations] == [3, 0]


def test_reuse_none_compiles_every_size():
    w = torch.randn(3, 3)
    compiled = compile_fixed(scores, backend=BACKEND, reuse=None)
    for lengths in ([16, 4], [9, 2], [3, 1]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [scores(x, w) for x in examples])
    assert len(compiled.specializations) == 2  # 16 and 8: the bucket, not reuse


def test_a_smaller_batch_is_never_run_on_a_graph_for_more_examples():
    # A user trial: a model reading the batch size (x.batch_size, a constant in the graph)
    # or mixing the examples (batch_mean into a per-example result) gave wrong values when
    # a batch of three ran on a graph for four, filled with copies of its first example.
    def scaled(x, w):
        per = (x @ w).tanh().sum(1).sum(-1)
        return per / x.batch_size + matchbox.batch_mean(per)

    w = torch.randn(3, 3)
    compiled = compile_fixed(scaled, backend=BACKEND, reuse=100)
    for lengths in ([5, 2, 7, 1], [5, 2, 7], [6, 2]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), list(scaled(xb, w).examples()))
    assert [s.summary.split(",")[0] for s in compiled.specializations] == [
        "batch(B=4", "batch(B=3", "batch(B=2"]
    assert [s.padded_calls for s in compiled.specializations] == [0, 0, 0]


def test_a_failing_check_in_a_padded_call_raises_the_eager_error_naming_its_example():
    def third(x):
        return x[:, 2] * 2

    compiled = compile_fixed(third, backend=BACKEND)
    _, xb = batch_of([14, 3, 5], requires_grad=False)
    compiled(xb)
    _, short = batch_of([4, 2, 5], requires_grad=False)
    with pytest.raises(IndexError, match="index 2 is out of range for example 1, which has "
                                         "size 2 in dynamic dimension 1"):
        compiled(short)
    assert [s.padded_calls for s in compiled.specializations] == [1]


def test_bad_reuse_is_refused():
    with pytest.raises(ValueError, match=r"reuse must be a number >= 1 \(run a call on a "
                                         r"graph compiled for longer padded sizes"):
        compile_fixed(scores, reuse=0.5)


def test_warmup_runs_a_specialisation_eagerly_until_its_calls_cost_a_compile():
    # A budget of a nanosecond: the first call of each size runs eagerly (no graph), the
    # second compiles; an effectively endless budget never compiles.  Each call's value
    # is the loop's either way.
    w = torch.randn(3, 3)
    soon = compile_fixed(scores, backend=BACKEND, warmup=1e-9, reuse=None)
    never = compile_fixed(scores, backend=BACKEND, warmup=1e9)
    for lengths in ([5, 2], [5, 3], [12, 1], [12, 4], [5, 1]):
        examples, xb = batch_of(lengths, requires_grad=False)
        loop = [scores(x, w) for x in examples]
        for compiled in (soon, never):
            assert_examples_close(compiled(xb, w), loop)
    assert [(s.summary, s.warmup_calls, s.calls) for s in soon.specializations] == [
        ("batch(B=2, <=8, 3), tensor(3, 3)", 1, 2), ("batch(B=2, <=16, 3), tensor(3, 3)", 1, 1)]
    assert never.specializations == []


def test_warmup_auto_takes_the_models_compile_time_as_its_budget(monkeypatch):
    from matchbox.compiler import reuse

    monkeypatch.setattr(reuse, "FIRST_COMPILE_SECONDS", 0.0)  # the first compiles at once
    w = torch.randn(3, 3)
    compiled = compile_fixed(scores, backend=BACKEND, warmup="auto", reuse=None)
    for lengths in ([5, 2], [12, 1]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [scores(x, w) for x in examples])
    # The second size's budget is the first's compile seconds: its first call is eager.
    [first] = compiled.specializations
    assert first.warmup_calls == 0 and first.compile_seconds > 0


def test_bad_warmup_is_refused():
    with pytest.raises(ValueError, match=r"warmup must be None \(compile at a specialisation's "
                                         r"first call\), 'auto' or a number of seconds"):
        compile_fixed(scores, warmup="soon")
