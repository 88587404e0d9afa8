"""Values leaving Matchbox refuse a batch with an absent example.

A batch may hold no value at all for some examples: steps past an example's end
(``x.unbind(1)[-1]``, or the state of a plain ``for xt in x.unbind(1)`` loop, both of
which run every step for every example), and, under ``@matchbox.batch``, examples that
do not run the code at hand.  Inside ``@batch`` that is how a region works, and every
op carries it (an op mixing a real value with an absent one gives an absent one).
Outside it, such a batch means the code ran steps that the loop over examples never
runs: the loop would give each example its own last value, the batch gives padding.

So the places where values leave Matchbox -- ``examples()``, ``matchbox.batch_sum``,
``batch_mean`` and ``backward()`` -- refuse a batch in which a running example is
absent (not running ones are a region's own business), naming the example.  Only
batches with static dimensions alone are checked: there an example's mask is all false
exactly when it is absent (examples of no elements, a static size 0, hold nothing
either way and are not checked).  With a dynamic dimension an all-false mask is also an
example of length 0, which the mask cannot tell from an absent one.  A batch without
a mask (every example real, the common case) costs nothing; one with a mask costs a
comparison (a host sync; inside a ``@batch`` call on an accelerator it is read when
the call ends, ``matchbox._capture.check``).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from matchbox import _capture
from matchbox._execution import running
from matchbox._padding import fill_padding


def refuse_absent(x: Any, op: str) -> None:
    """Raise ``ValueError`` if a running example of the batch ``x`` has no value (see the
    module docstring)."""
    mask = x._mask
    if mask is None or any(x.dims) or 0 in x.data.shape[1:]:
        return  # (examples without elements: absent or not, they hold nothing)
    absent = running(~mask.reshape(mask.size(0), -1).any(1))
    _capture.check(absent, functools.partial(_absent_error, op, absent))


def _absent_error(op: str, absent: torch.Tensor) -> ValueError:
    which = absent.nonzero().flatten().tolist()
    shown = ", ".join(map(str, which[:8])) + (", ..." if len(which) > 8 else "")
    return ValueError(
        f"{op}: example {which[0]} has no value here (examples without one: {shown}): it "
        "is absent, as a step past the example's end is (x.unbind(1)[-1], or the last "
        "state of a plain loop over x.unbind(1), runs every step for every example), where "
        "the loop over examples would give it its own value; run the loop inside a "
        "function decorated with @matchbox.batch, which runs each example for its own "
        "steps only, or take each example's own last step with x[:, -1]"
    )


def batch_backward(x: Any, gradient: Any, kwargs: dict[str, Any]) -> None:
    """``x.backward(gradient, **kwargs)`` of a batch: the gradient of the sum of every
    example's value (times ``gradient``), as ``backward()`` of each example in a loop."""
    refuse_absent(x, "MaskedBatch.backward")
    if gradient is not None:
        gradient = gradient.data if hasattr(gradient, "dims") else gradient
        masked = torch.where(x.mask, x.data, torch.zeros_like(x.data))
        masked.backward(torch.where(x.mask, gradient, torch.zeros_like(gradient)), **kwargs)
        return
    if x.dims:
        raise RuntimeError(
            "backward(): grad can be implicitly created only for a batch of "
            f"per-example scalars (dims == ()), but this batch has dims {x.dims}; "
            "reduce each example first (for example .sum()) or pass gradient="
        )
    fill_padding(x, 0).sum().backward(**kwargs)  # matchbox.batch_sum(x)
