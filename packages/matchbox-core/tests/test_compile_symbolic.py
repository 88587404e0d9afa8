"""``matchbox.compile(..., dynamic=True)`` (the default): a graph is captured with its
batch size and padded sizes symbolic, and serves every call whose sizes pass the guards
its capture recorded (``matchbox/compiler/symbolic.py``).  Against the loop, values and
gradients (NaN padding, empty and one-long examples); the number of graphs pinned; code
that decides from a size gets a graph per decision, never a graph for another size.
"""

from __future__ import annotations

import collections

import pytest
import torch
from test_compile import (
    BACKEND,
    assert_examples_close,
    assert_values_and_gradients_equal_the_loop,
    batch_of,
)
from torch.fx.experimental import _config as fx_config

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import symbolic

pytestmark = pytest.mark.skipif(not symbolic.available(),
                                reason="this torch cannot capture with symbolic sizes")


def mixed(x, w):
    """Per example: weights over the sequence, mixed back into it (no size read)."""
    h = (x @ w).tanh()
    scores = h.sum(-1).exp()
    weights = scores / scores.sum(1, keepdim=True)
    return (h * weights.unsqueeze(-1)).sum(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_graph_serves_every_batch_size_and_length_equal_to_the_loop(dtype):
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    compiled = matchbox.compile(mixed, backend=BACKEND)
    for lengths in ([3, 1, 4], [9, 0, 2, 13, 1], [30, 7], [5, 5, 5, 5, 5, 5, 1]):
        examples, xb = batch_of(lengths, dtype=dtype)
        loop = [mixed(x, w) for x in examples]
        assert_values_and_gradients_equal_the_loop(compiled(xb, w), loop, examples, xb, w)
    [spec] = compiled.specializations
    assert spec.calls == 4
    assert spec.summary == "batch(B=*, <=*, 3), tensor(3, 3)"
    assert spec.sizes is not None and spec.fixed_sizes_because is None


@pytest.mark.skipif(not hasattr(fx_config, "use_duck_shape"),
                    reason="this torch (2.3) has no setting for Dynamo's duck sizing: it "
                           "compiles such a graph again for new sizes (correct, slower)")
def test_torch_compile_compiles_a_symbolic_graph_once_for_every_size_it_serves():
    # The first call's batch size, padded length and feature size are all 8: TorchDynamo's
    # duck sizing made them one symbol, fixed by the weight's static 8, and every other
    # size compiled again inside the one graph Matchbox counted.
    from torch._dynamo.utils import counters

    w = torch.randn(8, 8)
    compiled = matchbox.compile(mixed, backend=BACKEND)
    before = counters["stats"]["unique_graphs"]
    for lengths in ([8, 1, 2, 3, 4, 5, 6, 7], [13, 2, 9], [3, 3, 3, 3, 1]):
        examples, xb = batch_of(lengths, size=8, requires_grad=False)
        assert_examples_close(compiled(xb, w), [mixed(x, w) for x in examples])
    assert len(compiled.specializations) == 1
    assert counters["stats"]["unique_graphs"] - before == 1


def test_a_batch_of_one_gets_its_own_graph():
    # PyTorch's shape environment fixes sizes 0 and 1: a graph for two or more examples
    # does not serve one.
    w = torch.randn(3, 3, requires_grad=True)
    compiled = matchbox.compile(mixed, backend=BACKEND)
    for lengths in ([3, 1], [4], [2, 6, 1], [7]):
        examples, xb = batch_of(lengths)
        loop = [mixed(x, w) for x in examples]
        assert_values_and_gradients_equal_the_loop(compiled(xb, w), loop, examples, xb, w)
    assert [(s.summary.split(",")[0], s.calls) for s in compiled.specializations] == [
        ("batch(B=*", 2), ("batch(B=1", 2)]


def halved_when_large(x, w):
    # A decision from the batch size and one from the padded length: each is a guard.
    # (x.batch_size: x.size(0) as a number is 1, as in each example; x.data.size(1): the
    # padded length, which x.maxsize(1) refuses to be as a number.)
    h = (x @ w).tanh()
    if x.batch_size > 3:
        h = h * 0.5
    if x.data.size(1) > 8:
        h = h + 1.0
    return h.sum(1)


def test_a_size_the_code_decides_from_is_fixed_by_a_guard():
    w = torch.randn(3, 3)
    compiled = matchbox.compile(halved_when_large, backend=BACKEND)
    eager_of = {}
    for lengths in ([3, 1, 4, 2], [2, 6], [5, 1, 2, 2, 3], [13, 2], [12, 1, 1, 1], [4, 4, 4]):
        _, xb = batch_of(lengths, requires_grad=False)
        eager_of[len(lengths)] = halved_when_large(xb, w)
        assert_examples_close(compiled(xb, w), list(halved_when_large(xb, w).examples()))
    # (batch > 3, length <= 8), (<= 3, <= 8), (<= 3, > 8), (> 3, > 8): four graphs, each
    # serving the calls on its side of both guards.
    assert [s.calls for s in compiled.specializations] == [2, 2, 1, 1]


def test_warmup_counts_the_eager_calls_of_every_size_the_graph_to_come_will_serve():
    # A budget of a nanosecond: the first call runs eagerly, and the second, at another
    # batch size and padded length, compiles the one graph that serves both sizes (its
    # warm-up was the first size's call: the graph serves that size too).  Counted size
    # by size, the second call would have run eagerly as well.
    w = torch.randn(3, 3)
    compiled = matchbox.compile(mixed, backend=BACKEND, warmup=1e-9)
    for lengths in ([3, 1, 4], [9, 0, 2, 13, 1], [3, 1, 4]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [mixed(x, w) for x in examples])
    [spec] = compiled.specializations
    assert (spec.warmup_calls, spec.calls, spec.sizes is not None) == (1, 2, True)


def test_warmup_counts_size_by_size_once_a_graph_has_fixed_a_size():
    # halved_when_large's first graph holds for batches of more than three only: a call
    # of three examples is a size that graph does not serve, and warms up on its own.
    w = torch.randn(3, 3)
    compiled = matchbox.compile(halved_when_large, backend=BACKEND, warmup=1e-9)
    for lengths in ([3, 1, 4, 2], [2, 6, 1, 1], [3, 1, 4], [2, 6, 1], [4, 2, 2]):
        _, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), list(halved_when_large(xb, w).examples()))
    assert [(s.warmup_calls, s.calls) for s in compiled.specializations] == [(1, 1), (1, 2)]


