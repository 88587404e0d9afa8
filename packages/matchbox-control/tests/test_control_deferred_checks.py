"""Checks deferred to the end of a ``@batch`` call on an accelerator (issue 22).

Where host reads are off (``host_reads(False)``, the default on CUDA), core's checks
that an op can go on safely when they fail (a per-example index in range, the parts
of a ``cat`` real for the same examples, lengths that agree) record their flags
instead of reading them, and the outermost ``@batch`` call reads them all with one
sync when it ends, raising the first failed check's own error. These tests run the
accelerator's way on the CPU and pin: the same error (type and message) as the
check raises at once; raised when the call ends, not at the op; one sync; nesting,
loops, and a call that raises its own error.
"""

from __future__ import annotations

import re

import pytest
import torch
from op_counts import CountOps

import matchbox
from matchbox import MaskedBatch
from matchbox._masking import host_reads
from matchbox.extending import EXAMPLE_SCALAR, mark_example_scalar
from matchbox.testing import mb_assert


def batches(lengths=(3, 5, 2), index=(1, 4, 0)):
    x = MaskedBatch.fromlist([torch.arange(float(n)).reshape(1, n, 1) for n in lengths],
                             (True, False))
    i = MaskedBatch.fromlist([torch.tensor([k]) for k in index], ())
    return x, i


OUT_OF_RANGE = re.escape("Tensor.__getitem__: index -4 is out of range for example 2, which "
                         "has size 2 in dimension 1")

reached = []


@matchbox.batch
def select_then_double(x, i):
    y = x[:, i]
    reached.append("after the index")
    return y * 2


@pytest.fixture(autouse=True)
def _clear():
    reached.clear()


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_per_example_index_out_of_range_raises_the_same_error(reads):
    x, i = batches(index=(1, 4, -4))
    with host_reads(reads), pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$"):
        select_then_double(x, i)
    # Host reads on: raised at the op. Off: the op went on, and the call raised at its end.
    assert reached == ([] if reads else ["after the index"])


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_int_index_past_an_example_raises_the_same_error(reads):
    @matchbox.batch
    def fourth(x):
        y = x[:, 3]
        reached.append("after the index")
        return y + 1

    x, _ = batches()
    with host_reads(reads), pytest.raises(IndexError, match=re.escape(
            "index 3 is out of range for example 0, which has size 3 in dynamic dimension 1")):
        fourth(x)
    assert reached == ([] if reads else ["after the index"])
    # Past every example's padded size: the op itself goes on too (its result padding).
    x, _ = batches(lengths=(2, 1, 2))
    with host_reads(reads), pytest.raises(IndexError, match="index 3 is out of range for "
                                          "example 0, which has size 2"):
        fourth(x)


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_cat_of_parts_real_for_other_examples_raises_the_same_error(reads):
    def steps(x):  # not rewritten: the padded steps of x, as core gives them
        steps = x.unbind(1)
        return torch.cat([steps[0], steps[2]], 1)

    @matchbox.batch
    def join(x):
        y = steps(x)
        reached.append("after the cat")
        return y

    x, _ = batches()
    with host_reads(reads), pytest.raises(ValueError, match=re.escape(
            "torch.cat: example 2 is real in some of the 2 tensors concatenated and padding "
            "in others")):
        join(x)
    assert reached == ([] if reads else ["after the cat"])


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_gather_index_out_of_range_raises_the_same_error(reads):
    @matchbox.batch
    def picked(x, i):
        y = torch.gather(x, 1, i)
        reached.append("after the gather")
        return y * 2

    x, _ = batches(lengths=(3, 5, 2))
    i = MaskedBatch.fromlist([torch.tensor([[[k]]]) for k in (2, 4, 2)], (True, False))
    with host_reads(reads), pytest.raises(IndexError, match=re.escape(
            "torch.gather: index 2 is out of range for example 2, which has size 2 in "
            "dimension 1")):
        picked(x, i)
    # Host reads on: raised at the op. Off: the op went on (the failing position read
    # position 0), and the call raised at its end.
    assert reached == ([] if reads else ["after the gather"])


