"""``Vocab``: a mapping between tokens and integer ids, built from token counts.

Ids are assigned in a fixed order, so the same data always gives the same
vocabulary: the specials first (in the order given), then the other tokens by
decreasing frequency, ties broken by the token's text.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

_FORMAT = "matchbox-data vocab 1"


class TokenLookups:
    """Lookups shared by every vocabulary a field can use (``Vocab``, ``TorchtextVocab``).

    Subclasses set ``stoi``, ``itos`` and ``unk_index`` (``None`` without an unknown token).
    """

    stoi: dict
    itos: list
    unk_index: int | None

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: Hashable) -> bool:
        return token in self.stoi

    def __getitem__(self, token: Hashable) -> int:
        """The id of ``token``, or the unknown token's; ``KeyError`` without one."""
        index = self.stoi.get(token, self.unk_index)
        if index is None:
            raise KeyError(token)
        return index

    def lookup_indices(self, tokens: Iterable[Hashable]) -> list[int]:
        """The ids of ``tokens`` (``KeyError`` names the first unknown one without an unk)."""
        tokens = list(tokens)  # an iterator could not be read twice for the error
        get, unk = self.stoi.get, self.unk_index
        indices = [get(token, unk) for token in tokens]
        if unk is None and None in indices:
            raise KeyError(tokens[indices.index(None)])
        return indices  # type: ignore[return-value]

    def lookup_tokens(self, indices: Iterable[int]) -> list[Hashable]:
        """The tokens of ``indices``; an id outside ``[0, len)`` raises ``IndexError``."""
        itos, size = self.itos, len(self.itos)
        tokens = []
        for index in indices:
            if not 0 <= index < size:
                raise IndexError(f"token id {index} is outside the vocabulary [0, {size})")
            tokens.append(itos[index])
        return tokens


class Vocab(TokenLookups):
    """Tokens ↔ ids.

    ``stoi`` maps tokens to ids, ``itos`` ids to tokens, ``freqs`` holds the
    counts the vocabulary was built from. A token that is not in the
    vocabulary maps to ``unk_token``'s id when there is one; without one,
    looking it up raises ``KeyError``.
    """

    def __init__(
        self,
        counter: Counter | None = None,
        *,
        max_size: int | None = None,
        min_freq: int = 1,
        specials: Sequence[Hashable] = ("<unk>", "<pad>"),
        unk_token: Hashable | None = "<unk>",
    ):
        if max_size is not None and max_size < 0:
            raise ValueError(f"Vocab: max_size must be at least 0, got {max_size}")
        if min_freq < 1:
            raise ValueError(f"Vocab: min_freq must be at least 1, got {min_freq}")
        specials = list(dict.fromkeys(specials))  # keep the first of any repeats
        if unk_token is not None and unk_token not in specials:
            specials.insert(0, unk_token)
        self.freqs: Counter = Counter(counter or {})
        self.unk_token = unk_token
        candidates = sorted(
            (token for token, count in self.freqs.items()
             if count >= min_freq and token not in specials),
            key=lambda token: (-self.freqs[token], str(token)),
        )
        if max_size is not None:
            # max_size counts the ordinary tokens; the specials always have a place.
            candidates = candidates[:max_size]
        self._set_itos(specials + candidates)

    # ------------------------------------------------------------------ building

    @classmethod
    def from_iterator(cls, token_lists: Iterable[Iterable[Hashable]], **kwargs: Any) -> Vocab:
        """Count the tokens of an iterable of token lists and build a vocabulary."""
        counter: Counter = Counter()
        for tokens in token_lists:
            counter.update(tokens)
        return cls(counter, **kwargs)

    @classmethod
    def from_itos(cls, itos: Sequence[Hashable], *, unk_token: Hashable | None = "<unk>") -> Vocab:
        """A vocabulary whose ids are exactly the positions in ``itos``."""
        if unk_token is not None and unk_token not in itos:
            raise ValueError(f"Vocab.from_itos: unk_token {unk_token!r} is not in itos")
        vocab = cls(specials=(), unk_token=None)
        vocab.unk_token = unk_token
        vocab._set_itos(list(itos))
        return vocab

    def _set_itos(self, itos: list[Hashable]) -> None:
        self.itos = itos
        self.stoi = {token: index for index, token in enumerate(itos)}
        if len(self.stoi) != len(itos):
            repeated = sorted({str(t) for t in itos if itos.count(t) > 1})
            raise ValueError(f"Vocab: tokens appear more than once: {repeated}")
        self.unk_index = None if self.unk_token is None else self.stoi[self.unk_token]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocab) and self.itos == other.itos
                and self.unk_token == other.unk_token)

    __hash__ = None  # type: ignore[assignment]  # mutable: built, then loaded or extended

    def __repr__(self) -> str:
        head = ", ".join(repr(t) for t in self.itos[:5])
        more = ", ..." if len(self.itos) > 5 else ""
        return f"Vocab({len(self)} tokens: [{head}{more}], unk_token={self.unk_token!r})"

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary (tokens, unknown token, counts) as JSON.

        Tokens must be strings (JSON object keys are strings).
        """
        for token in self.itos:
            if not isinstance(token, str):
                raise TypeError(
                    f"Vocab.save: only string tokens can be saved, got {token!r} "
                    f"({type(token).__name__})"
                )
        payload = {"format": _FORMAT, "itos": self.itos, "unk_token": self.unk_token,
                   "freqs": dict(self.freqs)}
        with open(path, "w", encoding="utf-8") as file:
            json.dump(payload, file, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """Read a vocabulary written by ``save``: the same ids for the same tokens."""
        with open(path, encoding="utf-8") as file:
            payload = json.load(file)
        if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
            raise ValueError(f"Vocab.load: {os.fspath(path)!r} is not a saved matchbox-data Vocab")
        vocab = cls.from_itos(payload["itos"], unk_token=payload["unk_token"])
        vocab.freqs = Counter(payload["freqs"])
        return vocab