def scaled_and_mixed(x, w):
    # Reads the batch size and mixes the examples: a graph for another batch size would
    # be wrong for both (a user trial found that with padded batches, see reuse).
    per = (x @ w).tanh().sum(1).sum(-1)
    return per / x.batch_size + matchbox.batch_mean(per)


def test_one_graph_for_every_batch_size_reads_each_calls_own_batch_size():
    w = torch.randn(3, 3)
    compiled = matchbox.compile(scaled_and_mixed, backend=BACKEND)
    for lengths in ([5, 2, 7, 1], [5, 2, 7], [6, 2]):
        _, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), list(scaled_and_mixed(xb, w).examples()))
    [spec] = compiled.specializations
    assert spec.summary.startswith("batch(B=*")


def test_a_failing_check_names_its_example_from_a_graph_for_another_size():
    compiled = matchbox.compile(lambda x: x[:, 2] * 2, backend=BACKEND)
    _, xb = batch_of([14, 3, 5], requires_grad=False)
    compiled(xb)
    _, short = batch_of([4, 2, 5, 6], requires_grad=False)
    with pytest.raises(IndexError, match="index 2 is out of range for example 1, which has "
                                         "size 2 in dynamic dimension 1"):
        compiled(short)
    assert len(compiled.specializations) == 1


