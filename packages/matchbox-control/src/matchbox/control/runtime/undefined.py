"""A local variable's value before its first assignment (``Undefined``)."""

from __future__ import annotations

from typing import Any


class Undefined:
    """A local variable's value before its first assignment, bound where a merge may read
    it before the user's code assigned it: any use raises, as an unassigned local would."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def _unbound(self, *args: Any, **kwargs: Any) -> Any:
        raise UnboundLocalError(
            f"cannot access local variable '{self.name}' where it is not associated "
            "with a value (in a @batch function: it is assigned only on a path this "
            "example did not take)"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._unbound()

    def __repr__(self) -> str:
        return f"<undefined local variable '{self.name}'>"


for _dunder in ("__str__", "__format__", "__bool__", "__call__", "__iter__", "__len__", "__getitem__", "__setitem__",
                "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__",
                "__lt__", "__le__", "__gt__", "__ge__", "__float__", "__int__", "__index__"):
    setattr(Undefined, _dunder, Undefined._unbound)
