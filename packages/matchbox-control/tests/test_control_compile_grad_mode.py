"""A ``@batch`` loop compiled by ``matchbox.compile`` whose body computes a gate under
``torch.no_grad()``: the gate sends no gradient back, as in eager mode and in the loop
(the graph records ops below autograd; core's ``compiler/grad_mode.py`` detaches what an
op under ``no_grad`` reads, else the graph's backward sent gradients through the gate)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, compiled_for_batches, sequences

import matchbox

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops


@matchbox.batch
def gated_by_a_constant(x, w):
    h = (x[:, :1] * 0).sum(1)
    for xt in x.unbind(1):
        with torch.no_grad():
            gate = torch.sigmoid(xt @ w)
        h = torch.tanh(h @ w + xt) * gate + h * (1 - gate)
    return h


@pytest.mark.parametrize("lengths", [[8, 0, 12, 1], [1], [9, 9]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_gate_computed_under_no_grad_in_a_compiled_loop_sends_no_gradient(lengths, dtype):
    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(gated_by_a_constant, fallback="raise")
    assert_batch_equals_loop(run, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))
