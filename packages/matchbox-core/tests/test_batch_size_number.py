"""``x.size(0)`` of a batch (``x.shape[0]``, ``x.size()[0]``) used as a number: refused.

In the loop over examples ``x.size(0)`` is 1.  On a batch it is the batch size, so that the
original Matchbox's ``x.new_zeros(x.size(0), H)`` builds one state per example; used as a
number it divided by the batch size, silently (a user trial: ``kl / x.size(0)`` in a VAE's
loss), while code around the model (``seen += batch.size(0)``) means the number of
examples.  It is now a ``BatchSize``: the batch size as a size; as a number, ``TypeError``.
"""

from __future__ import annotations

import copy
import math
import operator
import pickle

import pytest
import torch

import matchbox
from matchbox import MaskedBatch
from matchbox._sizes import BatchSize
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
BATCH_SIZES = [1, 3]
LENGTHS = {1: (2,), 3: (3, 1, 2)}
REFUSED = r"x\.size\(0\) of a MaskedBatch .* used as a number .* Use x\.batch_size .* or 1"


def sequences(batch_size, dtype, size=4):
    examples = [torch.randn(1, n, size, dtype=dtype) for n in LENGTHS[batch_size]]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def rows(batch_size, dtype, size=4):
    """Examples ``(1, size)`` with static dimensions only (``x.size()`` is defined)."""
    examples = [torch.randn(1, size, dtype=dtype) for _ in range(batch_size)]
    return examples, MaskedBatch.fromlist(examples, (False,))


# ---------------------------------------------------------------- the user trial's VAE loss

@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_a_vae_kl_divided_by_x_size_0_is_refused(batch_size):
    w = torch.randn(4, 8, dtype=torch.float64)  # the encoder (nn.Linear is matchbox-nn's)

    def vae_kl(x):  # x (1, n, 4), one example
        mu, logvar = (x.mean(1) @ w).chunk(2, -1)
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), -1)
        return kl / x.size(0)

    _, batch = sequences(batch_size, torch.float64)
    with pytest.raises(TypeError, match=REFUSED):
        vae_kl(batch)


# ---------------------------------------------------------------- scalars of ops on batches

SCALAR_USES = {
    "x / x.size(0)": lambda x: x / x.size(0),
    "x / x.shape[0]": lambda x: x / x.shape[0],
    "n = x.size(0); x / n": lambda x: (lambda n: x / n)(x.size(0)),
    "x * x.size(0)": lambda x: x * x.size(0),
    "x.size(0) * x": lambda x: x.size(0) * x,
    "x.size(0) / (x * x + 1)": lambda x: x.size(0) / (x * x + 1),
    "x - x.size(0)": lambda x: x - x.size(0),
    "x.size(0) - x": lambda x: x.size(0) - x,
    "x ** x.size(0)": lambda x: x ** x.size(0),
    "x * (x.size(0) * 2)": lambda x: x * (x.size(0) * 2),
    "torch.add(x, x.size(0))": lambda x: torch.add(x, x.size(0)),
    "torch.div(x, x.size(0))": lambda x: torch.div(x, x.size(0)),
    "torch.add(x, 1, alpha=x.size(0))": lambda x: torch.add(x, 1, alpha=x.size(0)),
    "x.clamp(max=x.size(0))": lambda x: x.clamp(max=x.size(0)),
    "torch.where(x > 0, x, x.size(0))": lambda x: torch.where(x > 0, x, x.size(0)),
    "x.masked_fill(x > 0, x.size(0))": lambda x: x.masked_fill(x > 0, x.size(0)),
    "x * 1 mul_ x.size(0)": lambda x: (x * 1).mul_(x.size(0)),
    "torch.full_like(x, x.size(0))": lambda x: torch.full_like(x, x.size(0)),
    "x.new_full((1, 4), x.size(0))": lambda x: x.new_full((1, 4), x.size(0)),
    "x / math.sqrt(x.size(0))": lambda x: x / math.sqrt(x.size(0)),
    "x / float(x.size(0))": lambda x: x / float(x.size(0)),
    "x.roll(x.size(0), 1)": lambda x: x.roll(x.size(0), 1),  # (the loop's shift is 1)
}


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("use", list(SCALAR_USES))
def test_x_size_0_as_a_scalar_of_an_op_is_refused(use, batch_size):
    _, batch = sequences(batch_size, torch.float64)
    with pytest.raises(TypeError, match=REFUSED):
        SCALAR_USES[use](batch)


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_x_size_of_a_static_batch_is_refused_first_as_a_number(batch_size):
    _, batch = rows(batch_size, torch.float64)
    with pytest.raises(TypeError, match=REFUSED):
        batch / batch.size()[0]
    with pytest.raises(TypeError, match=REFUSED):
        batch * batch.shape[0]
    assert batch.size()[1] == 4 and type(batch.size()[1]) is int  # other sizes: plain ints


# ---------------------------------------------------------------- Python numbers

