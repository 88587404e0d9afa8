"""The torchtext adapter (extra ``torchtext``): torchtext vocabularies and transforms in fields.

- A torchtext ``Vocab`` backs a field: ``MaskedBatchField(vocab=tt_vocab)`` (or
  ``field.vocab = TorchtextVocab(tt_vocab)``). Its default index, when set,
  plays the part of the unknown token.
- torchtext transforms and tokenizers are callables: pass one as a field's
  ``tokenize`` or ``preprocessing``.
- torchtext datasets are iterables of tuples: ``Collate((LABEL, TEXT))`` batches
  them, and ``build_vocab_from_torchtext`` builds a torchtext ``Vocab`` from a
  field's preprocessing.

torchtext's last release, 0.18, is built for torch 2.3.x only:
``pip install "matchbox-data[torchtext]"`` with torch 2.3.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import Any

from matchbox.data.vocab import TokenLookups

_INSTALL = (
    'the torchtext adapter needs torchtext: pip install "matchbox-data[torchtext]" '
    "(torchtext 0.18, its last release, requires torch 2.3.x)"
)


def require_torchtext() -> Any:
    """Import torchtext, or raise an ``ImportError`` that says how to get it."""
    try:
        return importlib.import_module("torchtext")
    except ModuleNotFoundError as error:
        if error.name != "torchtext":
            raise
        raise ImportError(_INSTALL) from None
    except (ImportError, OSError) as error:
        # An installed torchtext built for another torch fails to load its library.
        raise ImportError(f"{_INSTALL}; importing the installed one failed: {error}") from error


class TorchtextVocab(TokenLookups):
    """A torchtext ``Vocab`` seen through the interface fields use (``stoi``, ``itos``, ...)."""

    def __init__(self, vocab: Any):
        require_torchtext()
        self.torchtext_vocab = vocab
        self.itos: list[str] = vocab.get_itos()
        self.stoi: dict[str, int] = vocab.get_stoi()
        try:
            self.unk_index: int | None = vocab.get_default_index()
        except RuntimeError:
            self.unk_index = None
        self.unk_token = None if self.unk_index is None else self.itos[self.unk_index]

    def __repr__(self) -> str:
        return f"TorchtextVocab({len(self)} tokens, unk_token={self.unk_token!r})"


def build_vocab_from_torchtext(
    field: Any,
    *sources: Iterable[Any],
    min_freq: int = 1,
    max_tokens: int | None = None,
    specials: Sequence[str] | None = None,
) -> Any:
    """Build a torchtext ``Vocab`` from raw examples, preprocessed by ``field``, and use it.

    The field's unk/pad/init/eos tokens come first; the unknown token becomes the
    default index. Returns the torchtext ``Vocab``.
    """
    torchtext = require_torchtext()
    own = [field.unk_token, field.pad_token, field.init_token, field.eos_token]
    all_specials = [t for t in own if t is not None] + list(specials or ())

    def token_lists() -> Iterable[list]:
        for source in sources:
            for example in source:
                tokens = field.preprocess(example)
                yield list(tokens) if field.sequential else [tokens]

    vocab = torchtext.vocab.build_vocab_from_iterator(
        token_lists(), min_freq=min_freq, specials=all_specials, special_first=True,
        max_tokens=max_tokens,
    )
    if field.unk_token is not None:
        vocab.set_default_index(vocab[field.unk_token])
    field.vocab = TorchtextVocab(vocab)
    return vocab
