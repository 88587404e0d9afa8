"""``and``/``or``/``not`` and chained comparisons on per-example conditions."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, assert_oracle, scalars
from hypothesis import given
from hypothesis import strategies as st
from op_counts import CountOps

import matchbox
from matchbox._masking import host_reads


@matchbox.batch
def in_band(x):
    if x > 0 and x < 3:
        x = x * 10
    return x


def test_oracle_and():
    assert_oracle(in_band, [-1, 1, 2, 3], [-1, 10, 20, 3])


@matchbox.batch
def out_of_band(x):
    if x < 0 or x > 2:
        x = x * 10
    return x


def test_oracle_or():
    assert_oracle(out_of_band, [-1, 1, 2, 3], [-10, 1, 2, 30])


@matchbox.batch
def negated(x):
    if not x > 1:
        x = x - 5
    return x


def test_oracle_not():
    assert_oracle(negated, [0, 1, 2, 3], [-5, -4, 2, 3])


@matchbox.batch
def chained(x):
    if 0 < x <= 2:
        x = x + 100
    return x


def test_oracle_chained_comparison():
    assert_oracle(chained, [0, 1, 2, 3], [0, 101, 102, 3])


@matchbox.batch
def mixed(x, flag):
    # a plain operand short-circuits as in Python; a batch one works per example
    if flag and (x > 1 or not x < -1) and -5 < x < 5:
        x = x * 2
    return x


@given(values=st.lists(st.floats(-8, 8, allow_nan=False), min_size=1, max_size=6),
       flag=st.booleans())
def test_mixed_plain_and_batch_operands(values, flag):
    xs, xb = scalars(values)
    assert_batch_equals_loop(mixed, (xs, xb), ([flag] * len(xs), flag))


def test_and_or_not_values_and_gradients(dtype):
    assert_batch_equals_loop(mixed, scalars([-6.0, -2.0, -0.5, 1.5, 4.0], dtype),
                             ([True] * 5, True))


def test_plain_operands_keep_python_values_and_short_circuit():
    calls = []

    def seen(value):
        calls.append(value)
        return value

    @matchbox.batch
    def f(a, b):
        return (a and seen(b)), (a or seen(b)), (not a), (1 < seen(a) < seen(3))

    assert f(0, "b") == (0, "b", True, False)
    assert calls == ["b", 0]  # `a and b` skipped b; the chain stopped after 1 < 0
    calls.clear()
    assert f(2, "b") == ("b", 2, False, True)
    assert calls == ["b", 2, 3]


def test_chained_comparison_evaluates_each_operand_once():
    calls = []

    @matchbox.batch
    def f(x):
        def middle():
            calls.append(1)
            return x * 0 + 1
        return 0 < middle() < x

    _, xb = scalars([0.0, 2.0])
    result = f(xb)
    assert [e.item() for e in result.examples()] == [False, True]
    assert calls == [1]


@matchbox.batch
def logical_values(a, b):
    # `and`/`or` on non-boolean values give one of the operands, per example
    return (a and b), (a or b)


def test_and_or_return_operands_per_example(dtype):
    assert_batch_equals_loop(logical_values, scalars([0.0, 2.0, 0.0, -1.0], dtype),
                             scalars([5.0, 3.0, 0.0, 0.0], dtype))


def test_oracle_and_of_integer_batches():
    @matchbox.batch
    def f(x):
        if x % 2 == 0 and x % 3 == 0:
            x = x * 0 - 1
        return x

    assert_oracle(f, [6, 4, 9, 12], [-1, 4, 9, -1], dtype=torch.int64)


@matchbox.batch
def first_non_positive(x):
    i = 0
    # `x[:, i]` exists only where `i < n`: evaluated only for those examples,
    # and the loop test only for examples still in the loop
    while i < x.size_as_tensor(1) and x[:, i] > 0:
        i = i + 1
    return i


def test_and_guards_an_index_per_example():
    from matchbox import MaskedBatch

    xs = [torch.tensor([v], dtype=torch.float64) for v in
          ([1.0, 2.0, -1.0, 3.0], [], [5.0], [-2.0], [1.0, 1.0])]
    xb = MaskedBatch.fromlist(xs, (True,))
    loop = [int(first_non_positive(x)) for x in xs]
    assert loop == [2, 0, 1, 0, 2]
    assert [int(v) for v in first_non_positive(xb).data] == loop


@matchbox.batch
def halting(x, limit):
    steps = 0
    while x < 10 and steps < limit:
        x = x * 2
        steps = steps + 1
    return x, steps


def test_comparison_of_names_is_a_pure_right_operand():
    # `steps < limit` can change nothing: the rewrite marks it so, and the
    # runtime computes it for every example instead of under a mask.
    text = " ".join(matchbox.control.source(halting).split())
    assert "lambda : steps < limit, pure=True)" in text
    assert "pure=True" not in matchbox.control.source(first_non_positive)


def test_pure_right_operand_equals_the_loop(dtype):
    assert_batch_equals_loop(halting, scalars([0.5, 3.0, 12.0, 1.0, 9.0], dtype),
                             ([2] * 5, 2))
    assert_oracle(lambda x: halting(x, 3)[1], [0.5, 3.0, 12.0, 6.0], [3, 2, 0, 1],
                  dtype=dtype)


def test_pure_right_operand_spares_the_masked_run(monkeypatch):
    @matchbox.batch
    def both_pure(x, y):
        return x > 0 and y > 0

    @matchbox.batch
    def right_not_pure(x, y):
        return x > 0 and y + 0 > 0

    _, xb = scalars([1.0, -1.0, 2.0])
    _, yb = scalars([1.0, 1.0, -1.0])
    # Reading masks on the host (the CPU's way), the operand that is not pure runs behind
    # a read of whether any example needs it (a small mask's ``tolist`` on the CPU, else
    # ``.any()``); the accelerator's way runs it masked without asking.
    listed = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: listed.append(t) or tolist(t))
    for reads, f, syncs in ((True, both_pure, 0), (True, right_not_pure, 1),
                            (False, both_pure, 0), (False, right_not_pure, 0)):
        listed.clear()
        with host_reads(reads), CountOps() as counted:
            result = f(xb, yb)
            read = counted.ops["any"] + len(listed)
        assert [e.item() for e in result.examples()] == [True, False, False]
        assert read == syncs, (f.__name__, reads)


@matchbox.batch
def reads_a_name_only_some_examples_assigned(x):
    if x > 0:
        bound = x * 0 + 5
    # Only the examples with x > 0 read `bound`, as in Python.
    if x > 0 and x < bound:
        x = x + 100
    return x


def test_pure_right_operand_that_fails_runs_again_where_needed():
    assert_oracle(reads_a_name_only_some_examples_assigned, [1.0, -1.0, 7.0, 0.0],
                  [101.0, -1.0, 7.0, 0.0])
    # No example assigned `bound`: computed for every example it fails, and run
    # again where needed (nowhere) it is not evaluated, as in the loop.
    assert_oracle(reads_a_name_only_some_examples_assigned, [-1.0, 0.0], [-1.0, 0.0])

    @matchbox.batch
    def needs_an_unassigned_name(x):
        if x > 100:
            bound = x
        return x > 0 and x < bound

    examples, batch = scalars([-1.0, 2.0])
    with pytest.raises(UnboundLocalError, match="'bound'"):
        needs_an_unassigned_name(examples[1])  # the loop fails on example 1
    # Where masks are read on the host (the CPU's way) the untaken branch is skipped and
    # `bound` stays unassigned; the accelerator's way runs it masked, and the read gives
    # padding, as when some examples assigned it (the README's limitations).
    with host_reads(True), pytest.raises(UnboundLocalError, match="'bound'"):
        needs_an_unassigned_name(batch)
