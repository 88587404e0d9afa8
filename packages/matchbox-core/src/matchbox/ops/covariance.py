"""``torch.cov`` and ``torch.corrcoef``: each example's rows are its variables, its columns
their observations, as torch reads it; an example's dimension 0 (size one) makes it one
variable, so its result is one number (0-d in the loop, a batch of dims ``()`` here).

The mean and the sum of squared deviations run over each example's own observations
(padding filled with 0 and left out), divided by ``n - correction`` (0 where that is not
positive, as torch does: inf or NaN).  ``corrcoef`` of one variable is ``c / c``, torch's
formula (1, or NaN where the covariance is 0, inf or NaN).  Weights (``fweights``,
``aweights``) are refused.
"""

from __future__ import annotations

from typing import Any

import torch

from matchbox import _masking, _registry
from matchbox.masked_batch import MaskedBatch

FAMILY = "reduction"


def _covariance(op: str, input: Any, correction: Any, fweights: Any, aweights: Any) -> Any:
    if not isinstance(input, MaskedBatch):
        raise TypeError(f"{op}: the input must be the batch, got {type(input).__name__}")
    for name, weights in (("fweights", fweights), ("aweights", aweights)):
        if weights is not None:
            raise NotImplementedError(f"{op}: {name}= is not supported for batches")
    _registry.refuse_size_number(op, "correction", correction)
    if input.dim() > 2:
        raise RuntimeError(f"{op}: expected input to have two or fewer dimensions but each "
                           f"example has {input.dim()} dimensions")
    data = _masking.fill_padding(input, 0)
    if not (data.is_floating_point() or data.is_complex()):
        data = data.to(torch.get_default_dtype())
    if input.dim() == 1:  # each example (1,): one variable, one observation
        data = data.unsqueeze(-1)
        count = torch.ones(data.size(0), dtype=torch.long, device=data.device)
    else:
        count = _masking.sizes_along(input, 1)
    n = count.to(data.dtype).view(-1, 1)
    deviation = data - data.sum(-1, keepdim=True) / n
    if input.dim() == 2 and input._mask is not None and input.dims[0]:
        deviation = torch.where(input._mask, deviation, 0)
    norm = (n.view(-1) - correction).clamp(min=0)
    result = (deviation * deviation.conj()).sum(-1) / norm
    return MaskedBatch._make(result, None, ())


@_registry.implements(torch.cov, torch.Tensor.cov, family=FAMILY)
def cov(func, input, *, correction=1, fweights=None, aweights=None):
    return _covariance(_registry.op_name(func), input, correction, fweights, aweights)


@_registry.implements(torch.corrcoef, torch.Tensor.corrcoef, family=FAMILY)
def corrcoef(func, input):
    c = _covariance(_registry.op_name(func), input, 1, None, None)
    return c / c
