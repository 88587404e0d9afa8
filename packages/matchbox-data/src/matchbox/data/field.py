"""Fields: from raw examples (text, tokens, numbers) to Matchbox batches.

A field says how one column of a dataset becomes tensors, in the style of
torchtext's (pre-0.12) ``Field``: tokenize, lower-case, add ``init_token`` /
``eos_token``, look tokens up in a vocabulary (``build_vocab``), and batch.
``MaskedBatchField`` produces ``MaskedBatch``; ``PackedBatchField`` produces
``matchbox.packed.PackedBatch`` (imported when first used).

What one example becomes, per kind of field (``B`` examples per batch):

| field                                   | one example           | batch dims                 |
|-----------------------------------------|-----------------------|----------------------------|
| sequential, ``use_vocab=True``          | ``(1, length)`` ids   | ``(True,)``                |
| sequential, ``use_vocab=False``         | ``(1, length, *s)``   | ``(True, False, ...)``     |
| non-sequential, ``use_vocab=True``      | ``(1,)`` one id       | ``()``                     |
| non-sequential, ``use_vocab=False``     | ``(1, *s)``           | ``(False, ...)``           |

The batch's ``examples()`` are exactly the per-example tensors that
``numericalize`` returns. Batch dimension 0 is the batch, so sequential fields
need ``batch_first=True``, as in the original Matchbox. Nothing is truncated
or dropped: bad input raises ``FieldError`` (or ``TypeError`` for values of the
wrong kind) naming the field and the example index.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import torch

from matchbox import MaskedBatch
from matchbox.data.tokenizers import Tokenizer, get_tokenizer
from matchbox.data.vocab import Vocab


class FieldError(ValueError):
    """An example a field cannot turn into a batch; the message names field and example."""


class _Field:
    """What both fields share: preprocessing, the vocabulary, numericalisation."""

    def __init__(
        self,
        *,
        sequential: bool = True,
        use_vocab: bool = True,
        tokenize: str | Tokenizer | None = "split",
        lower: bool = False,
        init_token: Hashable | None = None,
        eos_token: Hashable | None = None,
        unk_token: Hashable | None = "<unk>",
        pad_token: Hashable | None = "<pad>",
        preprocessing: Callable[[Any], Any] | None = None,
        postprocessing: Callable[[list, Any], list] | None = None,
        batch_first: bool = True,
        dtype: torch.dtype = torch.long,
        vocab: Any = None,
        name: str | None = None,
    ):
        self.name = name
        if sequential and not batch_first:
            raise ValueError(
                f"{self._label()}: sequential fields need batch_first=True (dimension 0 of a "
                "batch is always the batch)"
            )
        if not sequential and (init_token is not None or eos_token is not None):
            raise ValueError(
                f"{self._label()}: init_token and eos_token need sequential=True"
            )
        if not use_vocab and (init_token is not None or eos_token is not None):
            raise ValueError(
                f"{self._label()}: init_token and eos_token need use_vocab=True (a numeric "
                "field has no tokens)"
            )
        if use_vocab and (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
            raise ValueError(
                f"{self._label()}: a field with use_vocab=True holds token ids and needs an "
                f"integer dtype, got {dtype}"
            )
        self.sequential = sequential
        self.use_vocab = use_vocab
        self.tokenize = get_tokenizer(tokenize)
        self.lower = lower
        self.init_token = init_token
        self.eos_token = eos_token
        self.unk_token = unk_token
        self.pad_token = pad_token
        self.preprocessing = preprocessing
        self.postprocessing = postprocessing
        self.batch_first = batch_first
        self.dtype = dtype
        self.vocab = _as_vocab(vocab) if vocab is not None else None

    # ------------------------------------------------------------------ naming

    def _label(self, label: str | None = None) -> str:
        name = label if label is not None else self.name
        kind = type(self).__name__
        return f"{kind} {name!r}" if name is not None else kind

    # ------------------------------------------------------------------ preprocessing

    def preprocess(self, example: Any) -> Any:
        """Tokenize (a string, when sequential), lower-case, then run ``preprocessing``.

        A list or tuple given to a sequential field is taken as already tokenized.
        A tokenizer that fails (``"python"`` on code that does not tokenize) raises
        a ``FieldError`` naming the field.
        """
        return self._preprocess(example, None, None)

    def _preprocess(self, example: Any, index: int | None, label: str | None) -> Any:
        if self.sequential and isinstance(example, str):
            try:
                example = self.tokenize(example)
            except Exception as error:
                which = "an example" if index is None else f"example {index}"
                raise FieldError(
                    f"{self._label(label)}: the tokenizer failed on {which} ({example[:40]!r}"
                    f"{'...' if len(example) > 40 else ''}): {type(error).__name__}: {error}"
                ) from error
        if self.lower:
            if isinstance(example, str):
                example = example.lower()
            elif self.sequential and isinstance(example, list | tuple):
                example = [t.lower() if isinstance(t, str) else t for t in example]
        if self.preprocessing is not None:
            example = self.preprocessing(example)
        return example

    # ------------------------------------------------------------------ vocabulary

    def build_vocab(
        self,
        *sources: Iterable[Any],
        max_size: int | None = None,
        min_freq: int = 1,
        specials: Sequence[Hashable] | None = None,
    ) -> Vocab:
        """Count the (preprocessed) tokens of raw examples and build ``self.vocab``.

        Each source is an iterable of raw examples, such as a list of strings or a
        dataset's column. The field's own special tokens (unk, pad, init, eos) come
        first, then ``specials``, then the counted tokens.
        """
        if not self.use_vocab:
            raise ValueError(f"{self._label()}: build_vocab needs use_vocab=True")
        counter: Counter = Counter()
        for source in sources:
            for index, example in enumerate(source):
                tokens = self._preprocess(example, index, None)
                if self.sequential:
                    self._check_token_list(tokens, index, None)
                    try:
                        counter.update(tokens)
                    except TypeError:
                        raise self._unhashable(tokens, index, None) from None
                else:
                    self._check_single_token(tokens, index, None)
                    counter[tokens] += 1
        own = [self.unk_token, self.pad_token, self.init_token, self.eos_token]
        all_specials = [t for t in own if t is not None] + list(specials or ())
        self.vocab = Vocab(counter, max_size=max_size, min_freq=min_freq,
                           specials=all_specials, unk_token=self.unk_token)
        return self.vocab

    # ------------------------------------------------------------------ numericalising

    def numericalize(self, example: Any) -> torch.Tensor:
        """One raw example as the tensor of batch size one that the batch holds for it."""
        values = self._numericalize_all([example], None)
        return self._shaped(values, None, None)[0][0]

    def _numericalize_all(self, examples: Sequence[Any], label: str | None) -> list:
        """Preprocess and numericalise every example: lists of ids, or tensors."""
        if not isinstance(examples, Sequence) or isinstance(examples, str | bytes):
            raise TypeError(
                f"{self._label(label)}: expected a list of examples, got "
                f"{type(examples).__name__}"
            )
        if len(examples) == 0:
            raise FieldError(f"{self._label(label)}: the batch is empty (no examples)")
        if self.use_vocab and self.vocab is None:
            raise FieldError(
                f"{self._label(label)}: the field has no vocabulary; call build_vocab first "
                "(or pass vocab=)"
            )
        self._check_specials(label)
        values = [self._numericalize_one(self._preprocess(ex, i, label), i, label)
                  for i, ex in enumerate(examples)]
        if self.postprocessing is not None:
            processed = self.postprocessing(values, self.vocab)
            if len(processed) != len(values):
                raise FieldError(
                    f"{self._label(label)}: postprocessing returned {len(processed)} examples "
                    f"for a batch of {len(values)}"
                )
            values = list(processed)
        return values

    def _check_specials(self, label: str | None) -> None:
        """The field's special tokens are in its vocabulary: one given with ``vocab=`` (or
        built by another field) may lack them, and a missing one would silently read as the
        unknown token (padding as id 0)."""
        if not self.use_vocab:
            return
        roles = [("init_token", self.init_token), ("eos_token", self.eos_token)]
        if self.sequential:
            roles.append(("pad_token", self.pad_token))
        for role, token in roles:
            if token is not None and token not in self.vocab:
                raise FieldError(
                    f"{self._label(label)}: its {role} {token!r} is not in its vocabulary "
                    "(given with vocab=, or built by another field?), where it would read as "
                    "the unknown token; build the vocabulary with this field (build_vocab), or "
                    f"set {role} to the vocabulary's own token")

    def _numericalize_one(self, value: Any, index: int, label: str | None) -> Any:
        if self.use_vocab:
            if self.sequential:
                self._check_token_list(value, index, label)
                tokens = list(value)
                if self.init_token is not None:
                    tokens.insert(0, self.init_token)
                if self.eos_token is not None:
                    tokens.append(self.eos_token)
                return self._lookup(tokens, index, label)
            self._check_single_token(value, index, label)
            return self._lookup([value], index, label)[0]
        return self._numeric_tensor(value, index, label)

    def _lookup(self, tokens: list, index: int, label: str | None) -> list[int]:
        try:
            return self.vocab.lookup_indices(tokens)
        except TypeError:
            raise self._unhashable(tokens, index, label) from None
        except KeyError as error:
            raise FieldError(
                f"{self._label(label)}: example {index}: token {error.args[0]!r} is not in the "
                "vocabulary and the vocabulary has no unknown token (unk_token=None)"
            ) from None

    def _check_token_list(self, tokens: Any, index: int, label: str | None) -> None:
        if not isinstance(tokens, list | tuple):
            raise TypeError(
                f"{self._label(label)}: example {index} is a {type(tokens).__name__}; a "
                "sequential field with a vocabulary takes a string or a list of tokens"
            )

    def _unhashable(self, tokens: list, index: int, label: str | None) -> TypeError:
        """The error for a token list holding something that cannot be a token."""
        position, token = next((k, t) for k, t in enumerate(tokens) if not _hashable(t))
        return TypeError(
            f"{self._label(label)}: example {index}: token {position} is a "
            f"{type(token).__name__}, which cannot be a token (tokens must be hashable)"
        )

    def _check_single_token(self, token: Any, index: int, label: str | None) -> None:
        if token is None:  # a missing label would read as the unknown token
            raise FieldError(
                f"{self._label(label)}: example {index} is None; a field with a vocabulary "
                "takes one token per example")
        if isinstance(token, list | tuple | torch.Tensor):
            raise FieldError(
                f"{self._label(label)}: example {index} is a sequence of {len(token)} items, "
                "but the field is not sequential (it takes one token per example); pass "
                "sequential=True for sequences"
            )
        if not isinstance(token, Hashable):
            raise TypeError(
                f"{self._label(label)}: example {index} is a {type(token).__name__}, which "
                "cannot be a token (tokens must be hashable)"
            )

    def _numeric_tensor(self, value: Any, index: int, label: str | None) -> torch.Tensor:
        if isinstance(value, str | bytes) or (
            isinstance(value, list | tuple) and any(isinstance(v, str | bytes) for v in value)
        ):
            raise TypeError(
                f"{self._label(label)}: example {index} holds text, but the field has "
                "use_vocab=False (numbers only)"
            )
        try:
            tensor = torch.as_tensor(value, dtype=self.dtype)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(
                f"{self._label(label)}: example {index} cannot be made a {self.dtype} tensor: "
                f"{error}"
            ) from None
        if self.sequential and tensor.dim() == 0:
            raise FieldError(
                f"{self._label(label)}: example {index} is a single value, but the field is "
                "sequential; pass sequential=False for one value per example"
            )
        return tensor

    def _example_tensor(self, value: Any, device: Any) -> torch.Tensor:
        """The tensor of batch size one for one numericalised example."""
        if isinstance(value, torch.Tensor):
            return value.to(device=device, dtype=self.dtype).unsqueeze(0)
        shape = (1, len(value)) if self.sequential else (1,)
        return torch.tensor(value, dtype=self.dtype, device=device).reshape(shape)

    def _shaped(self, values: list, device: Any,
                label: str | None) -> tuple[list[torch.Tensor], tuple[bool, ...]]:
        """The examples' tensors of batch size one and the batch dims, sizes checked."""
        if self.use_vocab:
            tensors = [self._example_tensor(v, device) for v in values]
            return tensors, ((True,) if self.sequential else ())
        tensors = [self._example_tensor(v, device)[0] for v in values]
        reference = 0  # the example whose sizes the others must have
        if self.sequential:
            # An empty list (a zero-length sequence) cannot show the static sizes of its
            # steps: it takes them from the first example that has them.
            reference = next((i for i, t in enumerate(tensors) if t.dim() > 1), 0)
            static_sizes = tensors[reference].shape[1:]
            tensors = [t.reshape(0, *static_sizes) if t.dim() == 1 and t.numel() == 0
                       else t for t in tensors]
        first = tensors[reference]
        for index, tensor in enumerate(tensors):
            if tensor.dim() != first.dim():
                raise FieldError(
                    f"{self._label(label)}: example {index} has {tensor.dim()} dimensions but "
                    f"example {reference} has {first.dim()}"
                )
            static = tensor.shape[1:] if self.sequential else tensor.shape
            expected = first.shape[1:] if self.sequential else first.shape
            if static != expected:
                what = "static sizes after the sequence dimension" if self.sequential else "shape"
                raise FieldError(
                    f"{self._label(label)}: examples must agree in their {what}, but example "
                    f"{index} has {tuple(static)} and example {reference} has "
                    f"{tuple(expected)}"
                )
        leading = (True,) if self.sequential else ()
        dims = leading + (False,) * (first.dim() - len(leading))
        return [t.unsqueeze(0) for t in tensors], dims

    # ------------------------------------------------------------------ reversing

    def reverse(self, batch: Any, *, strip_specials: bool = True) -> list:
        """Ids back to tokens: a list of token lists (sequential) or of tokens.

        ``batch`` is a batch from this field (anything with ``examples()``), a list of
        per-example id tensors, or a plain tensor of ids, one row per example (``(batch,
        length)``, padded with the pad token's id; ``(batch,)`` for a field that is not
        sequential).  ``init_token`` is removed, and each example cut at its first
        ``eos_token`` (decoded output may run on past it), unless ``strip_specials=False``;
        padding never appears.
        """
        if not self.use_vocab or self.vocab is None:
            raise ValueError(f"{self._label()}: reverse needs a field with a vocabulary")
        padded = isinstance(batch, torch.Tensor)
        if padded and batch.dim() != (2 if self.sequential else 1):
            rows = "(batch, length)" if self.sequential else "(batch,)"
            raise FieldError(
                f"{self._label()}: reverse takes a batch of this field, a list of per-example "
                f"id tensors, or a tensor of ids with one row per example {rows}; got a "
                f"tensor of shape {tuple(batch.shape)}")
        examples = batch.examples() if hasattr(batch, "examples") else batch
        result = []
        for index, example in enumerate(examples):
            ids = torch.as_tensor(example).reshape(-1).tolist()
            try:
                tokens = self.vocab.lookup_tokens(ids)
            except IndexError as error:
                raise FieldError(f"{self._label()}: example {index}: {error}") from None
            if not self.sequential:
                if len(tokens) != 1:
                    raise FieldError(
                        f"{self._label()}: example {index} holds {len(tokens)} ids, but the "
                        "field is not sequential (one id per example)"
                    )
                result.append(tokens[0])
                continue
            if padded and self.pad_token is not None:  # a row's padding, after its end
                while tokens and tokens[-1] == self.pad_token:
                    tokens.pop()
            if strip_specials:
                tokens = self._strip(tokens)
            result.append(tokens)
        return result

    def _strip(self, tokens: list) -> list:
        if self.init_token is not None and tokens[:1] == [self.init_token]:
            tokens = tokens[1:]
        if self.eos_token is not None and self.eos_token in tokens:
            tokens = tokens[:tokens.index(self.eos_token)]
        return tokens

    # ------------------------------------------------------------------ batching

    def process(self, examples: Sequence[Any], device: Any = None) -> Any:
        """A batch of raw examples (strings, token lists or numbers), on ``device``.

        ``device=-1`` is the CPU, as torchtext's ``Field`` read it.
        """
        return self._process(examples, "cpu" if device == -1 else device, None)

    def _process(self, examples: Sequence[Any], device: Any, label: str | None) -> Any:
        raise NotImplementedError  # each field makes its own kind of batch


