"""``matchbox.compiler.scan_hoist``: what a scan's body computes from its step's slices
alone is computed for every step at once, before the scan.  A body is traced (as
``loops`` traces one, with ``make_fx``), hoisted, and run step by step against the whole
body: the same values; what is taken out and what stays is pinned.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from matchbox.compiler import scan_hoist


def run_steps(body, carries, xs, free):
    """``body`` over the steps of ``xs``, as ``scan`` runs it: the carries, then what
    each step emitted, stacked."""
    emitted = []
    for t in range(xs[0].size(0)):
        out = body(*carries, *[x[t] for x in xs], *free)
        carries, ys = out[:len(carries)], out[len(carries):]
        emitted.append(ys)
    return list(carries) + [torch.stack(list(y)) for y in zip(*emitted)]


def ops_in(graph):
    return [n.target.__name__ for n in graph.graph.nodes if n.op == "call_function"]


def rnn_step(h, x, mask, w_ih, w_hh):
    new = torch.tanh(x @ w_ih.t() + h @ w_hh.t())
    return torch.where(mask, new, h), new.clone()


def test_the_input_product_is_computed_once_for_every_step():
    torch.manual_seed(0)
    h = torch.randn(4, 3)
    xs = [torch.randn(6, 4, 2), torch.rand(6, 4, 1) > 0.3]
    free = [torch.randn(3, 2), torch.randn(3, 3)]
    body = make_fx(rnn_step)(h, xs[0][0], xs[1][0], *free)
    assert ops_in(body).count("mm.default") == 2
    new_body, new_xs, new_free = scan_hoist.hoisted(body, 1, xs, free, 0)
    assert ops_in(new_body).count("mm.default") == 1  # h @ w_hh only
    # The mask is still read per step; x and w_ih only before the scan.
    assert [tuple(x.shape) for x in new_xs] == [(6, 4, 1), (6, 4, 3)]
    # w_hh is read transposed, a copy made once (in the body, functionalized by torch's
    # scan, the transpose was a copy of the weight every step).
    assert len(new_free) == 1 and new_free[0].is_contiguous()
    torch.testing.assert_close(new_free[0], free[1].t(), rtol=0, atol=0)
    assert not {"t.default", "permute.default", "transpose.int"} & set(ops_in(new_body))
    for got, want in zip(run_steps(new_body, [h], new_xs, new_free),
                         run_steps(body, [h], xs, free)):
        torch.testing.assert_close(got, want)


def noisy_step(h, x, w):
    return (torch.nn.functional.dropout(x @ w, 0.5, True) + h,)


def test_random_ops_and_what_they_write_to_stay_in_the_body():
    # Dropout computed before the scan would draw its numbers in another order; the
    # empty_like it fills in place, taken out, would be a slice of the scan's input.
    h, x, w = torch.randn(2, 3), torch.randn(5, 2, 3), torch.randn(3, 3)
    body = make_fx(noisy_step)(h, x[0], w)
    new_body, new_xs, _ = scan_hoist.hoisted(body, 1, [x], [w], 0)
    assert "mm.default" not in ops_in(new_body)  # the product goes before the scan
    assert {"empty_like.default", "bernoulli_.float"} <= set(ops_in(new_body))
    assert [tuple(t.shape) for t in new_xs] == [(5, 2, 3)]


def emitting_step(h, x):
    doubled = x * 2
    return h + doubled, doubled


def test_a_value_computed_before_the_scan_and_emitted_is_a_copy():
    # scan refuses a body output that is one of its inputs.
    h, x = torch.randn(2, 3), torch.randn(4, 2, 3)
    body = make_fx(emitting_step)(h, x[0])
    new_body, new_xs, _ = scan_hoist.hoisted(body, 1, [x], [], 0)
    placeholders = [n for n in new_body.graph.nodes if n.op == "placeholder"]
    output = next(n for n in new_body.graph.nodes if n.op == "output")
    assert not set(output.args[0]) & set(placeholders)
    for got, want in zip(run_steps(new_body, [h], new_xs, []), run_steps(body, [h], [x], [])):
        torch.testing.assert_close(got, want)


def carry_only_step(h, x, w):
    return (h @ w + x,)


def test_nothing_to_take_out_leaves_the_body_as_it_is():
    h, x, w = torch.randn(2, 3), torch.randn(4, 2, 3), torch.randn(3, 3)
    body = make_fx(carry_only_step)(h, x[0], w)
    assert scan_hoist.hoisted(body, 1, [x], [w], 0) == (body, [x], [w])


def transposing_step(h, x, w, v):
    new = h @ w.t() + x @ v.permute(1, 0)
    return new, w.transpose(0, 1), v.t().sum(0)


def test_a_weights_transpose_is_a_copy_made_once_also_when_emitted():
    torch.manual_seed(1)
    h, x = torch.randn(2, 3), torch.randn(4, 2, 3)
    w, v = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    body = make_fx(transposing_step)(h, x[0], w, v)
    new_body, new_xs, new_free = scan_hoist.hoisted(body, 1, [x], [w, v], 0)
    assert not {"t.default", "permute.default", "transpose.int"} & set(ops_in(new_body))
    assert all(t.is_contiguous() for t in new_free)
    placeholders = [n for n in new_body.graph.nodes if n.op == "placeholder"]
    output = next(n for n in new_body.graph.nodes if n.op == "output")
    assert not set(output.args[0]) & set(placeholders)  # the emitted transpose: a copy
    got = run_steps(new_body, [h], new_xs, new_free)
    want = run_steps(body, [h], [x], [w, v])
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    # Gradients reach the weights through the copies made before the scan.
    got_grads = torch.autograd.grad(sum(t.sum() for t in got), [w, v])
    want_grads = torch.autograd.grad(sum(t.sum() for t in want), [w, v])
    for g, e in zip(got_grads, want_grads):
        torch.testing.assert_close(g, e)
