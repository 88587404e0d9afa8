"""Data loading for Matchbox (distribution ``matchbox-data``).

This subpackage will hold the fields ``MaskedBatchField`` and ``PackedBatchField``,
vocabularies, a ``collate_fn`` for ``torch.utils.data.DataLoader``, a
length-bucketing batch sampler, and (with the ``torchtext`` extra) an adapter for
torchtext vocabularies and datasets. ``PackedBatchField`` imports
``matchbox.packed`` lazily, so this distribution depends on ``matchbox-core`` only.
"""

__all__: list[str] = []
