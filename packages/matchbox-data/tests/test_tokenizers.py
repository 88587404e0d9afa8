"""The named tokenizers keep every non-space character."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matchbox.data import get_tokenizer
from matchbox.data.tokenizers import TOKENIZERS


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("split", "a  b\tc\n", ["a", "b", "c"]),
    ("words", "Don't stop.", ["Don", "'", "t", "stop", "."]),
    ("chars", "ab c", ["a", "b", " ", "c"]),
    ("identifier", "getHTTPResponse_code2", ["get", "http", "response", "code", "2"]),
    ("identifier", "__init__", ["init"]),
    # Identifiers in any script: no letter is dropped.
    ("identifier", "café_au_lait", ["café", "au", "lait"]),
    ("identifier", "größeBerechnen", ["größe", "berechnen"]),
    ("identifier", "ÄrgerNIS2Über", ["ärger", "nis", "2", "über"]),
    ("identifier", "λ_calc", ["λ", "calc"]),
    ("identifier", "नमस्ते_दुनिया", ["नमस्ते", "दुनिया"]),  # vowel signs are combining marks
    ("identifier", "cafe\u0301_au_lait", ["cafe\u0301", "au", "lait"]),  # a decomposed accent
    ("python", "def f(x):\n    return x  # c\n", ["def", "f", "(", "x", ")", ":", "return", "x",
                                                 "# c"]),
])
def test_named_tokenizers(name, text, expected):
    assert get_tokenizer(name)(text) == expected


@pytest.mark.parametrize("name", ["split", "words", "chars"])
@given(text=st.text(max_size=40))
def test_nothing_but_whitespace_is_dropped(name, text):
    joined = "".join(get_tokenizer(name)(text))
    assert "".join(joined.split()) == "".join(text.split())


def test_a_callable_is_its_own_tokenizer():
    def tokenize(s):
        return s.split(",")

    assert get_tokenizer(tokenize) is tokenize


def test_unknown_name_is_an_error_listing_the_names():
    with pytest.raises(ValueError, match=r"tokenize must be a callable or one of \['chars', "):
        get_tokenizer("spacy")
    assert set(TOKENIZERS) == {"split", "words", "chars", "identifier", "python"}