# Checks of other ops that go on safely when they fail: (the op, lengths, error, message).
CHECKS_THAT_GO_ON = {
    "a reduction over an empty example": (
        lambda x: x.amax(1), (3, 0, 2), IndexError,
        "Tensor.amax: example 1 has size 0 in dynamic dimension 1, and Tensor.amax of an "
        "empty dimension is undefined"),
    "narrow past an example's end": (
        lambda x: x.narrow(1, 0, 3), (3, 1, 4), RuntimeError,
        "Tensor.narrow: start (0) + length (3) exceeds the size of example 1, 1, in dynamic "
        "dimension 1"),
    "a view splitting lengths that do not divide": (
        lambda x: x.view(1, -1, 2, 1), (4, 3, 2), ValueError,
        "Tensor.view: cannot split dynamic dimension 1 into groups of 2: the examples have "
        "sizes [4, 3, 2] there, not all divisible"),
}


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
@pytest.mark.parametrize("case", sorted(CHECKS_THAT_GO_ON))
def test_other_checks_that_let_the_op_go_on_raise_the_same_error(reads, case):
    op, lengths, error, message = CHECKS_THAT_GO_ON[case]

    @matchbox.batch
    def run(x):
        y = op(x)
        reached.append("after the op")
        return y

    x, _ = batches(lengths=lengths)
    with host_reads(reads), pytest.raises(error, match=f"^{re.escape(message)}$"):
        run(x)
    assert reached == ([] if reads else ["after the op"])


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_lengths_that_differ_raise_the_same_error(reads):
    @matchbox.batch
    def add(x, y):
        return x + y

    x, _ = batches(lengths=(3, 5, 2))
    y, _ = batches(lengths=(3, 4, 2))
    with host_reads(reads), pytest.raises(ValueError, match=re.escape(
            "example 1 has size 5 in one argument and 4 in another along dynamic dimension "
            "1; the examples would not combine in a loop either")):
        add(x, y)


def test_a_call_whose_checks_pass_reads_them_once_and_equals_host_reads():
    @matchbox.batch
    def inner(x, i):
        return x[:, i] * 2

    @matchbox.batch
    def outer(x, i):
        a = inner(x, i)
        b = inner(x, i - 1)
        return torch.cat([a, b], 1) + x[:, 0]

    x, i = batches(index=(1, 4, 1))
    with host_reads(True):
        expected = outer(x, i)
    counter = CountOps()
    with host_reads(False), counter:
        got = outer(x, i)
    # Five checks (three indices, the cat, the lengths of the sum), one read at the end
    # of the outermost call.
    assert counter.syncs == 1
    torch.testing.assert_close(got.data, expected.data)
    assert torch.equal(got.mask, expected.mask)


def test_nested_calls_raise_when_the_outermost_ends():
    @matchbox.batch
    def inner(x, i):
        return select_then_double(x, i) + 1

    @matchbox.batch
    def outer(x, i):
        y = inner(x, i)
        reached.append("after the inner call")
        return y

    x, i = batches(index=(1, 4, -4))
    with host_reads(False), pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$"):
        outer(x, i)
    assert reached == ["after the index", "after the inner call"]


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_check_failing_in_a_loop_raises(reads):
    @matchbox.batch
    def walk(x, i, n):
        total = x[:, 0]
        for _ in range(n):
            i = i + 1
            total = total + x[:, i]
        return total

    x, i = batches(index=(0, 0, 0))
    i = mark_example_scalar(i, EXAMPLE_SCALAR)  # a Python int in the loop: x[:, i] drops the dim
    n = MaskedBatch.fromlist([torch.tensor([k]) for k in (2, 4, 1)], ())
    with host_reads(reads):
        walk(x, i, n)  # every index in range
        n = MaskedBatch.fromlist([torch.tensor([k]) for k in (2, 4, 3)], ())
        with pytest.raises(IndexError, match=re.escape(
                "index 2 is out of range for example 2, which has size 2 in dimension 1")):
            walk(x, i, n)


def test_a_failed_check_is_the_error_when_the_body_then_raises_its_own():
    @matchbox.batch
    def select_then_fail(x, i):
        x[:, i]
        raise RuntimeError("the body's own error")

    x, bad = batches(index=(1, 4, -4))
    with host_reads(False), pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$") as info:
        select_then_fail(x, bad)
    # What the op's check would have raised at once; the body's error is kept as context.
    assert isinstance(info.value.__context__, RuntimeError)
    _, good = batches()
    with host_reads(False), pytest.raises(RuntimeError, match="the body's own error"):
        select_then_fail(x, good)


def test_no_check_is_left_pending_for_the_next_call():
    @matchbox.batch
    def select_then_fail(x, i):
        x[:, i]
        raise RuntimeError("the body's own error")

    x, good = batches()
    _, bad = batches(index=(1, 4, -4))
    with host_reads(False):
        with pytest.raises(RuntimeError):
            select_then_fail(x, good)
        with pytest.raises(IndexError):
            select_then_fail(x, bad)
        # Neither call left its checks pending: this one ends on its own, and a failing
        # check in the next one raises when that one ends (not later).
        select_then_double(x, good)
        with pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$"):
            select_then_double(x, bad)


def test_outside_batch_the_check_raises_at_the_op():
    x, i = batches(index=(1, 4, -4))
    with host_reads(False), pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$"):
        x[:, i]


def test_by_device_on_the_cpu_the_check_raises_at_the_op():
    x, i = batches(index=(1, 4, -4))
    with host_reads(None), pytest.raises(IndexError, match=f"^{OUT_OF_RANGE}$"):
        select_then_double(x, i)
    assert reached == []


