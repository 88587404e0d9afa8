"""Data loading for Matchbox (distribution ``matchbox-data``): from raw text to batches.

- ``MaskedBatchField`` / ``PackedBatchField``: torchtext-style fields (tokenize,
  lower, init/eos tokens, ``build_vocab``) whose ``process`` gives batches;
- ``Vocab``: tokens ↔ ids with frequency cut-offs, save/load;
- ``Collate``: a ``collate_fn`` for ``torch.utils.data.DataLoader`` (one field,
  a tuple or a dict of fields);
- ``BucketBatchSampler``: length-bucketed batches by count or by padded tokens;
- ``corpus``: the Python standard library's sources as an offline text corpus;
- ``matchbox.data.torchtext``: the adapter for torchtext (extra ``torchtext``);
- ``matchbox.data.huggingface``: a ``tokenizers`` tokenizer as a field's ``tokenize``
  and vocabulary (extra ``hf``, with ``datasets``).

``PackedBatchField`` imports ``matchbox.packed`` when first used, so this
distribution depends on ``matchbox-core`` only.
"""

from matchbox.compiler import hide_from_torch_compile
from matchbox.data import corpus
from matchbox.data.collate import Collate
from matchbox.data.field import FieldError, MaskedBatchField, PackedBatchField
from matchbox.data.sampler import BucketBatchSampler
from matchbox.data.tokenizers import get_tokenizer
from matchbox.data.vocab import Vocab

hide_from_torch_compile(__name__)  # torch.compile runs this package eagerly

__all__ = [
    "BucketBatchSampler",
    "Collate",
    "FieldError",
    "MaskedBatchField",
    "PackedBatchField",
    "Vocab",
    "corpus",
    "get_tokenizer",
]
