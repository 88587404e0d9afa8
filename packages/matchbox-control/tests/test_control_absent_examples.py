"""A loop over a dynamic dimension under ``@matchbox.batch`` ends with every example's own
state (no absent example leaves it); without the decorator the absent examples are
refused where values leave Matchbox (core's ``test_absent_examples.py``), and where an
undecorated helper hands them back to a decorated function (``runtime.helper_results``)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", [(3, 1, 5), (2,), (0, 2, 1)])
def test_the_decorated_rnn_equals_the_loop(dtype, lengths):
    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    u = torch.randn(3, 3, dtype=dtype, requires_grad=True)

    @matchbox.batch
    def forward(x):
        h = x.new_zeros(x.size(0), x.size(-1))
        for xt in x.unbind(1):
            h = (xt @ w + h @ u).tanh()
        return h

    xs = [torch.randn(1, n, 3, dtype=dtype) for n in lengths]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    mb_assert(forward, [xs], [xb], len(xs), params=[w, u])


# ---------------------------------------------------------------- undecorated helpers
# A helper without @matchbox.batch runs its loop over x.unbind(1) for every step of every
# example: its last state is a step past the shorter examples' end, absent for them.
# Combined with present values it was taken for an item the example lacks (torch.cat
# skipped it, a product gave the example length 0), silently; it is refused where the
# helper hands it back to the rewritten code (``runtime.helper_results``).

LOST = (r"@batch: {name}\(\) \(.*test_control_absent_examples.py, line \d+\) is not "
        r"rewritten by @batch, and the value it returns{where} has none for example \d+ .*"
        r"Decorate {name} with @matchbox.batch")


def lost(name, where=""):
    return LOST.format(name=name, where=where)


def running_sum(x):
    h = torch.zeros(1, x.size(-1), dtype=x.dtype)
    for xt in x.unbind(1):
        h = h + xt
    return h


def two_states(x):
    h = torch.zeros(1, x.size(-1), dtype=x.dtype)
    c = torch.ones(1, x.size(-1), dtype=x.dtype)
    for xt in x.unbind(1):
        h = h + xt
        c = c * xt.tanh()
    return h, c


def step_outputs(x):
    outputs = []
    h = torch.zeros(1, x.size(-1), dtype=x.dtype)
    for xt in x.unbind(1):
        h = h + xt
        outputs.append(h)
    return outputs


class RunningSum(torch.nn.Module):
    def forward(self, x):
        h = torch.zeros(1, x.size(-1), dtype=x.dtype)
        for xt in x.unbind(1):
            h = h + xt
        return h


def appends_the_state(x):
    return torch.cat([x, running_sum(x).unsqueeze(1)], 1)


def scales_by_the_state(x):
    return (x * running_sum(x).unsqueeze(1)).sum(2)


def sums_the_joined(x):
    return torch.cat([x, running_sum(x).unsqueeze(1)], 1).sum(1)


def joins_a_list_of_the_state(x):
    hs = [running_sum(x).unsqueeze(1)]
    return torch.cat([x] + hs, 1)


def adds_the_state(x):
    return x.sum(1) + running_sum(x)


def appends_a_module_state(x):
    return torch.cat([x, RunningSum()(x).unsqueeze(1)], 1)


def appends_the_first_of_two_states(x):
    h, c = two_states(x)
    return torch.cat([x, h.unsqueeze(1)], 1)


def appends_the_last_output(x):
    return torch.cat([x, step_outputs(x)[-1].unsqueeze(1)], 1)


def steps_in_a_helper(x):
    return x.unbind(1)


def joins_a_helpers_steps(x):
    # Right as long as every item is a step (cat skips those an example lacks), but a
    # plain function's list or tuple cannot say so: its [-1] or len() would not be.
    return torch.cat([x[:, :1] * 2, *(s.unsqueeze(1) for s in steps_in_a_helper(x))], 1)


def appends_the_state_where_positive(x):
    y = x
    if x[:, 0].sum() > 0:
        y = torch.cat([x, running_sum(x).unsqueeze(1)], 1)
    return y


@pytest.mark.parametrize("f, name, where", [
    (appends_the_state, "running_sum", ""),
    (scales_by_the_state, "running_sum", ""),
    (sums_the_joined, "running_sum", ""),
    (joins_a_list_of_the_state, "running_sum", ""),
    (adds_the_state, "running_sum", ""),
    (appends_a_module_state, "RunningSum", ""),
    (appends_the_first_of_two_states, "two_states", r" at \[0\]"),
    (appends_the_last_output, "step_outputs", r" at \[\d+\]"),
    (joins_a_helpers_steps, "steps_in_a_helper", r" at \[\d+\]"),
])
def test_a_helpers_state_past_an_examples_end_is_refused(f, name, where):
    _, xb = sequences([2, 4, 1])
    with pytest.raises(ValueError, match=lost(name, where)):
        matchbox.batch(f)(xb)


def test_a_module_whose_forward_becomes_an_undecorated_one_is_refused_then(monkeypatch):
    # ``mb__.call`` keeps, per module forward, that a call of it has nothing to check:
    # a class's forward swapped after a first call is judged again.
    class Swapped(torch.nn.Module):
        forward = matchbox.batch(RunningSum.forward)

    module = Swapped()

    @matchbox.batch
    def appends_the_modules_state(x):
        return torch.cat([x, module(x).unsqueeze(1)], 1)

    xs, xb = sequences([2, 4, 1])
    assert_batch_equals_loop(appends_the_modules_state, (xs, xb))  # decorated: no refusal
    monkeypatch.setattr(Swapped, "forward", RunningSum.forward)
    with pytest.raises(ValueError, match=lost(r"[\w.<>]*Swapped")):
        appends_the_modules_state(xb)


@pytest.mark.parametrize("first_call_decorated", [True, False])
def test_a_module_whose_instance_forward_is_an_undecorated_one_is_refused(first_call_decorated):
    # ``m.forward = f`` on the instance is what ``m(x)`` runs: judged by it, not by the
    # class's (decorated) forward, before and after a first call.
    class Decorated(torch.nn.Module):
        forward = matchbox.batch(RunningSum.forward)

    module = Decorated()

    @matchbox.batch
    def appends_the_modules_state(x):
        return torch.cat([x, module(x).unsqueeze(1)], 1)

    xs, xb = sequences([2, 4, 1])
    if first_call_decorated:
        assert_batch_equals_loop(appends_the_modules_state, (xs, xb))
    module.forward = running_sum
    with pytest.raises(ValueError, match=lost(r"[\w.<>]*Decorated")):
        appends_the_modules_state(xb)


def test_a_helpers_state_is_refused_where_a_short_example_runs_the_call():
    xs, _ = sequences([2, 4, 1])
    xs[0][:, 0] = xs[0][:, 0].abs() + 1  # the short example runs the branch
    xs[1][:, 0] = -xs[1][:, 0].abs() - 1
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    with pytest.raises(ValueError, match=lost("running_sum")):
        matchbox.batch(appends_the_state_where_positive)(xb)


def test_a_helpers_state_where_only_the_longest_example_runs_the_call_equals_the_loop(dtype):
    # The shorter examples, absent from the helper's value, do not run the branch.
    xs, _ = sequences([2, 4, 1], dtype=dtype)
    for k, x in enumerate(xs):
        x[:, 0] = x[:, 0].abs() + 1 if k == 1 else -x[:, 0].abs() - 1
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_batch_equals_loop(matchbox.batch(appends_the_state_where_positive), (xs, xb))


@pytest.mark.parametrize("lengths", [(2, 4, 1), (3, 1, 0, 2)])
def test_the_decorated_helpers_equal_the_loop(dtype, lengths, monkeypatch):
    # What the refusal says to write.
    for name in ("running_sum", "two_states", "step_outputs", "steps_in_a_helper"):
        monkeypatch.setitem(globals(), name, matchbox.batch(globals()[name]))
    monkeypatch.setitem(globals(), "RunningSum", matchbox.batch(RunningSum))
    for f in (appends_the_state, scales_by_the_state, sums_the_joined,
              joins_a_list_of_the_state, adds_the_state, appends_a_module_state,
              appends_the_first_of_two_states, joins_a_helpers_steps):
        assert_batch_equals_loop(matchbox.batch(f), sequences(lengths, dtype=dtype))
    # Every example needs a last output for [-1].
    assert_batch_equals_loop(matchbox.batch(appends_the_last_output),
                             sequences([l or 1 for l in lengths], dtype=dtype))


# The legitimate absences: a helper run for each step by a decorated loop (the examples
# past their end do not run it), the state kept with matchbox.functional.update (core's
# eager spelling), items of a list that only some examples have.

def cell(xt, h):
    return (xt + h * 0.5).tanh()


def kept_sum(x):
    h = torch.zeros(1, x.size(-1), dtype=x.dtype)
    for xt in x.unbind(1):
        h = matchbox.functional.update(h, h + xt)
    return h


@matchbox.batch
def runs_a_helper_per_step(x):
    h = x.sum(1) * 0
    for xt in x.unbind(1):
        h = cell(xt, h)
    return torch.cat([x, h.unsqueeze(1)], 1)


@matchbox.batch
def runs_a_helper_per_item(x):
    c = x.sum(1)
    return torch.cat([x[:, :1]] + [cell(s, c).unsqueeze(1) for s in x.unbind(1)], 1)


@matchbox.batch
def appends_a_kept_state(x):
    return torch.cat([x, kept_sum(x).unsqueeze(1)], 1)


@matchbox.batch
def appends_the_last_step(x):
    return torch.cat([x, x.unbind(1)[-1].unsqueeze(1)], 1)


@pytest.mark.parametrize("f", [runs_a_helper_per_step, runs_a_helper_per_item,
                               appends_a_kept_state, appends_the_last_step])
@pytest.mark.parametrize("lengths", [(2, 4, 1), (3, 1, 0, 2)])
def test_absent_examples_that_the_loop_has_no_value_for_equal_the_loop(f, lengths, dtype):
    if f in (appends_the_last_step,):
        lengths = [l or 1 for l in lengths]  # (every example needs a last step)
    assert_batch_equals_loop(f, sequences(lengths, dtype=dtype))


# ``map`` over steps only some examples have runs per example, as the generator
# ``(f(s) for s in steps)``: each example's own results.

def doubled(t):
    return t * 2


def added(a, b):
    return a + b.tanh()


@matchbox.batch
def appends_the_last_mapped(x):
    return torch.cat([x, list(map(doubled, x.unbind(1)))[-1].unsqueeze(1)], 1)


@matchbox.batch
def scales_by_the_mapped_count(x):
    return x.sum(1) * len(list(map(doubled, x.unbind(1))))


@matchbox.batch
def appends_the_last_of_two_mapped(x):
    return torch.cat([x, list(map(added, x.unbind(1), x.unbind(1)))[-1].unsqueeze(1)], 1)


@matchbox.batch
def sums_the_mapped(x):
    h = x.sum(1) * 0
    for y in map(doubled, x.unbind(1)):
        h = h + y
    return torch.cat([x, h.unsqueeze(1), *(y.unsqueeze(1) for y in map(doubled, [h, h]))], 1)


@pytest.mark.parametrize("f", [appends_the_last_mapped, scales_by_the_mapped_count,
                               appends_the_last_of_two_mapped, sums_the_mapped])
def test_map_over_steps_equals_the_loop(f, dtype):
    assert_batch_equals_loop(f, sequences([2, 4, 1, 3], dtype=dtype))
