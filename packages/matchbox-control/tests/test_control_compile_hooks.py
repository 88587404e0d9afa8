"""A ``@batch`` loop compiled by ``matchbox.compile`` whose body registers a tensor hook
(``h.data.register_hook(fn)``, a gradient scaled at every step): a graph's backward runs no
hooks, so the compiled gradient was the one without them, silently.  Core's
``compiler/hooks.py`` refuses the capture (in a loop captured as a scan, or unrolled): the
call runs eagerly with a warning naming the hook, equal to the loop."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, compiled_for_batches, sequences

import matchbox
from matchbox import MaskedBatch

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops


def halved(grad):
    return grad * 0.5


@matchbox.batch
def damped_rnn(x, w):
    h = (x[:, :1] * 0).sum(1)
    for xt in x.unbind(1):
        h = torch.tanh(h @ w + xt)
        if h.requires_grad:
            (h.data if isinstance(h, MaskedBatch) else h).register_hook(halved)
    return h


@pytest.mark.parametrize("loops", ["scan", "unroll"])
@pytest.mark.parametrize("lengths", [[4, 0, 6, 1], [1]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_hook_in_a_compiled_loop_runs_the_call_eagerly_with_a_warning(lengths, dtype, loops,
                                                                        monkeypatch):
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", loops)
    torch.manual_seed(0)
    w = torch.randn(3, 3, dtype=dtype)
    examples, batch = sequences(lengths, dtype=dtype)
    with pytest.raises(matchbox.compiler.CaptureError,
                       match=r"the call registers a tensor hook, register_hook\(halved\)"):
        matchbox.compile(damped_rnn, backend="aot_eager", fallback="raise")(
            batch, w.requires_grad_())
    run = compiled_for_batches(damped_rnn)
    with pytest.warns(UserWarning, match=r"eagerly.*register_hook\(halved\)"):
        assert_batch_equals_loop(run, (examples, batch), ([w] * len(lengths), w))
    assert run.compiled.specializations[0].eager_reason is not None
