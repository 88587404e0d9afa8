"""A dict's keys that only some examples have.

In the loop over examples each example has its own dict; under ``@batch`` one dict
holds every example's keys.  A key first written under a per-example condition
(``if c: d[k] = v``, or in a ``for`` over a dynamic dimension) is one only the
running examples have: its value records them (``_present``, as a list's item
appended there does: ``sequences``), a later write under a condition adds its
examples, and a write where every example runs makes the key every example's again
(its value has no record).  From the records:

| read                                       | per example                             |
|--------------------------------------------|-----------------------------------------|
| ``len(d)`` (``len(d.keys())``, ...)        | its own count (a batch of ints)         |
| ``k in d``, ``k not in d``                 | whether it has ``k`` (a batch of bools) |
| ``for k in d``, ``d.keys()``, ``d.items()``,| a step for each of its own keys         |
| ``d.values()``, comprehensions, ``sum``    |                                         |
| ``if d:``, ``not d``                       | whether its own dict is empty           |
| ``d.get(k, default)``                      | its own value, else ``default``         |
| ``list(d)``, ``sorted``, ``set``, ``tuple``| ``NotImplementedError`` where a running |
| of its keys, ``d.get(k)``, ``return d``    | example lacks a key                     |

A key an example reads without having it (``d[k]``) is padding for it, as a variable
first assigned in a branch is.  The records are looked at only while a value holding
one is alive (``_RECORDS``, weakly: a record is a tensor, which drops out of it when
the value goes), so a dict's reads cost no more where no key was added under a
condition.  Not seen: reads by code ``@batch`` did not rewrite (an undecorated
helper, ``str(d)``, ``d == e``, ``{**d}`` given to a function).
"""

from __future__ import annotations

import builtins
import collections
import weakref
from collections.abc import Callable
from typing import Any

import torch

from matchbox.control.runtime import sequences
from matchbox.control.runtime.masks import _MASK
from matchbox.control.runtime.select import select, user_line
from matchbox.control.runtime.sequences import _record, per_example_presence, presence
from matchbox.extending import EXAMPLE_SCALAR as SCALAR
from matchbox.extending import fails
from matchbox.extending import mark_example_scalar as mark
from matchbox.masked_batch import MaskedBatch

#: The records alive, by id (a weak reference each, which drops its entry when the record
#: goes): while it is empty, no dict has a key only some examples have.  A plain dict, whose
#: truth every read asks.
_RECORDS: dict[int, weakref.ref[torch.Tensor]] = {}


def _register(present: torch.Tensor) -> None:
    key = id(present)
    if key not in _RECORDS:
        _RECORDS[key] = weakref.ref(present, lambda _, key=key: _RECORDS.pop(key, None))

_DICTS = frozenset({dict, collections.OrderedDict, collections.defaultdict,
                    collections.Counter})
_KEYS_VIEW = type({}.keys())
#: What holds a dict's keys: the dict, and its views (whose ``mapping`` is the dict).
_KEYED = _DICTS | {_KEYS_VIEW, type({}.values()), type({}.items())}
#: What gives a dict's keys themselves (``for k in d``, ``list(d.keys())``).
_KEY_SOURCES = _DICTS | {_KEYS_VIEW}


def record_key(mask: torch.Tensor, obj: Any, key: Any, missing: bool, old: Any) -> None:
    """After ``obj[key] = value`` under ``mask``, on a dict: ``missing`` (a new key) or an
    ``old`` value that records its examples makes the key the running examples' too."""
    if missing:
        present = mask
    else:
        before = presence(old)
        if before is None:
            return  # every example's key
        present = before | mask
    value = obj[key]
    _record(value, present)
    if presence(value) is not None:  # a batch or a tuple of them (not a list)
        _register(present)


def _mapping(obj: Any) -> Any:
    return obj if type(obj) in _DICTS else obj.mapping


