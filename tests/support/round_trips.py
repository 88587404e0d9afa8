"""Saving and loading through an in-memory buffer, for every batch type's tests of
PyTorch's tools: ``torch.save``/``torch.load`` and ``torch.export.save``/``load``."""

from __future__ import annotations

import io
from typing import Any

import torch


def saved(obj: Any) -> io.BytesIO:
    """``obj`` written by ``torch.save``, ready for ``torch.load``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def export_reloaded(program: Any) -> Any:
    """An exported program written by ``torch.export.save`` and read back."""
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)


def exports(module: torch.nn.Module, *args: Any) -> bool:
    """Whether ``torch.export`` exports ``module`` on ``args``, and saves and loads it."""
    try:
        export_reloaded(torch.export.export(module, args))
    except Exception:  # noqa: BLE001 (any failure of the tracer means it cannot)
        return False
    return True
