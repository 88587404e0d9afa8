"""Annotations that passes leave on AST nodes for later passes."""

from __future__ import annotations

from typing import Any

_KEY = "_matchbox_anno"

# A `for` loop's extra test (the break/return flags), checked at every step.
EXTRA_TEST = "extra_test"


def get(node: Any, key: str, default: Any = None) -> Any:
    return getattr(node, _KEY, {}).get(key, default)


def set_(node: Any, key: str, value: Any) -> None:
    if not hasattr(node, _KEY):
        setattr(node, _KEY, {})
    getattr(node, _KEY)[key] = value
