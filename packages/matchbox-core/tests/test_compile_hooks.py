"""``matchbox.compile`` of a call that registers a tensor hook (``t.register_hook(fn)``,
``register_post_accumulate_grad_hook``, ``retain_grad``): a graph's backward is derived
from its ops and runs no hooks, so the compiled gradient was the one without the hook
(silently).  The capture is refused: the call runs eagerly with a warning naming the hook
(``fallback="raise"``: ``CaptureError``), and its gradient is eager's."""

from __future__ import annotations

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

BACKEND = "aot_eager"


def tripled(grad):
    return grad * 3


def hook_on_the_data(x, w):
    """A hook on a batch's data (a batch itself has no ``register_hook``; in the loop, on
    the example)."""
    h = x * w
    if h.requires_grad:  # (mb_assert runs it without gradients too)
        (h.data if isinstance(h, MaskedBatch) else h).register_hook(tripled)
    return (h * h).sum(1)


def hook_on_a_plain_tensor(x, w):
    w2 = w * 1
    if w2.requires_grad:
        w2.register_hook(lambda grad: grad.clamp(max=0.5))
    return (x * w2).tanh().sum(1)


def _inputs(dtype):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, dtype=dtype) for n in (3, 0, 1, 5)]
    batch = MaskedBatch.fromlist(examples, (True,), padding_value=float("nan"))
    w = torch.tensor(1.5, dtype=dtype, requires_grad=True)
    return examples, batch, w


@pytest.mark.parametrize(("f", "hook"), [(hook_on_the_data, r"register_hook\(tripled\)"),
                                         (hook_on_a_plain_tensor, r"register_hook\(hook_on_a_"
                                          r"plain_tensor\.<locals>\.<lambda>\)")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_hook_registered_in_the_call_runs_it_eagerly_with_a_warning(f, hook, dtype):
    examples, batch, w = _inputs(dtype)
    with pytest.raises(matchbox.compiler.CaptureError,
                       match=r"the call registers a tensor hook, " + hook + r": a graph's "
                             r"backward is derived from its ops and runs no hooks"):
        matchbox.compile(f, backend=BACKEND, fallback="raise")(batch, w)
    compiled = matchbox.compile(f, backend=BACKEND)
    with pytest.warns(UserWarning, match=r"runs .* eagerly.*tensor hook, " + hook):
        mb_assert(lambda x, v: (compiled if isinstance(x, MaskedBatch) else f)(x, v),
                  [examples, [w] * len(examples)], [batch, w], len(examples))
    # and the gradient is eager Matchbox's, the hook's included
    grads = []
    for g in (f, compiled):
        xb = MaskedBatch.fromlist(examples, (True,), padding_value=float("nan"))
        xb.requires_grad_()
        grads.append(torch.autograd.grad(matchbox.batch_sum(g(xb, w)), (xb.data, w)))
    torch.testing.assert_close(grads[0], grads[1], equal_nan=True)


def retained(x, w):
    h = x * w
    h.data.retain_grad()
    return h.sum(1)


def test_retain_grad_in_the_call_is_refused_too():
    _, batch, w = _inputs(torch.float64)
    with pytest.raises(matchbox.compiler.CaptureError,
                       match=r"the call registers a tensor hook, retain_grad\(\)"):
        matchbox.compile(retained, backend=BACKEND, fallback="raise")(batch, w)


def test_a_hook_on_the_compiled_calls_result_still_runs():
    """Outside the call, the result is a real tensor: its hook runs as ever."""
    examples, batch, w = _inputs(torch.float64)
    f = matchbox.compile(lambda x, v: (x * v).sum(1), backend=BACKEND, fallback="raise")
    out = f(batch.requires_grad_(), w)
    seen = []
    out.data.register_hook(lambda grad: seen.append(grad.clone()) or grad * 2)
    (gw,) = torch.autograd.grad(matchbox.batch_sum(out), w)
    assert len(seen) == 1
    torch.testing.assert_close(gw, 2 * sum(e.sum() for e in examples))


def force_from_energy(x, w):
    """A gradient computed inside the call (a force ``-dE/dx``) and differentiated again."""
    with torch.enable_grad():
        x2 = x.detach().requires_grad_()
        energy = (x2 @ w).tanh().sum(-1).sum(1)
        data = x2.data if isinstance(x2, MaskedBatch) else x2
        total = matchbox.batch_sum(energy) if isinstance(energy, MaskedBatch) else energy.sum()
        (force,) = torch.autograd.grad(total, data, create_graph=True)
    return (force * force).sum()


def test_a_gradient_computed_inside_the_call_runs_it_eagerly():
    """The graph held the inner backward's ops as traced while captured: the value was
    eager's, the gradient of the result with respect to ``w`` was not (silently)."""
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=torch.float64) for n in (3, 0, 5, 1)]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(matchbox.compiler.CaptureError,
                       match=r"the call computes a gradient \(torch.autograd.grad\): a graph "
                             r"holds the backward's ops as traced while it is captured"):
        matchbox.compile(force_from_energy, backend=BACKEND, fallback="raise")(batch, w)
    compiled = matchbox.compile(force_from_energy, backend=BACKEND)
    with pytest.warns(UserWarning, match=r"eagerly.*computes a gradient"):
        (got,) = torch.autograd.grad(compiled(batch, w), w)
    loop = sum(force_from_energy(x, w) for x in examples)
    (expected,) = torch.autograd.grad(loop, w)
    torch.testing.assert_close(got, expected)
