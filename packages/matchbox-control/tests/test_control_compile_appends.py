"""A list that a ``for`` captured as a scan appends to, read after the loop only by calls
(``states.append(h)``, then ``F.stack(states, 1)``: the demo's model).

Appended one by one, the scan's per-step outputs would fix the number of steps (a list
has a length) and a graph would hold for one padded length only.  When nothing but calls
reads the list after the loop, the items stay stacked (``runtime/step_outputs.py``): a
stack into a new dimension joins them whole, any other call gets the list.  Values and
gradients equal the loop over examples (NaN padding); graphs are counted.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, compiled_for_batches, scans_expected, sequences
from hypothesis import given
from hypothesis import strategies as st

import matchbox
import matchbox.functional as F
from matchbox.control import source

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops


@matchbox.batch
def stacked_states(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        if h.sum() > 0:  # a per-example branch before the append
            h = h * 0.5
        states.append(h)
    return F.stack(states, 1).sum(1) * 2


@matchbox.batch
def torch_stacked_states(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    out = torch.stack(states, 1)
    return out.sum(1)


@matchbox.batch
def stacked_by_keyword(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    return torch.stack(tensors=states, dim=1).sum(1)


@matchbox.batch
def started_with_the_first_state(x, w):
    h = x.new_zeros(x.size(0), x.size(-1)) + 1
    states = [h]  # a list that starts with items: they come first in the stack
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    return F.stack(states, 1).sum(1)


@matchbox.batch
def normed(states):
    """A helper that reads the list (not a stack)."""
    return sum(s.sum() for s in states)


@matchbox.batch
def stacked_and_counted(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    stacked = F.stack(states, 1).sum(1)
    return stacked * len(states), normed(states)


@matchbox.batch
def appended_after_the_loop(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    list.append(states, h * 3)  # a call that writes to the list: every later call sees it
    return F.stack(states, 1).sum(1)


@matchbox.batch
def last_state_read(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
    return F.stack(states, 1).sum(1) + states[-1]  # read by index: a list after the loop


def test_only_calls_reading_the_list_go_through_call_steps():
    def compact(f):
        return "".join(source(f).split())

    assert "mb__.call_steps(F.stack,states,1)" in compact(stacked_states)
    assert "mb__.call_steps(torch.stack,states,1)" in compact(torch_stacked_states)
    assert "mb__.call_steps(torch.stack,tensors=states,dim=1)" in compact(stacked_by_keyword)
    assert "mb__.call_steps(len,states)" in compact(stacked_and_counted)
    assert "call_steps" not in compact(last_state_read)


LENGTHS = ([5, 1, 7], [13, 2], [1, 3], [17, 17, 4, 9, 1])  # padded 8, 16, 8, 24


@pytest.mark.parametrize("f", [stacked_states, torch_stacked_states, stacked_by_keyword,
                               started_with_the_first_state])
def test_a_stacked_list_serves_every_padded_length_in_one_graph(f, dtype):
    w = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(f, fallback="raise")
    for lengths in LENGTHS:
        assert_batch_equals_loop(run, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))
    specs = run.compiled.specializations
    if scans_expected():
        assert [(s.calls, s.scans, s.fixed_sizes_because) for s in specs] == [(4, 1, None)]
        assert "<=*" in specs[0].summary
    else:  # torch 2.3: no scan, the loop unrolls to each padded length
        assert [s.scans for s in specs] == [0, 0, 0]


@pytest.mark.parametrize("f", [stacked_and_counted, appended_after_the_loop, last_state_read])
def test_a_list_read_otherwise_is_the_loops_list(f):
    # len(), a helper, a write by a call or a read by index see the list itself: its items
    # taken apart, the graph holding for one padded length (two lengths: two graphs).
    w = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(f, fallback="raise")
    for lengths in ([5, 1, 7], [13, 2]):
        assert_batch_equals_loop(run, sequences(lengths), ([w] * len(lengths), w))
    assert len(run.compiled.specializations) == 2


COMPILED = compiled_for_batches(stacked_states, fallback="raise")
WEIGHT = torch.randn(3, 3, dtype=torch.float64)


@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5))
def test_stacked_states_of_any_lengths_equal_the_loop(lengths):
    # (An example of length 0 would stack no states: the loop's torch.stack raises.)
    assert_batch_equals_loop(COMPILED, sequences(lengths), ([WEIGHT] * len(lengths), WEIGHT))