def test_an_index_written_in_place_after_the_op_is_left_out_of_the_message():
    # The check reads the index itself (a copy would cost an op at every index); written
    # since, its value is not the one the op read, and the message does not show it.
    @matchbox.batch
    def select_then_write(x, i):
        y = x[:, i]
        i.data.add_(100)
        return y

    x, i = batches(index=(1, 4, -4))
    changed = re.escape("Tensor.__getitem__: an index is out of range for example 2, which "
                        "has size 2 in dimension 1")
    with host_reads(False), pytest.raises(IndexError, match=f"^{changed}$"):
        select_then_write(x, i)


@pytest.mark.parametrize("index", ["per example", "from the end"])
def test_a_deferred_index_check_reads_nothing_out_of_bounds(index):
    # Every example empty: no position to read (a gather there would read out of bounds,
    # a device-side assert on CUDA). The op goes on, its result padding, and the call
    # raises the check's error when it ends.
    @matchbox.batch
    def select(x, i):
        y = x[:, i] if index == "per example" else x[:, -1]
        reached.append("after the index")
        return y

    x = MaskedBatch.fromlist([torch.zeros(1, 0, 1) for _ in range(3)], (True, False))
    _, i = batches(index=(0, 0, 0))
    dimension = "dimension 1" if index == "per example" else "dynamic dimension 1"
    with host_reads(False), pytest.raises(IndexError, match=re.escape(
            f"index {0 if index == 'per example' else -1} is out of range for example 0, "
            f"which has size 0 in {dimension}")):
        select(x, i)
    assert reached == ["after the index"]


@matchbox.batch
def doubled_where_flagged(x, i, flag, s):
    out = s
    if flag > 0:
        out = s + x[:, i] * 2
    return out


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_an_index_out_of_range_for_an_example_not_running_is_no_error(reads):
    # Example 1 takes no side: its index reads an element of its own wrapped into range,
    # and of an empty example, padding (NaN here). A read's mask is the batch's own (a
    # running example out of range raises), so that value is called real; the region
    # discards it, and its gradient reaches nothing: the loop's values and gradients.
    lengths, index, flags = (3, 0, 2, 1), (2, 5, -1, 0), (1, 0, 1, 1)
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in lengths]
    indices = [torch.tensor(k) for k in index]  # x[:, i] of one example: (1, 2)
    fs = [torch.tensor([f]) for f in flags]
    ss = [torch.randn(1, 2, dtype=torch.float64) for _ in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False))
    ib = mark_example_scalar(MaskedBatch(torch.tensor(index), None, ()), EXAMPLE_SCALAR)  # 0-d
    fb = MaskedBatch.fromlist(fs, ())
    sb = MaskedBatch.fromlist(ss, (False,))
    with host_reads(reads):
        mb_assert(doubled_where_flagged, [xs, indices, fs, ss], [xb, ib, fb, sb], len(xs))


@matchbox.batch
def first_or_zero(x, k):
    try:
        y = x[:, k]
    except IndexError:
        y = x[:, 0] * 0
    return y


def _rows(*lengths):  # noqa: ANN202
    return [torch.arange(3.0 * n).reshape(1, n, 3) for n in lengths]


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_an_error_caught_for_only_some_examples_is_refused(reads):
    # The loop sends example 0 into except and example 1 on through the try; a batch
    # cannot split there, and sent both into except (a silent wrong answer). On the CPU
    # the except clause refuses it; on an accelerator the check is read when the call
    # ends, outside the try: the error itself.
    xs = _rows(3, 5)
    xb = MaskedBatch.fromlist(xs, (True, False))
    kb = MaskedBatch(torch.tensor([4, 1]), None, ())
    expected = NotImplementedError if reads else IndexError
    message = (r"@batch: an except clause \(.*\) catches an error raised for only some of the "
               r"examples that ran the try \(IndexError: Tensor.__getitem__: index 4 is out of "
               r"range for example 0" if reads else "index 4 is out of range for example 0")
    with host_reads(reads), pytest.raises(expected, match=message):
        first_or_zero(xb, kb)


def _ints(values):
    """One Python int per example (the loop's first_or_zero(x, k))."""
    return mark_example_scalar(MaskedBatch(torch.tensor(values), None, ()), EXAMPLE_SCALAR)


def test_an_error_caught_for_every_example_takes_except_as_the_loop_does():
    xs = _rows(3, 5)
    xb = MaskedBatch.fromlist(xs, (True, False))
    with host_reads(True):
        out = first_or_zero(xb, _ints([4, 7]))
        again = first_or_zero(xb, _ints([1, 1]))
    assert [e.tolist() for e in out.examples()] == [
        first_or_zero(x, k).tolist() for x, k in zip(xs, (4, 7))] == [[[0.0, 0.0, 0.0]]] * 2
    assert [e.tolist() for e in again.examples()] == [first_or_zero(x, 1).tolist() for x in xs]


