"""In-place ops that are not method calls in the decorated function, under a per-example
condition: functions (``torch.relu_``, ``F.relu(h, inplace=True)``), modules
(``nn.ReLU(inplace=True)``), and ops an undecorated helper runs (``h.add_(v)``,
``h[:, 0] = v``).  Core writes every in-place op under the execution mask for the
running examples only (``matchbox._masked_writes``); they changed every example before
(a silent wrong answer found by a user trial).  Each is compared with the loop, values
and gradients, float32 and float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from control_cases import assert_batch_equals_loop, sequences
from op_counts import CountOps
from torch import nn

import matchbox
from matchbox import MaskedBatch

DTYPES = [torch.float32, torch.float64]


def needs_nn():
    pytest.importorskip("matchbox.nn", reason="torch.nn.functional on batches is in "
                        "matchbox-nn, which matchbox-control does not depend on (tox's `all` "
                        "runs this)")


def rows(dtype, values=((0.2, 1.0, 0.9), (-0.2, -1.0, 0.1), (0.7, -0.4, 0.3),
                        (-0.6, 0.1, -0.5))):
    examples = [torch.tensor([v], dtype=dtype) for v in values]
    return examples, MaskedBatch.fromlist(examples, (False,))


relu_in_place = nn.ReLU(inplace=True)


def bump(h, v):  # undecorated helpers: their ops are core's
    h.add_(v)


def zero_first(h, v):
    h[:, 0] = v


def halve(h):
    h.mul_(0.5)


@matchbox.batch
def functional_relu(x):
    h = x - 0.5
    if x.sum() > 0:
        F.relu(h, inplace=True)
    return h


@matchbox.batch
def module_relu(x):
    h = x - 0.5
    if x.sum() > 0:
        relu_in_place(h)
    return h


@matchbox.batch
def torch_relu_(x):
    h = x - 0.5
    if x.sum() > 0:
        torch.relu_(h)
    return h


@matchbox.batch
def torch_clamp_(x):
    h = x * 2
    if x.sum() > 0:
        torch.clamp_(h, min=-0.3, max=0.6)
    return h


@matchbox.batch
def dropout_eval(x):
    h = x - 0.5
    if x.sum() > 0:
        F.dropout(h, 0.5, training=False, inplace=True)  # returns its input
        h = h * 3
    return h


@matchbox.batch
def dropout_all(x):
    h = x - 0.5
    if x.sum() > 0:
        F.dropout(h, 1.0, training=True, inplace=True)  # p=1: every value dropped
    return h


@matchbox.batch
def helper_add_(x):
    h = x * 0
    if x.sum() > 0:
        bump(h, x)
    return h


@matchbox.batch
def helper_setitem(x):
    h = x * 1
    if x.sum() > 0:
        zero_first(h, x[:, 1] * 5)
    return h


@matchbox.batch
def nested_ifs(x):
    h = x - 0.5
    if x.sum() > 0:
        if x[:, 0] > 0.5:
            torch.relu_(h)
        else:
            bump(h, x.exp())
    elif x[:, 2] > 0:
        torch.clamp_(h, max=-0.55)
    return h


@matchbox.batch
def halving_loop(x):
    h = x * 4
    while h.abs().sum() > 1.0:  # examples stop at different iterations
        halve(h)
    return h


CASES = {
    "torch.relu_": torch_relu_,
    "torch.clamp_": torch_clamp_,
    "h.add_ in an undecorated helper": helper_add_,
    "h[:, 0] = v in an undecorated helper": helper_setitem,
    "nested ifs": nested_ifs,
    "a while loop's in-place op": halving_loop,
}
NN_CASES = {
    "F.relu(inplace=True)": functional_relu,
    "nn.ReLU(inplace=True)": module_relu,
    "F.dropout(inplace=True), eval": dropout_eval,
    "F.dropout(inplace=True), p=1": dropout_all,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_in_place_op_outside_the_method_form_equals_the_loop(case, dtype):
    assert_batch_equals_loop(CASES[case], rows(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(NN_CASES))
def test_an_in_place_function_or_module_equals_the_loop(case, dtype):
    needs_nn()
    assert_batch_equals_loop(NN_CASES[case], rows(dtype))


def test_the_reproduction_keeps_the_examples_that_do_not_take_the_branch():
    needs_nn()
    xs, xb = rows(torch.float32)
    for f in (functional_relu, module_relu, torch_relu_):
        got = [e.tolist() for e in f(xb).examples()]
        assert got[1] == [[-0.7, -1.5, -0.4]] or torch.allclose(
            torch.tensor(got[1]), torch.tensor([[-0.7, -1.5, -0.4]])), (f.__name__, got)


@matchbox.batch
def dropout_train(x):
    h = x * 1
    if x.sum() > 0:
        F.dropout(h, 0.5, training=True, inplace=True)
    return h


def test_dropout_in_training_drops_only_in_the_running_examples():
    needs_nn()
    torch.manual_seed(0)
    xs = [torch.rand(1, 200) + 0.5 for _ in range(2)] + [-torch.rand(1, 200) - 0.5]
    out = list(dropout_train(MaskedBatch.fromlist(xs, (False,))).examples())
    for x, y in zip(xs[:2], out[:2]):  # dropped (0) or scaled (2x), each on its own
        assert bool(((y == 0) | torch.isclose(y, 2 * x)).all())
        assert 40 < int((y == 0).sum()) < 160
    assert torch.equal(out[2], xs[2])  # not running: untouched


@matchbox.batch
def steps_with_helpers(x):
    acc = x.sum(1) * 0
    for xt in x.unbind(1):
        if xt.sum() > 0:
            bump(acc, xt.tanh())
        else:
            torch.clamp_(acc, max=0.25)
    return acc


@matchbox.batch
def whole_sequence(x):
    h = x * 1
    if x.sum() > 0:
        h[:, :, 0] = 0.0  # a dynamic dimension under the condition (it raised)
        torch.relu_(h)  # last: relu_'s backward reads its result, which nothing writes after
    return h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [steps_with_helpers, whole_sequence], ids=lambda f: f.__name__)
def test_in_place_ops_on_a_batch_with_padding_equal_the_loop(f, dtype):
    torch.manual_seed(3)
    assert_batch_equals_loop(f, sequences([3, 0, 5, 2, 4], dtype=dtype))


@matchbox.batch
def subscript_under_if(x):
    y = x.clone()
    if x.sum() > 0:
        y[:, :, 0] = 0.0
    return y


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_subscript_write_on_a_dynamic_dimension_under_an_if_equals_the_loop(dtype):
    xs = [torch.ones(1, 3, 4, dtype=dtype), -torch.ones(1, 5, 4, dtype=dtype),
          torch.full((1, 2, 4), 0.5, dtype=dtype)]
    assert_batch_equals_loop(subscript_under_if, (xs, MaskedBatch.fromlist(xs, (True, False))))


@matchbox.batch
def view_before_the_branch(x):
    h = x * 1
    first = h[:, 0]  # a view of h, as in the loop: it sees the write
    if x.sum() > 0:
        torch.relu_(h)
    return first * 1, h


def test_a_view_taken_before_the_branch_sees_the_write():
    assert_batch_equals_loop(view_before_the_branch, rows(torch.float64))


@matchbox.batch
def method_relu_(x):
    h = x * 1
    if x.sum() > 0:
        h.relu_()
    return h


def test_a_method_is_written_once_not_masked_twice():
    _, xb = rows(torch.float32)
    for grad in (False, True):
        with CountOps() as counter:
            method_relu_(xb.detach().requires_grad_(grad))
        ops = counter.ops
        # One copy, one op; the write back is in place: a where into the data without
        # a gradient; with one, a where and a copy_ into the batch and into the batch
        # its region guard stands for (a where for the guard itself).
        assert ops["clone"] == 1 and ops["relu_"] == 1, ops
        assert (ops["where"], ops["copy_"]) == ((3, 2) if grad else (1, 0)), ops


@matchbox.batch
def add_out(x):
    h = x - 0.5
    if x.sum() > 0:
        torch.add(h, 1.0, out=h)
    return h


def test_out_under_a_condition_is_refused():
    _, xb = rows(torch.float32)
    with pytest.raises(NotImplementedError, match=r"torch.add: out= is not supported"):
        add_out(xb)
