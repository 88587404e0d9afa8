"""The standard library corpus: deterministic, tokenised, ready for the fields."""

from __future__ import annotations

import torch

from matchbox.data import BucketBatchSampler, Collate, MaskedBatchField, corpus


def test_files_are_the_stdlib_sources_in_sorted_order():
    files = corpus.stdlib_files(max_files=30)
    root = corpus.stdlib_root()
    relative = [f.relative_to(root).as_posix() for f in files]
    assert relative == sorted(relative) and len(relative) == 30
    assert all(r.endswith(".py") and "site-packages" not in r for r in relative)
    assert corpus.stdlib_files(max_files=30) == files


def test_docstring_pairs_from_a_known_module():
    pairs = corpus._docstring_pairs(corpus._file_tokens(corpus.stdlib_root() / "textwrap.py"))
    by_name = {p["name"]: p["docstring"] for p in pairs}
    assert by_name["dedent"].startswith("Remove any common leading whitespace from every line")
    assert "\n" not in by_name["dedent"]
    assert all(p["docstring"] for p in pairs)


def test_docstring_detection_on_tricky_signatures():
    source = (
        'def f(x: "dict[str, int]" = {"a": 1}) -> dict[str, int]:\n'
        '    # a comment\n'
        '    """First line.\n\n    More."""\n'
        'def g(): "one-liner"\n'
        'def h():\n'
        '    "a" + b\n'
        'def k():\n'
        '    b"bytes"\n'
    )
    import io
    import tokenize

    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    assert list(corpus._docstring_pairs(tokens)) == [{"docstring": "First line.", "name": "f"}]


def test_subsets_are_deterministic_and_limited():
    pairs = corpus.docstring_pairs(max_files=15, max_examples=40)
    assert len(pairs) == 40
    assert pairs == corpus.docstring_pairs(max_files=15, max_examples=40)
    lines = corpus.code_lines(max_files=3, max_examples=50)
    assert len(lines) == 50 and all(lines) and all(isinstance(t, str) for l in lines for t in l)
    assert not any(t.startswith("#") for l in lines for t in l)  # comments are left out


def test_corpus_through_fields_sampler_and_collate():
    pairs = corpus.docstring_pairs(max_files=10, max_examples=60)
    doc = MaskedBatchField(tokenize="words", lower=True, name="docstring")
    name = MaskedBatchField(tokenize="identifier", init_token="<s>", eos_token="</s>",
                            name="name")
    doc.build_vocab(p["docstring"] for p in pairs)
    name.build_vocab(p["name"] for p in pairs)
    sampler = BucketBatchSampler([len(doc.preprocess(p["docstring"])) for p in pairs],
                                 max_tokens=400, seed=0)
    collate = Collate({"docstring": doc, "name": name})
    seen = []
    for indices in sampler:
        batch = collate([pairs[i] for i in indices])
        for i, d, n in zip(indices, batch["docstring"].examples(), batch["name"].examples()):
            torch.testing.assert_close(d, doc.numericalize(pairs[i]["docstring"]), rtol=0, atol=0)
            torch.testing.assert_close(n, name.numericalize(pairs[i]["name"]), rtol=0, atol=0)
            seen.append(i)
    assert sorted(seen) == list(range(len(pairs)))
    code = MaskedBatchField(name="code")
    lines = corpus.code_lines(max_files=2, max_examples=30)
    code.build_vocab(lines)
    assert code.reverse(code.process(lines)) == lines
