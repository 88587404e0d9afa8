"""The recompile limit (``compiler/recompiles.py``): a value a graph freezes is part of its
key, so one that changes at every call (a global list the training loop appends to) used
to capture and compile a graph at every call, silently.  Past ``recompile_limit`` graphs a
call that needs a new one runs eagerly, with one warning naming what changed; the graphs
compiled before keep running."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import matchbox
from matchbox.compiler import CaptureError

BACKEND = "aot_eager"
HISTORY: list[float] = []  # appended to at every call, read by _by_history


def _batch(dtype=torch.float64):
    torch.manual_seed(0)
    examples = [torch.randn(1, n, 3, dtype=dtype) for n in (3, 0, 5, 1)]
    return matchbox.MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def _assert_equals_eager(got, expected):
    got, expected = list(got.examples()), list(expected.examples())
    assert len(got) == len(expected)
    for value, eager in zip(got, expected):
        torch.testing.assert_close(value, eager)


def _by_history(x):
    return x.sum(1) * len(HISTORY) + (HISTORY[-1] if HISTORY else 0.0)


def test_a_global_list_changed_at_every_call_stops_capturing_at_the_limit():
    xb = _batch()
    compiled = matchbox.compile(_by_history, backend=BACKEND)
    message = (r"matchbox.compile\(_by_history\): recompile_limit=8 reached \(8 graphs "
               r"captured\): calls that need a new graph run eagerly from now on \(those "
               r"compiled still run\); this call's key differs from the last graph's in the "
               r"global or closed-over value HISTORY\. A value that changes at every call "
               r"\(a global list appended to, a float argument, a size bucket= does not "
               r"round\) captures a graph each time: pass it as a tensor argument, or raise "
               r"recompile_limit \(None: no limit\)")
    try:
        for step in range(8):
            HISTORY.append(float(step))
            _assert_equals_eager(compiled(xb), _by_history(xb))
        assert len(compiled.specializations) == 8
        HISTORY.append(8.0)
        with pytest.warns(UserWarning, match=message):
            _assert_equals_eager(compiled(xb), _by_history(xb))
        for step in range(9, 12):  # no further warning, and no further capture
            HISTORY.append(float(step))
            _assert_equals_eager(compiled(xb), _by_history(xb))
        del HISTORY[3:]  # a key captured before the limit runs its graph
        _assert_equals_eager(compiled(xb), _by_history(xb))
    finally:
        HISTORY.clear()
    specs = compiled.specializations
    assert len(specs) == 9 and all(s.compiled is not None for s in specs[:8])
    assert [s.calls for s in specs] == [1, 1, 2, 1, 1, 1, 1, 1, 4]
    assert specs[8].eager_reason == "recompile_limit=8 reached"
    assert specs[8].compiled is None


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = 1.0
        # A plain weight, not nn.Linear: core's tests run without matchbox-nn.
        self.weight = nn.Parameter(torch.randn(3, 3, dtype=torch.float64))

    def forward(self, x):
        return x.sum(1) @ self.weight / self.temperature


def test_the_warning_names_a_modules_attribute_and_an_argument():
    xb = _batch()
    model = Counted()
    compiled = matchbox.compile(model, backend=BACKEND, recompile_limit=2)
    _assert_equals_eager(compiled(xb), model(xb))
    model.temperature = 2.0
    _assert_equals_eager(compiled(xb), model(xb))
    model.temperature = 3.0
    with pytest.warns(UserWarning, match=r"recompile_limit=2 reached \(2 graphs captured\).* "
                                         r"differs from the last graph's in the attribute "
                                         r"self\.temperature\. "):
        _assert_equals_eager(compiled(xb), model(xb))
    assert len(compiled.specializations) == 3

    def scaled(x, t):
        return x.sum(1) * t

    compiled = matchbox.compile(scaled, backend=BACKEND, recompile_limit=1)
    _assert_equals_eager(compiled(xb, 1.0), scaled(xb, 1.0))
    with pytest.warns(UserWarning, match=r"differs from the last graph's in a plain argument "
                                         r"\(1\.0 -> 2\.5\)\. "):
        _assert_equals_eager(compiled(xb, 2.5), scaled(xb, 2.5))
    compiled = matchbox.compile(scaled, backend=BACKEND, recompile_limit=1, dynamic=False,
                                bucket=None)
    _assert_equals_eager(compiled(xb, 1.0), scaled(xb, 1.0))
    with pytest.warns(UserWarning, match=r"differs from the last graph's in the size of the "
                                         r"arguments' tensor 0 \(\(4, 5, 3\) -> \(3, 5, 3\)\)"):
        fewer = matchbox.MaskedBatch.fromlist(list(xb.examples())[:3], (True, False))
        _assert_equals_eager(compiled(fewer, 1.0), scaled(fewer, 1.0))


def test_fallback_raise_raises_at_the_limit_and_the_limit_is_checked():
    xb = _batch()

    def scaled(x, t):
        return x.sum(1) * t

    compiled = matchbox.compile(scaled, backend=BACKEND, recompile_limit=1, fallback="raise")
    compiled(xb, 1.0)
    with pytest.raises(CaptureError, match=r"recompile_limit=1 reached"):
        compiled(xb, 2.0)
    unlimited = matchbox.compile(scaled, backend=BACKEND, recompile_limit=None)
    for t in range(9):
        _assert_equals_eager(unlimited(xb, float(t)), scaled(xb, float(t)))
    assert len(unlimited.specializations) == 9
    assert all(s.compiled is not None for s in unlimited.specializations)
    with pytest.raises(ValueError, match=r"recompile_limit must be an int >= 0 \(how many "
                                         r"graphs to capture before calls that need another "
                                         r"run eagerly\) or None \(no limit\), got -1"):
        matchbox.compile(scaled, recompile_limit=-1)