def _presence(obj: Any) -> torch.Tensor | None:
    """``(len(d), batch)``: which examples have each key of a dict (or view), ``None``
    when every example has every key (also whenever no record is alive)."""
    if not _RECORDS or type(obj) not in _KEYED:
        return None
    return per_example_presence(_mapping(obj).values())


def length(obj: Any) -> Any:
    """``len(obj)``: of a dict some of whose keys only some examples have, each example's
    own count; else as ``sequences.length``."""
    present = _presence(obj)
    if present is None:
        return sequences.length(obj)
    return mark(MaskedBatch._make(present.sum(0), None, ()), SCALAR)


def contains(key: Any, container: Any, negate: bool = False) -> Any:
    """``key in container`` (``not in``: ``negate``): of a dict whose ``key`` only some
    examples have, whether each has it."""
    if _RECORDS and type(container) in _KEY_SOURCES:
        mapping = _mapping(container)
        if key in mapping:
            present = presence(mapping[key])
            if present is not None:
                return MaskedBatch._make(~present if negate else present, None, ())
    return (key not in container) if negate else (key in container)


def truth(value: Any) -> Any:
    """``if d:``: of a dict whose keys only some examples have, whether each example's
    own dict has any; else as ``sequences.truth``."""
    present = _presence(value) if type(value) in _DICTS and value else None
    if present is None:
        return sequences.truth(value)
    return MaskedBatch._make(present.any(0), None, ())


def operand(value: Any) -> Any:
    """An ``and``/``or`` operand: such a dict refused, as such a list is."""
    if type(value) in _DICTS and value and _presence(value) is not None:
        raise TypeError(
            f"@batch: a dict some of whose keys only some examples have as an operand of "
            f"'and' or 'or' ({user_line()}): each example's own dict may be empty or not. "
            "Test its length instead: len(d) > 0 and ...")
    return sequences.operand(value)


def key_steps(obj: Any) -> tuple[torch.Tensor, list[Any]] | None:
    """``for k in d``: each key's examples and the keys, or ``None`` (every example's)."""
    present = _presence(obj) if type(obj) in _KEY_SOURCES else None
    return None if present is None else (present, builtins.list(obj))


def get(obj: Any, key: Any, *default: Any) -> Any:
    """``d.get(key, default)``: an example without the key gets ``default``."""
    value = obj.get(key, *default)
    present = presence(value) if _RECORDS and key in obj else None
    if present is None:
        return value
    if not default or default[0] is None:
        refuse_partial(obj, f"d.get({key!r}) of a key only some examples have (the "
                           "others would get None)", present[None])
        return value
    return select(present, value, default[0], f"d.get({key!r}, ...)")


def refuse_partial(obj: Any, what: str, present: torch.Tensor | None = None) -> None:
    """Refuse ``what`` (reading a dict's keys as one object) where a running example lacks
    a key (``present``: ``(keys, batch)``, of ``obj`` by default)."""
    if present is None:
        present = _presence(obj)
        if present is None:
            return
    running = _MASK.get()
    lacking = ~present.all(0)
    lacking = lacking if running is None else lacking & running

    def error() -> NotImplementedError:
        return NotImplementedError(
            f"@batch: {what} ({user_line()}): a key added under a per-example condition is "
            "only the examples' that ran it, but one Python object cannot hold each "
            "example's own keys. Loop over the dict (for k in d, d.items()), test k in d, "
            "or give the key a value where every example runs")

    if fails(lacking, error):
        raise error()


def _keys_read(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``list(d)``, ``sorted(d)``, ...: refused where a running example lacks a key."""
    name = fn.__name__

    def reading(*args: Any, **kwargs: Any) -> Any:
        if _RECORDS and args and type(args[0]) in _KEY_SOURCES:
            refuse_partial(args[0], f"{name}() of a dict's keys")
        return fn(*args, **kwargs)

    return reading


#: For ``runtime.calls``' table of special callables.
LOWERED = {builtins.len: length, **{fn: _keys_read(fn) for fn in (
    builtins.list, builtins.tuple, builtins.sorted, builtins.set, builtins.frozenset)}}
