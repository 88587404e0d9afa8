"""Keys added to a dict under a per-example condition.

In the loop over examples ``d[k] = v`` under a condition adds ``k`` to the dicts of the
running examples only.  Under ``@batch`` one dict holds every example's items: the value
is merged per example (``effects.set_item``: padding for the others), but the key is there
for every example, and ``len(d)``, ``k in d``, ``d.keys()``, ``for k in d`` counted it for
the examples that never added it, silently.

So a key added under a per-example condition records which examples have it (here, in the
outermost ``@batch`` call's own state, core's ``call_state``, by the dict's identity; the
record holds the dict, so that its identity is not reused while the call runs), and a later
write of it under another mask adds those examples (a key written in both sides of an
``if`` is every example's); a write for every example drops the record.  What reads the
keys (:func:`refuse_partial_keys`: ``len(d)``, ``k in d``, ``d.keys()``/``values()``/
``items()``, ``for k in d``, a comprehension or fold over it, ``if d:``) is refused with
``NotImplementedError`` where a running example lacks a key; reading ``d[k]`` is per
example (padding where the example lacks it, as a variable assigned in a branch).  The
records end with the call: a dict returned to code outside ``@batch`` is a plain dict, so
the outermost call's return value is checked as it leaves (:func:`refuse_returned`: a
dict in it, or in a tuple, list or dict in it, with such a key is refused).
"""

from __future__ import annotations

from typing import Any

from matchbox.control.runtime.masks import _MASK
from matchbox.control.runtime.select import user_line
from matchbox.extending import call_state, fails

_KEY = "matchbox.control.dict_keys"


def written(mask: Any, obj: dict[Any, Any], key: Any, new: bool) -> None:
    """``obj[key] = v`` under ``mask`` (``None``: every example); ``new``: the key was not
    in ``obj`` before."""
    if mask is None:
        state = call_state()
        records = None if state is None else state.get(_KEY)
        found = None if not records else records.get(id(obj))
        if found is not None and found[0] is obj:
            found[1].pop(key, None)
        return
    state = call_state(create=True)
    if state is None:
        return  # not in a @batch call
    records = state.setdefault(_KEY, {})
    found = records.get(id(obj))
    if found is None or found[0] is not obj:
        if not new:
            return  # a key every example has
        found = records[id(obj)] = (obj, {})
    if new:
        found[1][key] = (mask, user_line())
    elif key in found[1]:
        present, where = found[1][key]
        found[1][key] = (present | mask, where)


def refuse_returned(value: Any) -> None:
    """Refuse the outermost ``@batch`` call's return value where a dict in it (or in the
    tuples, lists and dicts in it) has a key that only some examples added: outside
    ``@batch`` it is a plain dict, whose keys every example's code would read."""
    state = call_state()
    records = None if state is None else state.get(_KEY)
    if not records:
        return
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            refuse_partial_keys(item, "a return from the outermost @batch call", why=(
                "code outside @batch reads it as one plain dict for every example, with "
                "the keys of all of them"))
            stack.extend(item.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)


def refuse_partial_keys(obj: Any, what: str, *only: Any, why: str = "") -> None:
    """Refuse ``what`` (a read of ``obj``'s keys) where a running example lacks a key (of
    ``only``, one key, where given: ``d.get(k)``, whose default the example would get)."""
    state = call_state()
    records = None if state is None else state.get(_KEY)
    if not records:
        return
    found = records.get(id(obj))
    if found is None or found[0] is not obj:
        return
    running = _MASK.get()
    lacking = None
    partial = []
    for key, (present, where) in found[1].items():
        if key not in obj or (only and not _same_key(key, only[0])):
            continue
        missing = ~present if running is None else running & ~present
        lacking = missing if lacking is None else lacking | missing
        partial.append(f"{key!r} ({where})")
    if lacking is None:
        return

    line = user_line()  # now: a deferred check makes the error later, elsewhere

    def error() -> NotImplementedError:
        return NotImplementedError(
            f"@batch: {what} ({line}) of a dict whose keys {', '.join(partial)} only "
            "some examples added (under a per-example condition): a Python dict is shared by "
            "every example, so it would count them for the examples that did not add them "
            f"too{' (' + why + ')' if why else ''}. Give each key a value first where every example runs (d[k] = default "
            "before the condition or loop), or keep the per-example values in a list "
            "(items.append) or a tensor")

    if fails(lacking, error):
        raise error()


def _same_key(key: Any, other: Any) -> bool:
    """Whether ``other`` finds ``key`` in a dict (by hash and equality, as the dict does)."""
    try:
        return other in {key: None}
    except TypeError:  # unhashable: the dict's own read raises
        return False
