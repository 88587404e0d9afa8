"""The ATen ops a piece of code runs, counted by name (``TorchDispatchMode``): what the
tests of issue 22 pin. Counts do not depend on the machine."""

from __future__ import annotations

import collections

from torch.utils._python_dispatch import TorchDispatchMode

#: The ops that read a value on the host: a device-to-host sync on an accelerator.
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select")


class CountOps(TorchDispatchMode):
    """``with CountOps() as counted: ...``, then ``counted.ops["where"]``, ``counted.total``,
    ``counted.syncs``."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def syncs(self) -> int:
        return sum(self.ops[op] for op in SYNC_OPS)
