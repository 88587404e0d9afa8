"""Packed batches for Matchbox (distribution ``matchbox-packed``).

This subpackage will hold ``PackedBatch``: examples packed along the batch
dimension and one dynamic dimension, with offsets instead of padding, and the
cuDNN path for recurrent networks.
"""

__all__: list[str] = []