@matchbox.batch
def pairs_where_even(x):
    if x.size_as_tensor(1) % 2 == 0:  # only the examples of even length split into pairs
        y = x.view(1, -1, 2, 3).sum(2).sum(1)
    else:
        y = x.sum(1)
    return y


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_view_split_checks_only_the_examples_running_it(reads):
    xs = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 4, 0, 2)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    with host_reads(reads):
        mb_assert(pairs_where_even, [xs], [xb], len(xs))


@matchbox.batch
def looked_up(x, table):
    try:
        y = x * table["scale"]
    except KeyError:
        y = x
    return y


def test_an_error_no_check_raised_is_caught_as_written_after_a_failed_check():
    # A check that failed in an earlier call (its error caught by the caller) is no
    # answer for the KeyError here, which every example raises alike.
    x, i = batches(index=(1, 4, -4))
    with host_reads(True), pytest.raises(IndexError):
        select_then_double(x, i)
    out = looked_up(x, {})
    assert torch.equal(out.data, x.data)


@matchbox.batch
def negative_refused(x):
    if x.sum() < 0:
        raise ValueError("negative")
    return x.sum(1)


@matchbox.batch
def seven_where_refused(x):
    try:
        y = negative_refused(x)
    except ValueError:
        y = x.sum(1) * 0 - 7
    return y


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_raise_under_a_per_example_condition_is_refused_by_a_callers_except(reads):
    # Only example 0 raises; the loop sends it alone into the caller's except.
    xs = [-torch.ones(1, 2), torch.ones(1, 3)]
    with host_reads(reads), pytest.raises(NotImplementedError, match=r"catches an error "
                                          r"raised for only some of the examples that ran "
                                          r"the try \(ValueError: negative\)"):
        seven_where_refused(MaskedBatch.fromlist(xs, (True,)))
    both = [-torch.ones(1, 2), -torch.ones(1, 3)]  # every example raises: caught, as looped
    out = seven_where_refused(MaskedBatch.fromlist(both, (True,)))
    assert [e.tolist() for e in out.examples()] == [
        seven_where_refused(x).tolist() for x in both] == [[-7.0], [-7.0]]


def test_contextlib_suppress_is_refused_at_decoration():
    import contextlib

    with pytest.raises(matchbox.control.UnsupportedConstructError,
                       match="does not support contextlib.suppress"):
        @matchbox.batch
        def suppressed(x):
            y = x.sum(1)
            with contextlib.suppress(IndexError):
                y = x[:, 3]
            return y


@matchbox.batch
def counted_by_step(x):
    y = x.sum(1) * 0
    s = int(x.sum() > 0)
    if s != 0:  # an example with a zero step does not reach the range
        for _ in range(0, 3, s):
            y = y + 1
    return y


@pytest.mark.parametrize("reads", [True, False], ids=["host-reads", "accelerator"])
def test_a_zero_range_step_of_an_example_not_running_is_no_error(reads):
    xs = [torch.ones(1, 2), -torch.ones(1, 3)]
    with host_reads(reads):
        out = counted_by_step(MaskedBatch.fromlist(xs, (True,)))
    assert [e.tolist() for e in out.examples()] == [counted_by_step(x).tolist() for x in xs]


@matchbox.batch
def solve_or_zeros(a, b):
    try:
        w = torch.linalg.solve(a, b)  # the loop runs it (a singular a would raise)
    except RuntimeError:
        w = torch.zeros_like(b)
    return w


@matchbox.batch
def user_refusal_caught(x):
    try:
        raise NotImplementedError("the user's own")
    except NotImplementedError:
        x = x + 1
    return x


def test_an_except_clause_does_not_catch_matchboxs_refusal_of_an_op_the_loop_runs():
    # NotImplementedError is a RuntimeError: an ``except RuntimeError`` fallback took
    # Matchbox's refusal of an op for every example, silently (a user trial).
    a = MaskedBatch.fromlist([torch.eye(n).unsqueeze(0) * 2 for n in (3, 2)], (True, True))
    b = MaskedBatch.fromlist([torch.ones(1, n, 1) for n in (3, 2)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^@batch: an except clause \(.*\) catches "
                                                  r"Matchbox's refusal of code it cannot run "
                                                  r"on a batch \(torch.linalg.solve is not "
                                                  r"implemented for MaskedBatch\); the loop"):
        solve_or_zeros(a, b)
    xs = _rows(3, 5)
    out = user_refusal_caught(MaskedBatch.fromlist(xs, (True, False)))
    assert [e.tolist() for e in out.examples()] == [(x + 1).tolist() for x in xs]
