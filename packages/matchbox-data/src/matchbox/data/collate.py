"""``Collate``: a ``collate_fn`` for ``torch.utils.data.DataLoader`` that makes Matchbox batches.

| ``fields`` given            | each example is       | a batch is                                |
|-----------------------------|-----------------------|-------------------------------------------|
| one field                   | a raw value           | that field's batch                        |
| a tuple/list of fields      | a tuple of values     | a tuple of batches, one per position      |
| a dict of fields            | a dict of values      | a dict of batches, one per key            |

A ``None`` in place of a field keeps that column as a plain list (ids, file
names, ...). Every column of an example must have a field (or ``None``): a
column without one is an error, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class Collate:
    """Turn a list of examples into batches, one field per column.

    >>> loader = DataLoader(dataset, batch_sampler=sampler,
    ...                     collate_fn=Collate({"text": TEXT, "label": LABEL}))

    ``device`` moves every batch there (leave it ``None`` with worker
    processes and move batches in the training loop instead).
    """

    def __init__(self, fields: Any, device: Any = None):
        if isinstance(fields, Mapping):
            self._kind = "dict"
        elif isinstance(fields, tuple | list):
            self._kind = "tuple"
        elif hasattr(fields, "_process"):
            self._kind = "single"
        else:
            raise TypeError(
                "Collate: fields must be a field, a tuple or list of fields, or a dict of "
                f"fields, got {type(fields).__name__}"
            )
        self.fields = fields
        self.device = device

    def __call__(self, examples: Sequence[Any]) -> Any:
        if self._kind == "single":
            return self.fields._process(examples, self.device, None)
        if len(examples) == 0:
            raise ValueError("Collate: the batch is empty (no examples)")
        if self._kind == "dict":
            return {key: self._column(field, [self._value(ex, key, i)
                                              for i, ex in enumerate(examples)], str(key))
                    for key, field in self._checked_keys(examples).items()}
        return tuple(self._column(field, [self._value(ex, position, i)
                                          for i, ex in enumerate(examples)], f"#{position}")
                     for position, field in enumerate(self._checked_width(examples)))

    def _column(self, field: Any, values: list, label: str) -> Any:
        if field is None:
            return values
        return field._process(values, self.device, field.name if field.name else label)

    def _checked_keys(self, examples: Sequence[Any]) -> Mapping:
        expected = set(self.fields)
        for index, example in enumerate(examples):
            if not isinstance(example, Mapping):
                raise TypeError(
                    f"Collate: example {index} is a {type(example).__name__}, but the fields "
                    "are a dict (examples must be dicts)"
                )
            extra = set(example) - expected
            if extra:
                raise ValueError(
                    f"Collate: example {index} has keys {sorted(map(str, extra))} without a "
                    "field; give them a field, or None to keep them as lists"
                )
        return self.fields

    def _checked_width(self, examples: Sequence[Any]) -> Sequence:
        width = len(self.fields)
        for index, example in enumerate(examples):
            if not isinstance(example, tuple | list):
                raise TypeError(
                    f"Collate: example {index} is a {type(example).__name__}, but the fields "
                    "are a tuple (examples must be tuples or lists)"
                )
            if len(example) != width:
                raise ValueError(
                    f"Collate: example {index} has {len(example)} columns but there are "
                    f"{width} fields"
                )
        return self.fields

    @staticmethod
    def _value(example: Any, key: Any, index: int) -> Any:
        try:
            return example[key]
        except KeyError:
            raise ValueError(f"Collate: example {index} has no {key!r}") from None