def test_dynamic_false_compiles_a_graph_per_batch_size():
    w = torch.randn(3, 3)
    compiled = matchbox.compile(mixed, backend=BACKEND, dynamic=False)
    for lengths in ([3, 1, 4], [2, 6], [3, 1, 4]):
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [mixed(x, w) for x in examples])
    assert [s.summary for s in compiled.specializations] == [
        "batch(B=3, <=8, 3), tensor(3, 3)", "batch(B=2, <=8, 3), tensor(3, 3)"]
    assert all(s.sizes is None for s in compiled.specializations)


# A deque, not a list: a global list of plain values is part of a graph's key
# (compiler/state.py, plain_value), and this one grows at every trace, so each call would
# be keyed anew and never reuse the earlier call's finding.
TRACED: collections.deque = collections.deque()


def by_a_quotient_of_the_batch_size(x):
    TRACED.append(x.batch_size)
    quotient, _ = divmod(12, x.batch_size)  # divmod refuses a symbolic size
    return x * quotient


def test_code_that_cannot_take_a_symbolic_size_is_captured_with_its_own_sizes():
    TRACED.clear()
    compiled = matchbox.compile(by_a_quotient_of_the_batch_size, backend=BACKEND,
                                fallback="raise")
    for lengths in ([3, 1, 4], [2, 6]):
        _, xb = batch_of(lengths, requires_grad=False)
        expected = by_a_quotient_of_the_batch_size(xb)
        assert_examples_close(compiled(xb), list(expected.examples()))
    specs = compiled.specializations
    assert [s.summary.split(",")[0] for s in specs] == ["batch(B=3", "batch(B=2"]
    assert all(s.sizes is None for s in specs)
    assert "divmod" in specs[0].fixed_sizes_because
    # The later graph says why too (it is not tried with symbolic sizes again).
    assert specs[1].fixed_sizes_because.startswith("as for an earlier call of these arguments")
    assert "divmod" in specs[1].fixed_sizes_because
    # Captured with symbolic sizes once, then with each call's own sizes only (eager calls
    # for the expected values, a failed and a fixed capture, a fixed capture):
    assert len(TRACED) == 2 + 2 + 1


def test_two_dynamic_dimensions_and_a_last_smaller_batch_share_one_graph():
    # The batch of a training run's last step is smaller: it must not compile again.
    compiled = matchbox.compile(lambda q, k: (q @ k.transpose(1, 2)).tanh().sum(-1),
                                backend=BACKEND)
    for batch_size in (6, 6, 4):
        lengths = torch.randint(1, 9, (batch_size, 2)).tolist()
        examples = [torch.randn(1, n, 4) for n, _ in lengths]
        keys = [torch.randn(1, m, 4) for _, m in lengths]
        q = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
        k = MaskedBatch.fromlist(keys, (True, False), padding_value=float("nan"))
        loop = [(a @ b.transpose(1, 2)).tanh().sum(-1) for a, b in zip(examples, keys)]
        assert_examples_close(compiled(q, k), loop)
    [spec] = compiled.specializations
    assert spec.calls == 3


def positions_to_the_padded_size(x):
    size = x.maxsize(1)  # a symbol while captured: a size, as eagerly
    return (x + torch.arange(20., dtype=x.dtype)[:size].unsqueeze(1)).sum(1) + x[:, :size].sum(1)


def mean_over_the_padded_size(x):
    return x.sum(1) / x.maxsize(1)


def test_the_symbolic_padded_size_is_a_size_in_one_graph():
    compiled = matchbox.compile(positions_to_the_padded_size, backend=BACKEND)
    for lengths in ([3, 1, 0, 5], [2, 7], [4, 4, 1]):
        _, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb),
                              list(positions_to_the_padded_size(xb).examples()))
    assert [s.calls for s in compiled.specializations] == [3]


def test_the_symbolic_padded_size_as_a_number_is_refused():
    _, xb = batch_of([3, 1, 5], requires_grad=False)
    with pytest.raises(TypeError, match=r"x\.maxsize\(1\) is the padded size of dimension 1"):
        matchbox.compile(mean_over_the_padded_size, backend=BACKEND)(xb)