NUMBER_USES = {
    "float(n)": float,
    "complex(n)": complex,
    "math.sqrt(n)": math.sqrt,
    "math.exp(n)": math.exp,
    "n * 2": lambda n: n * 2,
    "2 * n": lambda n: 2 * n,
    "n + 1": lambda n: n + 1,
    "1 - n": lambda n: 1 - n,
    "n / 2": lambda n: n / 2,
    "n // 2": lambda n: n // 2,
    "5 // n": lambda n: 5 // n,
    "n % 2": lambda n: n % 2,
    "7 % n": lambda n: 7 % n,
    "n ** 2": lambda n: n ** 2,
    "2 ** n": lambda n: 2 ** n,
    "pow(n, 3, 2)": lambda n: pow(n, 3, 2),
    "divmod(n, 2)": lambda n: divmod(n, 2),
    "divmod(5, n)": lambda n: divmod(5, n),
    "-n": operator.neg,
    "+n": operator.pos,
    "abs(n)": abs,
    "~n": operator.invert,
    "n << 2": lambda n: n << 2,
    "1 << n": lambda n: 1 << n,
    "n >> 1": lambda n: n >> 1,
    "n & 3": lambda n: n & 3,
    "n | 3": lambda n: n | 3,
    "n ^ 3": lambda n: n ^ 3,
    "round(n)": round,
    "round(n, 1)": lambda n: round(n, 1),
    "math.floor(n)": math.floor,
    "math.ceil(n)": math.ceil,
    "math.trunc(n)": math.trunc,
    "n * n": lambda n: n * n,
    "n + n": lambda n: n + n,
    "n / 2.0": lambda n: n / 2.0,
    "n > 1": lambda n: n > 1,
    "n >= 2": lambda n: n >= 2,
    "n < 2": lambda n: n < 2,
    "n <= 1": lambda n: n <= 1,
    "1 < n": lambda n: 1 < n,
    "max(n, 2)": lambda n: max(n, 2),
    "min(n, 2)": lambda n: min(n, 2),
    "sum([n, n])": lambda n: sum([n, n]),
}


@pytest.mark.parametrize("batch_size", [1, 2, 5])
@pytest.mark.parametrize("use", list(NUMBER_USES))
def test_x_size_0_as_a_python_number_is_refused(use, batch_size):
    batch = MaskedBatch.fromlist([torch.ones(1, 2, 3)] * batch_size, (True, False))
    static = MaskedBatch.fromlist([torch.ones(1, 2)] * batch_size, (False,))
    for n in (batch.size(0), batch.shape[0], static.size()[0]):
        with pytest.raises(TypeError, match=REFUSED):
            NUMBER_USES[use](n)


def test_the_refusal_names_both_alternatives():
    n = MaskedBatch.fromlist([torch.ones(1, 2)] * 3, (False,)).size(0)
    with pytest.raises(TypeError) as info:
        n / 2
    message = str(info.value)
    assert "x.size(0)" in message and "x.batch_size" in message and "or 1" in message


def test_x_batch_size_is_the_plain_number_of_examples():
    batch = MaskedBatch.fromlist([torch.ones(1, 2)] * 3, (False,))
    assert type(batch.batch_size) is int and batch.batch_size * 2 == 6


# ---------------------------------------------------------------- sizes: the batch size

@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_as_a_size_it_is_the_batch_size(batch_size):
    batch = MaskedBatch.fromlist([torch.ones(1, 2, 3)] * batch_size, (True, False))
    n = batch.size(0)
    assert isinstance(n, int) and type(n) is BatchSize
    assert int(n) == operator.index(n) == batch_size and type(int(n)) is int
    assert repr(n) == str(n) == str(batch_size) and hash(n) == hash(batch_size)
    assert len(range(n)) == batch_size
    assert torch.zeros(n, 4).shape == (batch_size, 4)
    assert batch.shape[0] == batch.size(0) and type(batch.shape[0]) is BatchSize
    assert copy.deepcopy(n) == batch_size and type(copy.deepcopy(n)) is BatchSize
    assert type(pickle.loads(pickle.dumps(n))) is BatchSize
    assert bool(n) and f"{n}" == str(batch_size)


