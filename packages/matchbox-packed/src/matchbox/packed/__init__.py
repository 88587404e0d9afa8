"""Packed batches for Matchbox (distribution ``matchbox-packed``).

``PackedBatch`` holds examples ``(1, T_e, *S)`` packed along the batch and the
dynamic dimension 1, without padding, in the layout cuDNN's recurrent networks
read (``PackedSequence``'s).  Importing this package registers its ops into
matchbox-core's one registry (batch type ``"PackedBatch"``) and the
conversion that lets it meet a ``MaskedBatch`` in one op (see
``matchbox.packed.mixing`` for the table).
"""

from matchbox.compiler import hide_from_torch_compile
from matchbox.packed import ops  # noqa: F401  (importing the families registers them)
from matchbox.packed.memory import MemoryReport, memory_report, nbytes
from matchbox.packed.mixing import as_masked, as_packed
from matchbox.packed.packed_batch import PackedBatch

hide_from_torch_compile(__name__)  # torch.compile runs this package eagerly

__all__ = ["MemoryReport", "PackedBatch", "as_masked", "as_packed", "memory_report", "nbytes"]