class MaskedBatchField(_Field):
    """A field whose batches are ``MaskedBatch`` objects (see the module docstring)."""

    def _process(self, examples: Sequence[Any], device: Any, label: str | None) -> MaskedBatch:
        values = self._numericalize_all(examples, label)
        if self.use_vocab and self.postprocessing is None:
            return self._id_batch(values, device)
        tensors, dims = self._shaped(values, device, label)
        return MaskedBatch.fromlist(tensors, dims)

    def _id_batch(self, values: list, device: Any) -> MaskedBatch:
        """Token ids straight into one padded tensor: a single copy for the batch."""
        if not self.sequential:
            data = torch.tensor(values, dtype=self.dtype, device=device)
            return MaskedBatch._make(data, None, ())
        lengths = [len(ids) for ids in values]
        longest = max(lengths)
        # Padding holds the pad token's id (a valid row for an embedding), or 0.
        pad = self.vocab.stoi.get(self.pad_token, 0) if self.pad_token is not None else 0
        rows = [ids + [pad] * (longest - len(ids)) for ids in values]
        data = torch.tensor(rows, dtype=self.dtype, device=device).reshape(len(rows), longest)
        if min(lengths) == longest:
            return MaskedBatch._make(data, None, (True,))  # no padding: no mask
        length_tensor = torch.tensor(lengths, device=device)
        mask = torch.arange(longest, device=device) < length_tensor.unsqueeze(1)
        # Valid by construction (real positions first, one dynamic dimension).
        return MaskedBatch._make(data, mask, (True,))