@pytest.mark.parametrize("batch_size", [2, 4])
def test_equality_holds_with_1_and_with_the_batch_size(batch_size):
    # As nn.RNN's check needs (a shared (layers, 1, hidden) state or a (layers, B, hidden)
    # one), and as a plain tensor built with it as a size has (torch.zeros(x.size(0), H)).
    batch = MaskedBatch.fromlist([torch.ones(1, 2)] * batch_size, (False,))
    n = batch.size(0)
    assert n == 1 and n == batch_size and 1 == n and batch_size == n
    assert not (n != 1) and not (n != batch_size)
    assert n != batch_size + 1 and not (n == batch_size + 1)
    assert torch.zeros(n, 3).size(0) == n and torch.zeros(1, 3).size(0) == n
    assert n in (1,) and n in (batch_size,)
    # two batch sizes compare as sizes: a state of another batch fails torch's checks
    other = MaskedBatch.fromlist([torch.ones(1, 2)] * (batch_size + 1), (False,)).size(0)
    assert n == batch.shape[0] and n != other and not (n == other)
    assert n == 1.0 and n == float(batch_size)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_the_original_idioms_taking_it_as_a_size_still_work(batch_size, dtype):
    examples, batch = sequences(batch_size, dtype)
    w = torch.randn(4, 5, dtype=dtype)

    def state(x, w):
        h = x.new_zeros(x.size(0), 5)  # the original README's state
        return h + x.sum(1) @ w

    def flattened(x, w):
        return (x.sum(1) @ w[:, :4]).view(x.size(0), -1).reshape(x.size(0), 2, 2)

    def expanded(x, w):
        h0 = torch.ones(1, 4, dtype=dtype)
        return (x.sum(1) + h0.expand(x.size(0), -1)) @ w

    def legacy_new(x, w):
        h = x.new(x.size(0), 4).zero_()
        return h + x.sum(1) @ w[:, :4]

    for f in (state, flattened, expanded, legacy_new):
        mb_assert(f, [examples, [w] * batch_size], [batch, w], batch_size)


# ------------------------------------------- a plain tensor built with x.size(0) as a size

ROWS_REFUSED = (
    r"Tensor\.add: a plain tensor argument has size 3 in dimension 0, which is the batch "
    r"dimension of each example \(size one\); .*\. Its size is the batch size: built with "
    r"x\.size\(0\) as a size \(torch\.zeros\(x\.size\(0\), 4\), a state\), it is a plain "
    r"tensor, which cannot be told from one holding a row per example; build a batch, one "
    r"row per example, with x\.new_zeros\(x\.size\(0\), 4\), or share one row, "
    r"torch\.zeros\(1, 4\)$")


def accumulated(make):
    def accumulate(x):  # a state, built with x.size(0), that sums the example's rows
        h = make(x)
        h = h + x.sum(1)
        return h * 2 + x.pow(2).sum(1)
    return accumulate


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_plain_state_built_with_x_size_0_is_refused_naming_what_to_build(dtype):
    # torch.zeros(x.size(0), 4) is (B, 4) beside a batch: a plain tensor with a row per
    # example cannot be told from one shared by them (B rows in each example's loop).
    _, batch = sequences(3, dtype)
    with pytest.raises(ValueError, match=ROWS_REFUSED):
        accumulated(lambda x: torch.zeros(x.size(0), 4, dtype=dtype))(batch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 2), (2,), (0,)])
def test_the_states_the_refusal_suggests_equal_the_loop(lengths, dtype):
    examples = [torch.randn(1, n, 4, dtype=dtype) for n in lengths]
    batch = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    makes = [lambda x: x.new_zeros(x.size(0), 4), lambda x: torch.zeros(1, 4, dtype=dtype)]
    if len(lengths) == 1:  # then the plain state has one row, as in the loop
        makes.append(lambda x: torch.zeros(x.size(0), 4, dtype=dtype))
    for make in makes:
        mb_assert(accumulated(make), [examples], [batch], len(lengths))


# ---------------------------------------------------------------- matchbox.compile

def test_under_compile_with_a_symbolic_batch_size_it_is_a_size():
    def model(x):
        h = x.new_zeros(x.size(0), 4) + x.sum(1)
        if x.size(0) == 1:  # always, in the loop (== holds with 1 and the batch size)
            h = h * 2
        return h.view(x.size(0), 2, 2).reshape(x.shape[0], -1)

    compiled = matchbox.compile(model, backend="aot_eager")
    for lengths in ([3, 1, 2, 4], [2, 5, 1], [4, 2]):
        examples = [torch.randn(1, n, 4) for n in lengths]
        batch = MaskedBatch.fromlist(examples, (True, False))
        for got, x in zip(compiled(batch).examples(), examples):
            torch.testing.assert_close(got, model(x))
    [spec] = compiled.specializations  # one graph: the batch size stayed symbolic
    assert spec.summary.startswith("batch(B=*")


@pytest.mark.filterwarnings("ignore:matchbox.compile")  # it runs eagerly, which raises
@pytest.mark.parametrize("use", ["x / x.size(0)", "x / float(x.size(0))", "x * (x.size(0) * 2)",
                                 "x.size(0) - x"])
def test_under_compile_with_a_symbolic_batch_size_it_is_refused_as_a_number(use):
    compiled = matchbox.compile(lambda x: SCALAR_USES[use](x.sum(1)), backend="aot_eager")
    for lengths in ([3, 1, 2, 4], [2, 5, 1]):
        batch = MaskedBatch.fromlist([torch.randn(1, n, 4) for n in lengths], (True, False))
        with pytest.raises(TypeError, match=REFUSED):
            compiled(batch)
