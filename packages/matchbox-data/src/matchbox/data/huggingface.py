"""Hugging Face ``tokenizers`` and ``datasets`` with Matchbox fields (the ``hf`` extra).

Two ways in, both tested with the real packages (``tests/test_huggingface.py``):

- Token ids already in a ``datasets`` column (``dataset.map`` with a tokenizer's
  ``encode_batch``): ``MaskedBatchField(use_vocab=False)`` batches them, ``Collate``
  picks the column (``None`` keeps another as a list), ``BucketBatchSampler`` buckets
  by the columns' lengths. Nothing here is needed for that.
- Text, with a ``tokenizers.Tokenizer`` as the field's ``tokenize``
  (:func:`tokenize_with`) and its vocabulary as the field's vocab
  (:func:`vocab_from_tokenizer`): the field's ids are the tokenizer's ids, and its
  ``init_token``/``eos_token``/``pad_token``/``unk_token`` are the tokenizer's
  tokens of those names.

Neither function imports ``tokenizers`` or ``datasets``: they take the objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from matchbox.data.vocab import Vocab

__all__ = ["tokenize_with", "vocab_from_tokenizer"]


def tokenize_with(tokenizer: Any, *, add_special_tokens: bool = False
                  ) -> Callable[[str], list[str]]:
    """A field's ``tokenize``: the tokens ``tokenizer.encode(text)`` gives.

    ``add_special_tokens=False`` by default: a field adds its own ``init_token`` and
    ``eos_token``; ``True`` keeps the tokenizer's post-processor (``[CLS] ... [SEP]``).
    """
    if not (callable(getattr(tokenizer, "encode", None))
            and callable(getattr(tokenizer, "get_vocab", None))):
        raise TypeError(f"tokenize_with: expected a tokenizers.Tokenizer (with encode and "
                        f"get_vocab), got "
                        f"{type(tokenizer).__name__}")

    def tokenize(text: str) -> list[str]:
        return list(tokenizer.encode(text, add_special_tokens=add_special_tokens).tokens)

    return tokenize


def vocab_from_tokenizer(tokenizer: Any, *, unk_token: str | None = None) -> Vocab:
    """The tokenizer's vocabulary (added tokens included) as a ``Vocab`` with its ids.

    ``unk_token``: the token unknown tokens map to; by default the tokenizer model's
    own (``WordLevel``/``WordPiece``/``BPE(unk_token=...)``), or none.
    """
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if not callable(get_vocab):
        raise TypeError(f"vocab_from_tokenizer: expected a tokenizers.Tokenizer (with "
                        f"get_vocab), got {type(tokenizer).__name__}")
    stoi = get_vocab(with_added_tokens=True)
    itos: list[str | None] = [None] * len(stoi)
    for token, index in stoi.items():
        if not 0 <= index < len(itos) or itos[index] is not None:
            raise ValueError(
                f"vocab_from_tokenizer: the tokenizer's ids are not 0..{len(stoi) - 1}, one per "
                f"token (token {token!r} has id {index}); a Vocab needs consecutive ids")
        itos[index] = token
    if unk_token is None:
        unk_token = getattr(getattr(tokenizer, "model", None), "unk_token", None)
        if unk_token not in stoi:
            unk_token = None
    return Vocab.from_itos(itos, unk_token=unk_token)
