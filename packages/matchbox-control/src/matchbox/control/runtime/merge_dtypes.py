"""A variable that holds tensors of two dtypes, one for the examples that ran a region and
one for the others (``y = y.long()`` under ``if``): refused at the merge."""

from __future__ import annotations

from typing import Any

from matchbox.extending import EXAMPLE_SCALAR as SCALAR


def refuse_mixed_dtypes(new: Any, old: Any, name: str) -> None:
    """Refuse merging batches ``new`` and ``old`` (both ``MaskedBatch``) of two dtypes:
    in the loop each example's tensor keeps its own dtype, where the batch's ``where``
    would promote both to one, silently (an ``int64`` variable became ``float64``, for
    every example, even where all of them assigned the ``int64`` value).  Batches of
    one number per example (Python numbers in the loop, whose ``int`` and ``float`` mix
    as the batch's do) are not refused."""
    dtype, other = new._data.dtype, old._data.dtype
    if dtype is other or (new._scalar is SCALAR and old._scalar is SCALAR):
        return
    from matchbox.control.runtime.select import user_line  # it imports this module
    raise TypeError(
        f"@batch: '{name}' is a {dtype} tensor for the examples that ran this code and a "
        f"{other} tensor for the others ({user_line()}); a batch holds one dtype, where "
        "the loop's examples would keep their own: convert both values to one dtype "
        f"(e.g. '{name} = {name}.to(torch.float64)' on both paths)")
