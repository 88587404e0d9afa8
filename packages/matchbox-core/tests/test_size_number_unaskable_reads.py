"""Why ``x.size(0)`` and ``x.maxsize(d)`` stay silent where the core README says so.

Both are ``int`` subclasses that refuse to be a number through their own methods
(``__truediv__``, ``__float__``, ...).  Two reads never call one of them, so no Python
code on the size can refuse them; these tests pin the two facts the README gives as the
reasons, so that they fail (and the README must change) if Python or torch change:

- CPython reads an ``int`` subclass's value itself, calling none of its methods, for a
  ``float`` on the left of an operator (``float``'s own method runs first, as the left
  operand's, and takes any ``int``), for ``math.log``/``log2``/``log10`` (which take any
  ``int``, however large, by its digits), for ``'%d' % n`` (printed as an ``int``), for
  ``math.factorial``/``comb``/``gcd``/``isqrt`` and a three-argument ``pow``.
- torch's argument parser reads it as an ``int`` (``torch.tensor(n)``, ``torch.full``'s
  fill value, ``torch.linspace``'s steps, ``torch.arange``, ``alpha=``) without looking for
  a ``__torch_function__``; it looks for one only where an ``int`` fails a parameter's own
  check (a tensor argument given a number: ``t * n``, ``t / n``).  And the sizes cannot
  define one: torch 2.13's parser then takes the size as the whole size list of
  ``torch.ones(n, H)`` (and ``zeros``, ``empty``, ``rand``, ``new_zeros``, ``expand``) and
  refuses ``H`` as an extra argument, before any ``__torch_function__`` is called: the
  original Matchbox's ``torch.zeros(x.size(0), H)`` and ``torch.ones(T, H)`` would fail.
"""

from __future__ import annotations

import math

import pytest
import torch
from family_cases import batch_of, check
from torch_features import NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION, batch_needs

from matchbox._sizes import BatchSize, PaddedSize, SymBatchSize, SymPaddedSize

# Python reads of an int that call no method of an int subclass: (the read, the same read
# with a plain int on the left or as the argument that the size refuses, as a check that
# the size would refuse the read if it were asked).
UNASKED = {
    "1.0 / n": (lambda n: 1.0 / n, lambda n: 1 / n),
    "0.5 * n": (lambda n: 0.5 * n, lambda n: 2 * n),
    "1.5 < n": (lambda n: 1.5 < n, lambda n: 1 < n),
    "math.log(n)": (math.log, math.sqrt),
    "math.log2(n)": (math.log2, math.sqrt),
    "math.log10(n)": (math.log10, math.sqrt),
    "'%d' % n": (lambda n: "%d" % n, lambda n: "%f" % n),  # noqa: UP031 (the read pinned)
    "math.factorial(n)": (math.factorial, lambda n: n + 0),
    "math.comb(n, 2)": (lambda n: math.comb(n, 2), lambda n: n - 2),
    "math.gcd(n, 2)": (lambda n: math.gcd(n, 2), lambda n: n % 2),
    "math.isqrt(n)": (math.isqrt, lambda n: n ** 0.5),
    "pow(2, n, 7)": (lambda n: pow(2, n, 7), lambda n: 2 ** n),
}


def _sizes():
    _, x = batch_of([(3, 2), (1, 2), (0, 2), (5, 2)], (True, False))
    return {"x.size(0)": x.size(0), "x.maxsize(1)": x.maxsize(1)}


@pytest.mark.parametrize("size", ["x.size(0)", "x.maxsize(1)"])
@pytest.mark.parametrize("use", list(UNASKED))
def test_python_reads_these_without_asking_the_size(use, size):
    n = _sizes()[size]
    read, asked = UNASKED[use]
    assert read(n) == read(int(n))  # the batch's value, silently (README: known gaps)
    with pytest.raises(TypeError, match=r"x\.size\(0\) of a MaskedBatch|x\.maxsize\(1\)"):
        asked(n)


def test_the_sizes_define_no_torch_function():
    # So torch's parser reads them as the ints they are, as a size anywhere.
    for kind in (BatchSize, PaddedSize, SymBatchSize, SymPaddedSize):
        assert not hasattr(kind, "__torch_function__")


class _Asked(int):
    """An ``int`` with a ``__torch_function__`` that records the functions it sees."""

    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(func.__name__)

        def plain(a):
            if isinstance(a, (tuple, list)):
                return type(a)(plain(b) for b in a)
            return int(a) if isinstance(a, _Asked) else a
        return func(*plain(args), **{k: plain(v) for k, v in (kwargs or {}).items()})


def _asks(call):
    _Asked.seen.clear()
    call()
    return bool(_Asked.seen)


@batch_needs(NUMBER_ARGUMENTS_REACH_TORCH_FUNCTION,
             "hands an int given where it takes a number to __torch_function__")
def test_torch_asks_an_int_only_where_a_tensor_is_taken_and_refuses_it_first_of_sizes():
    n, t = _Asked(3), torch.ones(3)
    # Number uses torch would let it see, and refuse (a tensor argument given a number):
    for call in (lambda: t * n, lambda: t / n, lambda: torch.arange(n) / n,
                 lambda: torch.where(t > 0, t, n), lambda: t.clone().fill_(n)):
        assert _asks(call)
    # Number uses it reads as an int without asking (silent even with one):
    for call in (lambda: torch.tensor(n), lambda: torch.as_tensor(n),
                 lambda: torch.full((2,), n), lambda: torch.linspace(0, 1, n),
                 lambda: torch.add(t, t, alpha=n), lambda: torch.arange(n)):
        assert not _asks(call)
    # Size uses, its first of several sizes: the parser takes it as the whole size list.
    for name, call in (("ones", lambda: torch.ones(n, 2)), ("zeros", lambda: torch.zeros(n, 2)),
                       ("empty", lambda: torch.empty(n, 2)),
                       ("new_zeros", lambda: t.new_zeros(n, 2)),
                       ("expand", lambda: t[:1].expand(n, 2))):
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes 1 positional argument but 2 "
                                            r"were given$"):
            call()
    assert _asks(lambda: torch.ones(2, n)) and _asks(lambda: torch.ones((n, 2)))


# Each size's first use of several sizes, as the README's idioms write it: a size as it is.
FIRST_SIZE_USES = {
    "zeros(T, 2)": lambda x: x + torch.zeros(x.maxsize(1), 2, dtype=x.dtype).add(
        torch.arange(float(x.maxsize(2)), dtype=x.dtype)).cumsum(0),
    "ones(T, 2, dtype=)": lambda x: x * torch.ones(x.maxsize(1), 2, dtype=x.dtype).cumsum(0),
    "empty(T, 2).fill_(2)": lambda x: x - torch.empty(x.maxsize(1), 2, dtype=x.dtype).fill_(2),
    "ones(1, 2).expand(T, 2)": lambda x: x + torch.ones(1, 2, dtype=x.dtype).expand(
        x.maxsize(1), 2).cumsum(0),
    "new_zeros(B, 2) of x.size(0)": lambda x: x.new_zeros(x.size(0), 2) + x.sum(1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shapes", [[(3, 2), (1, 2), (0, 2), (5, 2)], [(2, 2)]],
                         ids=["mixed", "batch-of-one"])
@pytest.mark.parametrize("name", list(FIRST_SIZE_USES))
def test_a_size_first_of_several_sizes_equals_the_loop(name, shapes, dtype):
    examples, x = batch_of(shapes, (True, False), dtype)
    check(FIRST_SIZE_USES[name], examples, x)
