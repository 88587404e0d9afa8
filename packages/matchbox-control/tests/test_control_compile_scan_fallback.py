"""A ``for`` captured as a ``scan`` whatever torch's default dtype, and a loop whose scan
torch refuses unrolled instead, leaving nothing of the attempt in the graph.

``backend="fx"``: the captured graph as it is (its nodes are what the tests look at).
"""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox.compiler import loop_state, loops

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@matchbox.batch
def halting_sums(x):
    # A while (unrolled into the step) inside a for (a scan): the while's test, the
    # step-bound flag and the for's state all cross the scan.
    tot = x.sum(1) * 0  # (not x[:, 0]: an example is empty)
    for xt in x.unbind(1):
        i = 0
        while tot.sum(-1) < 3 and i < 4:
            tot = tot + xt.abs()
            i += 1
    return tot


LENGTHS = [3, 1, 0, 6, 2]  # an empty example, a one-long one, one past the peeled steps


def compiled_for_batches(f, compiled):
    def run(*args):
        return compiled(*args) if isinstance(args[0], matchbox.MaskedBatch) else f(*args)

    return run


def assert_equals_loop_and_eager(compiled) -> None:
    examples, batch = sequences(LENGTHS)  # NaN padding
    assert_batch_equals_loop(compiled_for_batches(halting_sums, compiled), (examples, batch))
    expected = halting_sums(batch)
    got = compiled(batch)
    torch.testing.assert_close(got.data, expected.data, equal_nan=True)
    assert torch.equal(got.mask, expected.mask)


def test_a_while_inside_a_scanned_for_under_a_float64_default_dtype(float64_default):
    # The scan's flag carries were made with the default dtype (float64) while the body
    # encodes its flags as float32: scan refused the carries.
    compiled = matchbox.compile(halting_sums, backend="fx", fallback="raise")
    assert_equals_loop_and_eager(compiled)
    # One graph with gradients (the loop's comparison), one without (eager's).
    assert [(s.eager_reason, s.scans, s.unrolled) for s in compiled.specializations] == [
        (None, 1 if loops.available() else 0, [])] * 2


def test_flags_are_float32_carries_whatever_the_default_dtype(float64_default):
    assert loop_state.flag(torch.device("cpu")).dtype == torch.float32
    assert loop_state.encode(torch.zeros((), dtype=torch.bool)).dtype == torch.float32


#: The graphs compared node for node are captured with fixed sizes: with symbolic ones a
#: failed attempt leaves, unused, the reads of a size it made (the tracer may have bound
#: the size's symbol to them, so they are not erased) and the views they read.
FIXED = {"dynamic": False}


def _graph_ops(compiled) -> list[list[tuple[str, str, int]]]:
    """Each specialisation's graph, node by node (not by name: names count erased nodes)."""
    return [[(n.op, str(n.target), len(n.all_input_nodes)) for n in spec.compiled.graph.nodes]
            for spec in compiled.specializations]


@pytest.mark.skipif(not loops.available(), reason="torch has no scan: loops unroll anyway")
def test_a_scan_torch_refuses_is_unrolled_as_if_never_tried(float64_default, monkeypatch):
    # The flags' first values made float64 again, as before: torch's scan refuses the
    # carries, and the loop is unrolled instead of the call failing to capture.
    monkeypatch.setattr(loop_state, "flag", lambda device: torch.zeros((), device=device))
    compiled = matchbox.compile(halting_sums, backend="fx", fallback="raise", **FIXED)
    assert_equals_loop_and_eager(compiled)
    for spec in compiled.specializations:
        assert spec.scans == 0 and spec.eager_reason is None
        assert len(spec.unrolled) == 1
        assert spec.unrolled[0].startswith(
            "torch could not capture the loop as a scan (UncapturedHigherOrderOpError: "
            "Expected init and carry to have same metadata but found: pair[")
    refused = _graph_ops(compiled)

    # The same loop unrolled where the attempt fails before it records anything: the
    # graph the failed attempt left is the same, node for node (no dead first carries,
    # stacked steps or flags of the attempt, no flag recorded twice).
    def failing_at_once(*args, **kwargs):
        raise RuntimeError("no scan")

    monkeypatch.setattr(loops, "_scan", failing_at_once)
    never_tried = matchbox.compile(halting_sums, backend="fx", fallback="raise", **FIXED)
    assert_equals_loop_and_eager(never_tried)
    assert [s.unrolled for s in never_tried.specializations] == [
        ["torch could not capture the loop as a scan (RuntimeError: no scan)"]] * 2
    assert refused == _graph_ops(never_tried)


@pytest.mark.skipif(not loops.available(), reason="torch has no scan: loops unroll anyway")
def test_a_scan_op_that_fails_after_its_inputs_are_recorded_leaves_no_node(monkeypatch):
    # The scan's first carries and stacked steps are recorded in the graph before the
    # scan op runs: when it fails they are erased, not left as dead code.
    def refusing(*args, **kwargs):
        raise RuntimeError("refused")

    def failing_at_once(*args, **kwargs):
        raise RuntimeError("no scan")

    monkeypatch.setattr(loops, "_scan_op", lambda: refusing)
    refused = matchbox.compile(halting_sums, backend="fx", fallback="raise", **FIXED)
    assert_equals_loop_and_eager(refused)
    assert [s.unrolled for s in refused.specializations] == [
        ["torch could not capture the loop as a scan (RuntimeError: refused)"]] * 2
    monkeypatch.setattr(loops, "_scan", failing_at_once)
    never_tried = matchbox.compile(halting_sums, backend="fx", fallback="raise", **FIXED)
    assert_equals_loop_and_eager(never_tried)
    assert _graph_ops(refused) == _graph_ops(never_tried)


@matchbox.batch
def masked_weight_sums(x, w):
    tot = x.sum(1) * 0
    for xt in x.unbind(1):
        tot = tot + xt * w[w > 0].sum()  # a size that depends on values, in the step
    return tot


@pytest.mark.skipif(not loops.available(), reason="torch has no scan: loops unroll anyway")
def test_a_step_torch_cannot_scan_is_unrolled_not_a_failed_capture():
    # torch 2.13's scan refuses a body whose sizes depend on values (an unbacked symbol
    # "is not tracked with proxy"): the capture went on unrolled, where it had failed.
    compiled = matchbox.compile(masked_weight_sums, backend="fx", fallback="raise")
    w = torch.randn(4, dtype=torch.float64)
    examples, batch = sequences(LENGTHS)
    assert_batch_equals_loop(compiled_for_batches(masked_weight_sums, compiled),
                             (examples, batch), ([w] * len(LENGTHS), w))
    for spec in compiled.specializations:
        assert spec.eager_reason is None
        assert spec.scans == 1 or spec.unrolled[0].startswith(
            "torch could not capture the loop as a scan (")
