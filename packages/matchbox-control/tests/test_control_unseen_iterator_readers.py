"""A helper ``@batch`` did not rewrite that reads a shared iterator it is not given (one it
closes over, ``self.it``, a global), called under a per-example condition, is refused
(``runtime.iterables.refuse_unseen_reads``): it advanced the iterator for every example,
where the loop advances it only for the examples that run the call, so a later read gave
every example the same item, silently.  Called where every example runs, or decorated (its
own reads are then per example or refused), it equals the loop; a helper reaching no
iterator is not refused."""

from __future__ import annotations

import itertools

import pytest
import torch
from control_cases import assert_batch_equals_loop

import matchbox
from matchbox import MaskedBatch


def make_taker(values):
    it = iter(values)

    def take():  # a closure over a shared iterator
        return next(it)
    return take


COUNTER = itertools.count(1)


def next_id():  # reads a global iterator
    return float(next(COUNTER))


class Model:
    def __init__(self):
        self.it = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
        self.scale = 2.0
        self.take = make_taker([10.0, 20.0, 30.0, 40.0, 50.0])

    def read(self):  # reads self.it, not given it
        return next(self.it)

    def read_one_with(self, x):  # given x, but not the iterator
        return x * next(self.it)

    def scaled(self):  # reaches no iterator
        return self.scale

    @matchbox.batch
    def forward(self, x, how):
        y = x.sum(1) * 0
        if x.sum() > 0:
            if how == "self.it":
                y = y + self.read()
            elif how == "self.it, an argument":
                y = self.read_one_with(y + 1)
            elif how == "closure":
                y = y + self.take()
            elif how == "global":
                y = y + next_id()
            else:
                y = y + self.scaled()
        return y + (self.scaled() if how == "plain" else self.read())


def mixed_signs(lengths, dtype=torch.float64):
    """Sequences every other one of which sums to more than zero (the condition's
    examples), and their batch."""
    xs = [torch.full((1, n, 3), 1.0 if i % 2 else -1.0, dtype=dtype)
          for i, n in enumerate(lengths)]
    return xs, MaskedBatch.fromlist(xs, (True, False))


READS = {
    "self.it": r"Model\.read\(\) reads self\.it, which is a shared list_iterator",
    "self.it, an argument": r"Model\.read_one_with\(\) reads self\.it, which is a shared "
                            r"list_iterator",
    "closure": r"make_taker\.<locals>\.take\(\) closes over a shared list_iterator",
    "global": r"next_id\(\) reads the global COUNTER, which is a shared count",
}


@pytest.mark.parametrize("how", list(READS))
@pytest.mark.parametrize("lengths", [(3, 2, 0, 4), (1, 2)])
def test_a_helper_reading_an_iterator_it_is_not_given_under_a_condition_is_refused(
        how, lengths, dtype):
    xs, xb = mixed_signs(lengths, dtype)
    model = Model()
    loop = [model.forward(x, how) for x in xs]
    if how == "self.it":  # the loop advanced self.it only for the examples that ran it
        # (the batch read 1.0 under the condition and 2.0 after it: 2.0 and 3.0)
        assert [v.flatten()[0].item() for v in loop[:2]] == [1.0, 2.0 + 3.0]
    with pytest.raises(NotImplementedError, match=(
            rf"^@batch: {READS[how]}, and it is called under a per-example condition "
            r"\(.*test_control_unseen_iterator_readers\.py, line \d+\), but @batch did not "
            r"rewrite .*: the iterator is one object shared by every example, so what it "
            r"reads of it would advance it for the examples that do not run this code too\. "
            r"Decorate .* with @matchbox\.batch and pass it the iterator, or read it where "
            r"every example runs")):
        Model().forward(xb, how)


@pytest.mark.parametrize("lengths", [(3, 2, 0, 4), (1,)])
def test_helpers_reaching_no_iterator_or_called_by_every_example_equal_the_loop(
        lengths, dtype):
    xs, xb = mixed_signs(lengths, dtype)
    # self.scaled() under the condition reaches no iterator; self.read() after it runs for
    # every example (each example of the loop has a model of its own: one read each).
    assert_batch_equals_loop(lambda x: Model().forward(x, "plain"), (xs, xb))


class DecoratedReader:
    def __init__(self):
        self.values = [1.0, 2.0, 3.0]

    @matchbox.batch
    def read(self, it):
        return next(it, 0.0)

    @matchbox.batch
    def forward(self, x):
        it = iter(self.values)
        y = x.sum(1) * 0
        if x.sum() > 0:
            y = y + self.read(it)
        return y


def test_a_decorated_helper_given_the_iterator_is_refused_by_its_own_read():
    xs, xb = mixed_signs((3, 2, 4))
    with pytest.raises(NotImplementedError, match=(
            r"^@batch: next\(\) under a per-example condition \(.*line \d+\): the "
            r"list_iterator it advances is shared by every example")):
        DecoratedReader().forward(xb)


SOURCE = 2.0  # a number, then an iterator (test_..._after_it_passed)


class Switching:
    def __init__(self):
        self.source = 2.0

    def read(self, where):  # a number first, a shared iterator later
        value = self.source if where == "self" else SOURCE
        return value if isinstance(value, float) else next(value)

    @matchbox.batch
    def forward(self, x, where):
        y = x.sum(1) * 0
        if x.sum() > 0:
            y = y + self.read(where)
        return y


@pytest.mark.parametrize("where", ["self", "global"])
def test_a_helper_whose_attribute_or_global_becomes_an_iterator_is_refused_after_it_passed(
        where, dtype, monkeypatch):
    # What calls.call keeps per helper (its verdict, the names its code reads, the types
    # seen to be no iterators) must not hide a value that became an iterator since.
    xs, xb = mixed_signs((3, 2, 0, 4), dtype)
    model = Switching()
    assert_batch_equals_loop(lambda x: model.forward(x, where), (xs, xb))
    if where == "self":
        model.source = iter([1.0, 2.0])
        read = r"reads self\.source, which is"
    else:
        monkeypatch.setitem(globals(), "SOURCE", iter([1.0, 2.0]))
        read = r"reads the global SOURCE, which is"
    with pytest.raises(NotImplementedError, match=(
            rf"^@batch: Switching\.read\(\) {read} a shared list_iterator, and it is called "
            r"under a per-example condition")):
        model.forward(xb, where)
