"""Value makers for loss tests: ``maker(shape, dtype)`` gives a tensor of that shape."""

from __future__ import annotations

import torch


def normal(shape, dtype):
    return torch.randn(shape, dtype=dtype)


def signs(shape, dtype):
    """Targets of -1 and 1 (hinge, margin ranking, cosine embedding losses)."""
    return torch.randint(0, 2, shape).to(dtype) * 2 - 1
