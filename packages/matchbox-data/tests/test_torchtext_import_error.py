"""Without torchtext, the adapter's import error says how to get it; the rest works."""

from __future__ import annotations

import sys

import pytest

from matchbox.data import MaskedBatchField
from matchbox.data.torchtext import TorchtextVocab, require_torchtext

MESSAGE = (r'the torchtext adapter needs torchtext: pip install "matchbox-data\[torchtext\]" '
           r"\(torchtext 0.18, its last release, requires torch 2.3.x\)")


def test_missing_torchtext_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchtext", None)  # as if it were not installed
    with pytest.raises(ImportError, match=MESSAGE):
        require_torchtext()
    with pytest.raises(ImportError, match=MESSAGE):
        TorchtextVocab(object())


def test_fields_work_without_torchtext(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchtext", None)
    field = MaskedBatchField()
    field.build_vocab(["a b"])
    assert field.reverse(field.process(["b a"])) == [["b", "a"]]
