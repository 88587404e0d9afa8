"""F.pad along a dynamic dimension under ``matchbox.compile``: its per-example check is a
flag of the graph (``matchbox.extending.fails``), not a read of the sizes on the host.

``backend="fx"``: the captured graph as it is, run by PyTorch op by op.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conv_oracle import batch, examples

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


def compiled_for_batches(f):
    compiled = matchbox.compile(f, backend="fx", fallback="raise")

    def run(x):
        return compiled(x) if isinstance(x, MaskedBatch) else f(x)

    run.compiled = compiled
    return run


def padding(pad, mode):
    return lambda x: F.pad(x, pad, mode=mode).tanh()


# (mode, pad, lengths, whether some length could be refused: a check in the graph)
CASES = [
    ("constant", [2, 1], [5, 0, 1, 3], False),  # nothing can fail: no check at all
    ("constant", [-1, 2], [5, 1, 3, 1], True),  # a crop: an empty example is refused
    ("replicate", [2, 1], [5, 1, 3, 1], True),  # an empty example would be refused
    ("circular", [1, 1], [5, 1, 3], True),
    ("reflect", [1, 2], [5, 3, 4], True),
]


@pytest.mark.parametrize(("mode", "pad", "lengths", "checked"), CASES)
def test_pad_along_a_dynamic_dimension_is_captured_equal_to_the_loop(mode, pad, lengths,
                                                                      checked):
    f = padding(pad, mode)
    run = compiled_for_batches(f)
    xs = examples(lengths, 2)
    xb = batch(xs, (False, True))  # NaN padding
    mb_assert(run, [xs], [xb], len(xs))  # values and gradients
    got, expected = run(xb), f(xb)  # the graph's batch is padded further (its bucket)
    for a, b in zip(got.examples(), expected.examples(), strict=True):
        torch.testing.assert_close(a, b)
    specs = run.compiled.specializations
    assert [s.eager_reason for s in specs] == [None] * len(specs)
    assert {s.has_flags for s in specs} == {checked}


@pytest.mark.parametrize(("mode", "pad", "bad", "error", "message"), [
    ("reflect", [2, 2], [5, 2, 4, 3], RuntimeError,
     r"torch.nn.functional.pad: example 1 \(size 2 in dimension 2\) cannot be padded with "
     r"\(2, 2\) in mode 'reflect': .*Padding size should be less"),
    ("circular", [-2, 2], [5, 2, 4, 3], ValueError,
     r"torch.nn.functional.pad: circular padding \(-2, 2\) of dimension 2 wraps example 1 "
     r"more than once after cropping \(it keeps 0 positions\)"),
    ("constant", [-1, 2], [5, 0, 4, 1], RuntimeError,
     r"torch.nn.functional.pad: example 1 \(size 0 in dimension 2\) cannot be padded with "
     r"\(-1, 2\) in mode 'constant': narrow\(\): length must be non-negative"),
])
def test_an_example_pytorch_cannot_pad_raises_eagerly_and_compiled(mode, pad, bad, error,
                                                                   message):
    f = padding(pad, mode)
    run = compiled_for_batches(f)
    run(batch(examples([5, 6, 4], 2), (False, True)))  # captured: every example padded
    assert run.compiled.specializations[0].has_flags  # the check is in the graph
    bad_batch = batch(examples(bad, 2), (False, True))
    with pytest.raises(error, match=message):
        f(bad_batch)
    with pytest.raises(error, match=message):
        run(bad_batch)
    bad_batch = batch(examples([*bad[:-1], 6], 2), (False, True))  # the first graph's size
    with pytest.raises(error, match=message):
        run(bad_batch)


def test_the_shortest_refused_example_is_named():
    xb = batch(examples([5, 1, 0, 4], 2), (False, True))
    with pytest.raises(RuntimeError, match=r"example 2 \(size 0 in dimension 2\) cannot be "
                                           r"padded with \(1, 0\) in mode 'replicate'"):
        F.pad(xb, [1, 0], mode="replicate")


def reflect_the_long_ones(x):
    if x.size_as_tensor(2) > 2:
        x = F.pad(x, [2, 2], mode="reflect")
    return x.tanh()


def test_an_example_not_running_the_pad_is_not_checked():
    # Example 1 (size 1) does not take the branch: the loop never pads it, so the batch
    # must not refuse it (the check read every example's size, running or not).
    pytest.importorskip("matchbox.control", reason="@matchbox.batch is matchbox-control's "
                        "(not in the nn environment; the all environment runs this test)")
    reflect_the_long_ones = matchbox.batch(globals()["reflect_the_long_ones"])
    xs = examples([5, 1, 4], 2)
    run = compiled_for_batches(reflect_the_long_ones)
    for f in (reflect_the_long_ones, run):
        mb_assert(f, [xs], [batch(xs, (False, True))], len(xs))
    assert run.compiled.specializations[0].eager_reason is None


def test_a_pad_along_a_dynamic_dimension_serves_every_size_from_one_graph():
    # Sizes are symbolic (matchbox/compiler/symbolic.py): the check's probe of which sizes
    # PyTorch pads must neither fix the padded size nor see the capture's Python
    # dispatcher (whose constant-pad decomposition let a crop of an empty example through).
    f = padding([-1, 2], "constant")
    run = compiled_for_batches(f)
    for lengths in ([5, 1, 3, 1], [9, 2, 12], [4, 4, 4, 4, 4, 1]):
        xs = examples(lengths, 2)
        mb_assert(run, [xs], [batch(xs, (False, True))], len(xs))
    [spec] = run.compiled.specializations
    assert spec.summary == "batch(B=*, 2, <=*)" and spec.has_flags
    with pytest.raises(RuntimeError, match=r"example 1 \(size 0 in dimension 2\) cannot be "
                                           r"padded with \(-1, 2\) in mode 'constant'"):
        run(batch(examples([5, 0, 4], 2), (False, True)))
