"""``x.size(0)`` and ``x.maxsize(d)`` read as numbers by numpy and by the ``int``'s own
methods: refused, where they gave the batch's value silently.

Each example of the loop has its own value there (``x.size(0)`` is 1, ``x.maxsize(1)``
its own length); the batch's is the batch size or the padded size.  ``np.log(n)``,
``np.float64(1) / n``, ``n.bit_length()``, ``fractions.Fraction(n)`` and
``statistics.mean`` read the batch's, silently (these tests show the loop's answers
differ between examples, then that Matchbox refuses).  What Python or torch reads
without asking the ``int`` (a float on the left, ``math.log``, ``%d``,
``torch.tensor(n)``, torch's ops on plain tensors) stays silent: see the core README
and test_size_number_unaskable_reads.py (why no code on the size can refuse them).
"""

from __future__ import annotations

import fractions
import statistics

import pytest
import torch

from matchbox import MaskedBatch

np = pytest.importorskip("numpy")

BATCH_SIZE_REFUSED = r"x\.size\(0\) of a MaskedBatch .* used as a number .* Use x\.batch_size"
PADDED_REFUSED = (r"x\.maxsize\(1\) is the padded size of dimension 1, which is dynamic.*"
                  r"Use x\.size_as_tensor\(1\)")

LENGTHS = [(3, 2, 0, 1), (2,), (1,)]  # zero and one long examples, a batch of one


def _batch(lengths, dtype):
    examples = [torch.randn(1, n, 2, dtype=dtype) for n in lengths]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


READS = {
    "np.log(n)": lambda n: np.log(n),
    "np.sqrt(n)": lambda n: np.sqrt(n),
    "np.float64(1) / n": pytest.param(
        lambda n: np.float64(1) / n, marks=pytest.mark.skipif(
            int(np.__version__.split(".")[0]) < 2, reason="numpy 1.x divides a float64 "
            "scalar by an int subclass without asking it (silent there; core README)")),
    "np.float32(2) * n": lambda n: np.float32(2) * n,
    "np.maximum(n, 2)": lambda n: np.maximum(n, 2),
    "n.bit_length()": lambda n: n.bit_length(),
    "n.to_bytes(2, 'little')": lambda n: n.to_bytes(2, "little"),
    "n.as_integer_ratio()": lambda n: n.as_integer_ratio(),
    "n.conjugate()": lambda n: n.conjugate(),
    "n.real": lambda n: n.real,
    "n.numerator": lambda n: n.numerator,
    "fractions.Fraction(n)": lambda n: fractions.Fraction(n),
    "statistics.mean([n, 1])": lambda n: statistics.mean([n, 1]),
}


def _case(name):
    """``name`` as a parameter, with the marks its read carries."""
    read = READS[name]
    return pytest.param(name, marks=read.marks) if hasattr(read, "marks") else name


def _read(read):
    return read.values[0] if hasattr(read, "marks") else read


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("use", [_case(name) for name in READS])
def test_a_padded_size_read_as_a_number_is_refused(use, lengths, dtype):
    examples, x = _batch(lengths, dtype)
    read = _read(READS[use])
    with np.errstate(divide="ignore"):  # np.log(0), 1 / 0 of an empty example
        loop = [read(e.size(1)) for e in examples]  # each example's own maxsize(1)
    if len(set(lengths)) > 1:
        assert len({repr(v) for v in loop}) > 1  # no single answer is every example's
    with pytest.raises(TypeError, match=PADDED_REFUSED):
        read(x.maxsize(1))


@pytest.mark.parametrize("batch_size", [1, 2, 4])
@pytest.mark.parametrize("use", [_case(name) for name in READS])
def test_the_batch_size_read_as_a_number_is_refused(use, batch_size):
    examples, x = _batch((2,) * batch_size, torch.float64)
    read = _read(READS[use])
    loop = [read(e.size(0)) for e in examples]  # 1 in each example
    with pytest.raises(TypeError, match=BATCH_SIZE_REFUSED):
        read(x.size(0))
    if batch_size > 2:  # the batch's value (the batch size) was no example's
        assert repr(read(x.batch_size)) != repr(loop[0])


def test_as_a_size_numpy_and_torch_still_take_it():
    _, x = _batch((3, 1), torch.float64)
    n, t = x.size(0), x.maxsize(1)
    assert np.zeros((n, t)).shape == (2, 3)
    assert torch.zeros(n, t).shape == (2, 3) and torch.ones(t, 4).shape == (3, 4)
    assert int(n).bit_length() == 2 and int(t).as_integer_ratio() == (3, 1)