class PackedBatchField(_Field):
    """A sequential field whose batches are ``matchbox.packed.PackedBatch`` objects.

    Needs the ``matchbox-packed`` distribution, imported on first use.
    """

    def __init__(self, **kwargs: Any):
        if not kwargs.get("sequential", True):
            raise ValueError(
                "PackedBatchField: a PackedBatch packs one dynamic dimension, so the field "
                "must be sequential; use MaskedBatchField for one value per example"
            )
        super().__init__(**kwargs)

    def _process(self, examples: Sequence[Any], device: Any, label: str | None) -> Any:
        packed_batch = _packed_batch_class()
        values = self._numericalize_all(examples, label)
        tensors, dims = self._shaped(values, device, label)
        return packed_batch.fromlist(tensors, dims)


def _packed_batch_class() -> Any:
    try:
        module = importlib.import_module("matchbox.packed")
    except ModuleNotFoundError as error:
        if error.name not in ("matchbox.packed", "matchbox"):
            raise
        raise ImportError(
            "PackedBatchField needs the matchbox-packed distribution, which is not "
            "installed: pip install matchbox-packed"
        ) from None
    return module.PackedBatch


def _as_vocab(vocab: Any) -> Any:
    """A matchbox ``Vocab`` as it is; a torchtext ``Vocab`` wrapped by the adapter."""
    if type(vocab).__module__.startswith("torchtext"):
        from matchbox.data.torchtext import TorchtextVocab

        return TorchtextVocab(vocab)
    for attribute in ("stoi", "itos", "lookup_indices", "lookup_tokens"):
        if not hasattr(vocab, attribute):
            raise TypeError(
                f"vocab must be a matchbox.data.Vocab or a torchtext Vocab, got "
                f"{type(vocab).__name__} (it has no {attribute!r})"
            )
    return vocab


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
