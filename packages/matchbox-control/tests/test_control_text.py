"""Text made from a value that differs between examples (``runtime.text``).

``str(n)``, ``f"{n}"``, ``"{}".format(n)``, ``"%d" % n``, ``repr``, ``format`` of a counter,
an ``.item()`` value or a batch gave one string, the batch's ``repr``, for every example,
where the loop gives each example its own: used as a dict key or compared, it was wrong for
every example, silently.  It is refused; printing such a value (``print(n)``,
``print(f"... {n}")``, a logging call, an ``assert``'s message) shows the batch, as meant,
and text of values every example shares is Python's."""

# ruff: noqa: UP031, UP032 (the formatting under test is written as users write it)
from __future__ import annotations

import logging

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch

_LOG = logging.getLogger("matchbox.tests.text")


@matchbox.batch
def looks_up_by_text(x, how):
    n = 0
    for _xt in x.unbind(1):
        n = n + 1
    table = {"0": 0.0, "1": 10.0, "2": 20.0, "3": 30.0}
    found = -1.0
    if how == "str":
        found = table.get(str(n), -1.0)
    if how == "repr":
        found = table.get(repr(n), -1.0)
    if how == "f-string":
        found = table.get(f"{n}", -1.0)
    if how == "format":
        found = table.get("{}".format(n), -1.0)
    if how == "format_map":
        found = table.get("{n}".format_map({"n": n}), -1.0)
    if how == "keyword":
        found = table.get("{k}".format(k=n), -1.0)
    if how == "percent":
        found = table.get("%d" % n, -1.0)
    if how == "percent-tuple":
        found = table.get("%d%s" % (n, ""), -1.0)
    if how == "builtin-format":
        found = table.get(format(n, "d"), -1.0)
    if how == "compare":
        found = 1.0 if str(n) == "3" else 0.0
    if how == "item":
        found = float(len(f"{x.sum().item():.1f}"))
    if how == "batch":
        found = float(len(str(x.sum((1, 2)))))
    if how == "shared":  # the same for every example (a plain range's counter): Python's text
        for k in range(3):
            found = found + table.get(str(k), -1.0) + table.get(f"{k}", -1.0)
    return x.sum((1, 2)) * 0 + found


def _what(how):
    return {"str": r"str\(\)", "repr": r"repr\(\)", "f-string": "an f-string",
            "format": r"str\.format\(\)", "format_map": r"str\.format_map\(\)",
            "keyword": r"str\.format\(\)", "percent": "%-formatting",
            "percent-tuple": "%-formatting", "builtin-format": r"format\(\)",
            "compare": r"str\(\)", "item": "an f-string", "batch": r"str\(\)"}[how]


@pytest.mark.parametrize("how", ["str", "repr", "f-string", "format", "format_map", "keyword",
                                 "percent", "percent-tuple", "builtin-format", "compare",
                                 "item", "batch"])
def test_text_of_a_per_example_value_is_refused(how):
    xs, xb = sequences([3, 2, 0, 1])
    xs = [torch.ones_like(x) * (i + 1) for i, x in enumerate(xs)]
    loop = [looks_up_by_text(x, how).item() for x in xs]
    if how not in ("item", "batch"):
        assert loop == ([30.0, 20.0, 0.0, 10.0] if how != "compare" else [1.0, 0, 0, 0])
    with pytest.raises(NotImplementedError, match=(
            rf"^@batch: {_what(how)} of a value that differs between examples \(.*"
            r"test_control_text\.py, line \d+\): it makes one string, the batch's repr, for "
            r"every example, where the loop makes each example its own, and a string cannot "
            r"differ between examples, so using it as data \(a dict key, s == '3', len\(s\), "
            r"a name\) would be wrong for every example\. Print the value directly "
            r"\(print\(n\), print\(f'\.\.\. \{n\}'\) show the batch\), or keep it a number or "
            r"tensor \(compare n == 3, look it up with torch\.tensor\(values\)\[n\]\)$")):
        looks_up_by_text(MaskedBatch.fromlist(xs, (True, False)), how)


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (2,), (0,)])
def test_text_of_a_value_every_example_shares_is_pythons(lengths, dtype):
    torch.manual_seed(5)
    assert_batch_equals_loop(lambda x: looks_up_by_text(x, "shared"),
                             sequences(lengths, dtype=dtype))


# Printing, logging and an assert's message show the batch (its repr), as meant; text of
# values every example shares is Python's.

@matchbox.batch
def prints_and_counts(x):
    n = 0
    total = x.sum((1, 2)) * 0
    for xt in x.unbind(1):
        n = n + 1
        total = total + xt.sum(1)
    print(n)
    print(f"n={n}, total={total}")
    print("n=" + str(n), "%s" % n, "{}".format(repr(n)))
    _LOG.debug(f"n={n}")
    _LOG.info("n=%s", n)
    assert (total == total).all() | (total != total).all(), f"total {total} for n={n}"
    names = ["a", "b"]
    for k in range(2):
        label = f"{names[k]}{k}" + str(len(names)) + "%d" % k
        total = total + len(label)
    return total + n


@pytest.mark.parametrize("lengths", [(3, 0, 1, 4), (2,), (0,)])
def test_printing_a_per_example_value_shows_the_batch(lengths, dtype, capsys):
    torch.manual_seed(4)
    xs, xb = sequences(lengths, dtype=dtype)
    assert_batch_equals_loop(prints_and_counts, (xs, xb))
    printed = capsys.readouterr().out
    assert "total=MaskedBatch" in printed  # the batch's own repr, for every example at once
    if len(set(lengths)) > 1:
        assert "n=MaskedBatch" in printed
