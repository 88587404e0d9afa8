"""``var``/``std`` over a dynamic dimension while a call is captured: the variance written
so that the graph's own derivative is :class:`~matchbox.ops.reductions.variance._Variance`'s
backward (torch's ``var_backward``).

A graph holds a Function's forward ops, not its backward.  Differentiated as written, the
forward also sent gradient through the mean, and an example holding ``inf`` (its mean
``inf``, ``inf - inf`` NaN) got NaN at every position where the loop gives ``±inf`` and
NaN at the ``inf`` alone; an example of ``n < correction`` values got the derivative of
the clamped ``n - correction`` (NaN) for torch's unclamped ``2 / (n - correction)``.

Each example takes one of two forms, chosen by ``where`` on a condition of its own, each
form's input cut by a ``where`` on the same condition (so no NaN of one reaches the
other's gradient):

- ``n - correction > 0`` (and ``== 0`` with ``dim``): ``sum((x - mean)**2) / dof``, the
  mean held constant: its derivative is ``2 * (x - mean) / dof``, the backward's;
- otherwise the forward's value, plus a term whose value is zero and whose derivative is
  the backward's: ``T - T.detach()`` with ``T = sum((x - mean)**2) / dof`` (``dof < 0``,
  finite: ``2 * (x - mean) / dof``); for ``var(x)`` without ``dim``, torch's NaN where
  ``x == mean`` and inf elsewhere, as ``m * sqrt(x - x.detach())`` (its derivative at 0 is
  inf; ``m = 0`` makes it NaN) and, at a non-finite ``x`` (the example's value is NaN
  anyway), ``x * factor``.
"""

from __future__ import annotations

import math

import torch


def degenerate_factor(at_mean: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``var(x)``'s gradient factor where ``n <= correction`` (torch's ``var_backward``):
    NaN where ``x == mean``, inf elsewhere."""
    return torch.where(at_mean, math.nan, math.inf).to(dtype)


def _squares(x: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor,
             reduced: tuple[int, ...]) -> torch.Tensor:
    centred = torch.where(mask, x - mean, 0)
    return (centred * centred).sum(reduced, keepdim=True)


def captured_variance(data: torch.Tensor, mask: torch.Tensor, reduced: tuple[int, ...],
                      n: torch.Tensor, correction: float, every_dim: bool) -> torch.Tensor:
    """The variance of each example's real positions (``data``'s padding filled with 0),
    differentiable as :class:`~matchbox.ops.reductions.variance._Variance` is."""
    plain = data.detach()
    mean = plain.sum(reduced, keepdim=True) / n
    dof = n - correction
    value = _squares(plain, mask, mean, reduced) / dof.clamp(min=0)
    natural = dof > 0 if every_dim else dof >= 0
    x = torch.where(natural, data, 0)
    result = _squares(x, mask, mean, reduced) / dof.clamp(min=0)
    x = torch.where(natural, 0, data)
    if not every_dim:
        term = _squares(x, mask, mean, reduced) / torch.where(natural, -1, dof)
    else:
        factor = degenerate_factor(plain == mean, data.dtype)
        finite = plain.isfinite()
        at = torch.where(finite, x, 0)
        root = (at - at.detach()).sqrt() * torch.where(factor.isnan(), 0, 1).to(data.dtype)
        off = torch.where(finite, 0, x) * factor
        term = torch.where(mask, torch.where(finite, root, off), 0).sum(reduced, keepdim=True)
    return torch.where(natural, result, value + (term - term.detach()))
