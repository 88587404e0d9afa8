"""Convenience methods and conversions, for batches and for plain tensors.

Each helper works on a ``MaskedBatch`` and on a plain tensor of batch size one
(one example); the batch result must equal the loop over the examples, values
and gradients.  Importing matchbox may add these names to ``torch.Tensor`` but
must change nothing that torch already has.
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as torch_F
from hypothesis import given
from hypothesis import strategies as st
from strategies import example_lists

import matchbox.functional as MF
from matchbox import MaskedBatch, _registry
from matchbox.convenience import CONVENIENCE
from matchbox.testing import mb_assert, mb_rand


def assert_loop(f, *pairs):
    mb_assert(f, [xs for xs, _ in pairs], [xb for _, xb in pairs], len(pairs[0][0]))


def batch_of(*lengths, width=4, dtype=torch.float64):
    xs = [torch.randn(1, n, width, dtype=dtype) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


# ------------------------------------------------------------------ batch_zeros and friends

BATCH_NEW = {
    "batch_zeros": lambda x: x.batch_zeros(3),
    "batch_zeros, two sizes": lambda x: x.batch_zeros(2, 3),
    "batch_zeros, a tuple": lambda x: x.batch_zeros((2, 3)),
    "batch_ones": lambda x: x.batch_ones(x.size(-1)),
    "batch_zeros, a dynamic size": lambda x: x.batch_zeros(x.size_as_tensor(1), 2),
    "batch_ones, a dynamic size": lambda x: x.batch_ones(x.size_as_tensor(1)),
    "state update": lambda x: x.batch_zeros(x.size(-1)) + x.sum(1),
    "MF.batch_ones": lambda x: MF.batch_ones(x, x.size(-1)) * x.sum(1),
}


@pytest.mark.parametrize("case", BATCH_NEW)
@given(pair=example_lists(dims=(True, False)))
def test_batch_constructors_equal_the_loop(case, pair):
    assert_loop(BATCH_NEW[case], pair)


@given(pair=example_lists(dims=(True, False)))
def test_batch_empty_has_the_loop_shapes(pair):
    xs, xb = pair
    out = xb.batch_empty(xb.size_as_tensor(1), 3)
    assert [tuple(e.shape) for e in out.examples()] == [
        tuple(x.batch_empty(x.size_as_tensor(1), 3).shape) for x in xs]
    assert out.dims == (True, False) and out.dtype == xb.dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_constructors_on_a_plain_tensor_have_a_leading_one(dtype):
    x = torch.randn(1, 5, 3, dtype=dtype)
    assert torch.equal(x.batch_zeros(3), torch.zeros(1, 3, dtype=dtype))
    assert torch.equal(x.batch_ones(2, x.size_as_tensor(1)), torch.ones(1, 2, 5, dtype=dtype))
    assert x.batch_empty((4,)).shape == (1, 4) and x.batch_empty(4).dtype == dtype


def test_batch_constructors_on_a_batch_are_per_example():
    _, xb = batch_of(2, 0, 3)
    out = xb.batch_ones(3)
    assert out.dims == (False,) and out.data.shape == (3, 3)
    assert torch.equal(out.data, torch.ones(3, 3, dtype=torch.float64))


def test_a_batch_size_that_is_not_per_example_scalars_is_refused():
    _, xb = batch_of(2, 0, 3)
    with pytest.raises(ValueError, match="batch_zeros: size 1 must be a batch of per-example "
                                         "scalars"):
        xb.batch_zeros(xb)


# ------------------------------------------------------------------ size_as_tensor, maxsize

@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@given(pair=example_lists(dims=(True, False)))
def test_size_as_tensor_equals_the_loop(dim, pair):
    xs, xb = pair
    sizes = xb.size_as_tensor(dim)
    assert sizes.dims == () and sizes.dtype == torch.long
    assert_loop(lambda x: x.size_as_tensor(dim), pair)
    for b, x in enumerate(xs):
        expected = x.size_as_tensor(dim)
        assert expected.dim() == 0 and expected.dtype == torch.long
        assert int(expected) == x.size(dim) == int(sizes.data[b])


@given(pair=example_lists(dims=(True, False, True)))
def test_size_as_tensor_of_each_dynamic_dim_equals_the_loop(pair):
    assert_loop(lambda x: (x.size_as_tensor(1), x.size_as_tensor(2), x.size_as_tensor(3)),
                pair)


def test_size_as_tensor_of_an_out_of_range_dim_is_refused():
    _, xb = batch_of(2, 1)
    with pytest.raises(IndexError, match="size_as_tensor: dimension 3 is out of range for "
                                         "examples of rank 3"):
        xb.size_as_tensor(3)


@given(pair=example_lists(dims=(True, False)))
def test_maxsize_is_the_padded_size_and_the_size_of_a_plain_tensor(pair):
    xs, xb = pair
    assert xb.maxsize(1) == max(x.size(1) for x in xs)
    assert xb.maxsize(2) == xb.maxsize(-1) == xs[0].size(2)
    assert MF.maxsize(xb, 1) == xb.maxsize(1)
    for x in xs:
        assert x.maxsize(1) == MF.maxsize(x, 1) == x.size(1)
        assert x.maxsize(-1) == x.size(-1)


@given(pair=example_lists(dims=(True, False, True)))
def test_maxsize_without_a_dim_gives_every_padded_size_as_a_torch_size(pair):
    # As the original Matchbox's ``batch.data.size()``: dimension 0 is the batch size.
    xs, xb = pair
    sizes = xb.maxsize()
    assert type(sizes) is torch.Size
    assert sizes == xb.data.shape == torch.Size([xb.maxsize(d) for d in range(xb.dim())])
    assert MF.maxsize(xb) == sizes
    for x in xs:
        assert type(x.maxsize()) is torch.Size
        assert x.maxsize() == MF.maxsize(x) == x.shape


def positional_encodings_like(x):
    """The original Matchbox transformer's idiom: sinusoids of the padded length,
    expanded to ``x.maxsize()``, added to a batch as a plain tensor."""
    length, size = x.maxsize(-2), x.maxsize(-1)
    positions = torch.arange(0, length, out=x.new(length))
    channels = 1 / (10000 ** (torch.arange(0, size, 2, out=x.new(size // 2)) / size))
    encodings = positions.unsqueeze(-1) @ channels.unsqueeze(0)
    encodings = torch.stack((encodings.sin(), encodings.cos()), -1).flatten(-2)
    return encodings.unsqueeze(0).expand(x.maxsize())


@given(pair=example_lists(dims=(True, False), max_size=6))
def test_a_plain_tensor_expanded_to_maxsize_is_the_same_for_every_example(pair):
    xs, xb = pair
    assume_even = xb.maxsize(-1) % 2 == 0
    if not assume_even:
        xs = [torch.cat([x, x], -1) for x in xs]
        xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    assert_loop(lambda x: x + positional_encodings_like(x), (xs, xb))
    assert_loop(lambda x: (positional_encodings_like(x) * x).tanh(), (xs, xb))

    def in_place(x):
        y = x * 1
        y += positional_encodings_like(x)
        return y

    assert_loop(in_place, (xs, xb))


def test_a_plain_tensor_of_the_batch_size_that_is_not_an_expand_is_refused():
    # A (B, T, D) tensor with B rows of its own is not one value for every example:
    # each example's loop call would broadcast it to B rows.
    _, xb = batch_of(2, 3, width=4)
    with pytest.raises(ValueError, match=r"Tensor.__add__: a plain tensor argument has size 2 in "
                                         r"dimension 0, .* \(or be expanded to the batch size "
                                         r"from size 1, as expand\(x.maxsize\(\)\) does\)"):
        xb + torch.randn(xb.maxsize())
    with pytest.raises(ValueError, match=r"a plain tensor argument has size 3 in dimension 0"):
        xb + torch.randn(1, 3, 4).expand(3, 3, 4)  # stride 0, but not the batch size


# ------------------------------------------------------------------ split_dim, join_dims

def heads_as_examples(x, n, f):
    """The original Matchbox's multi-head idiom around ``f``: ``(1, T, D)`` ->
    ``(1, T, D / n, n)`` -> ``n`` examples ``(1, T, D / n)`` -> ``f`` -> back."""
    return f(x.split_dim(-1, n).join_dims(0, -1)).split_dim(0, n).join_dims(-1, 1)


def softmax(s, dim):
    """Softmax in core ops (``Tensor.softmax`` on batches is matchbox-nn's)."""
    return (s - s.logsumexp(dim, keepdim=True)).exp()


def attention(q):
    return softmax((q @ q.transpose(1, 2)).causal_mask(2, 1), -1) @ q


SPLIT_JOIN = {
    "split_dim": ((None, 6), lambda x: x.split_dim(2, 2)),
    "split_dim, negative dim": ((None, 6), lambda x: x.split_dim(-1, 3)),
    "split_dim, before the dynamic dim": ((6, None), lambda x: x.split_dim(1, 2)),
    "split_dim then join_dims": ((None, 6), lambda x: x.split_dim(2, 2).join_dims(2, 3)),
    "join_dims, adjacent static": ((None, 2, 3), lambda x: x.join_dims(2, 3)),
    "join_dims, the dynamic dim and the next": ((None, 2, 3), lambda x: x.join_dims(1, 2)),
    "join_dims, non-adjacent": ((None, 2, 3), lambda x: x.join_dims(1, 3)),
    "join_dims, non-adjacent static": ((2, None, 3), lambda x: x.join_dims(3, 1)),
    "join_dims, reversed static": ((None, 2, 3), lambda x: x.join_dims(3, 2)),
    "join_dims, negative dims": ((None, 2, 3), lambda x: x.join_dims(-2, -1)),
    "heads out and back": ((None, 6), lambda x: x.split_dim(-1, 2).transpose(1, 2)
                           .transpose(1, 2).join_dims(-2, -1)),
    "MF.split_dim / MF.join_dims": ((None, 6), lambda x: MF.join_dims(MF.split_dim(x, 2, 3),
                                                                      2, 3)),
    # Dimension 0: each slice of a static dimension an example, and back.
    "join_dims(0, 1) and split_dim(0, n)": ((3, None), lambda x: x.join_dims(0, 1).exp()
                                             .split_dim(0, 3)),
    "join_dims(0, d), d between dynamic dims": ((None, 2, None), lambda x: x.join_dims(0, 2)
                                                 .sum(1).split_dim(0, 2)),
    "heads as examples, reduced over the dynamic dim": (
        (None, 6), lambda x: heads_as_examples(x, 3, lambda h: softmax(h, 1) * h.sum(1, True))),
    "heads as examples, a weight per head-dim": (
        (None, 6), lambda x: heads_as_examples(x, 2, lambda h: h @ torch.linspace(
            -1, 1, 9, dtype=h.dtype).reshape(3, 3))),
    "one head": ((None, 4), lambda x: heads_as_examples(x, 1, lambda h: h.cumsum(1))),
}


@st.composite
def batches(draw, shape, min_length=0):
    """(examples, batch): ``shape`` gives static sizes (ints) and dynamic dims (None)."""
    batch_size = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    low = min_length if shape.count(None) <= 1 else max(min_length, 1)
    xs = [torch.randn(1, *[draw(st.integers(low, 4)) if s is None else s for s in shape],
                      dtype=dtype) for _ in range(batch_size)]
    return xs, MaskedBatch.fromlist(xs, [s is None for s in shape], padding_value=float("nan"))


@pytest.mark.parametrize("case", SPLIT_JOIN)
@given(data=st.data())
def test_split_dim_and_join_dims_equal_the_loop(case, data):
    shape, f = SPLIT_JOIN[case]
    assert_loop(f, data.draw(batches(shape)))


@pytest.mark.parametrize("heads", [1, 2, 3])
@given(data=st.data())
def test_multi_head_attention_with_heads_as_examples_equals_the_loop(heads, data):
    # Scores (T, T) have two dynamic dims, which cannot hold an empty example.
    assert_loop(lambda x: heads_as_examples(x, heads, attention),
                data.draw(batches((None, 6), min_length=1)))


@given(pair=example_lists(dims=(True, False, False), min_length=0))
def test_join_dims_0_makes_each_slice_an_example_in_the_original_order(pair):
    # Example b's slice n becomes example b * N + n, with b's own length.
    xs, xb = pair
    n = xb.maxsize(2)
    joined = xb.join_dims(0, 2)
    assert joined.dims == (True, False) and joined.batch_size == len(xs) * n
    examples = list(joined.examples())
    for b, x in enumerate(xs):
        for k in range(n):
            assert torch.equal(examples[b * n + k], x[:, :, k])
    back = list(joined.split_dim(0, n).transpose(1, 2).examples())
    for b, x in enumerate(xs):
        assert torch.equal(back[b], x)


def test_split_dim_and_join_dims_on_a_plain_tensor():
    x = torch.randn(1, 5, 6, 2)
    assert torch.equal(x.split_dim(2, 3), x.reshape(1, 5, 2, 3, 2))
    assert torch.equal(x.split_dim(-1, 1), x.reshape(1, 5, 6, 2, 1))
    assert torch.equal(x.join_dims(1, 2), x.reshape(1, 30, 2))
    assert torch.equal(x.join_dims(1, 3), x.permute(0, 1, 3, 2).reshape(1, 10, 6))
    assert torch.equal(x.join_dims(3, 1), x.permute(0, 2, 3, 1).reshape(1, 6, 10))
    # Dimension 0 of one example: the plain reshapes the original gave.
    assert torch.equal(x.join_dims(0, 3), x.permute(0, 3, 1, 2).reshape(2, 5, 6))
    assert torch.equal(x.join_dims(0, 1), x.reshape(5, 6, 2))
    heads = x.join_dims(0, 3)
    assert torch.equal(heads.split_dim(0, 2), heads.reshape(1, 2, 5, 6))
    assert torch.equal(heads.split_dim(0, 2).join_dims(-1, 1), x.reshape(1, 5, 12))


def test_split_dim_is_the_inverse_of_join_dims_in_the_original_head_order():
    # x.split_dim(-1, N): feature d = i * N + n goes to [i, n], heads last, as the
    # original's multi-head attention relies on; join_dims(-1, 1) puts them back.
    x = torch.arange(12.0).reshape(1, 1, 12)
    heads = x.split_dim(-1, 3)
    assert heads.shape == (1, 1, 4, 3)
    assert heads[0, 0, :, 0].tolist() == [0.0, 3.0, 6.0, 9.0]
    assert torch.equal(heads.join_dims(0, -1).split_dim(0, 3).join_dims(-1, 1), x)


def test_split_dim_errors_name_the_dimension():
    _, xb = batch_of(2, 1, width=6)
    with pytest.raises(ValueError, match="split_dim: dimension 1 is dynamic; only static "
                                         "dimensions split"):
        xb.split_dim(1, 2)
    with pytest.raises(ValueError, match="split_dim: dimension 2 has size 6, not divisible by 4"):
        xb.split_dim(2, 4)
    with pytest.raises(TypeError, match=r"split_dim: split_by must be a positive int \(the "
                                        r"size of the second new dimension\), got \(2, 3\)"):
        xb.split_dim(-1, (2, 3))
    with pytest.raises(ValueError, match="split_dim: dimension 2 has size 6, not divisible by 4"):
        torch.randn(1, 2, 6).split_dim(-1, 4)
    with pytest.raises(ValueError, match=r"split_dim\(0, 3\): the batch has 2 examples, not "
                                         "divisible by 3"):
        xb.split_dim(0, 3)


def test_split_dim_0_refuses_examples_of_different_sizes():
    # The two examples joined into one have lengths 2 and 1: no static dimension holds them.
    _, xb = batch_of(2, 1, width=6)
    with pytest.raises(ValueError, match=r"split_dim\(0, 2\): the examples joined into one "
                                         r"differ in their real positions \(each run of 2 "
                                         r"consecutive examples becomes one example"):
        xb.split_dim(0, 2)
    assert xb.join_dims(0, -1).split_dim(0, 6).dims == (False, True)


def test_join_dims_errors():
    xs = [torch.randn(1, n, 2, 3) for n in (2, 1)]
    xb = MaskedBatch.fromlist(xs, (True, False, False))
    with pytest.raises(ValueError, match="join_dims: dimensions 2 and -2 are the same"):
        xb.join_dims(2, -2)
    with pytest.raises(ValueError, match=r"join_dims\(0, 1\): dimension 1 is dynamic; only a "
                                         "static dimension can join the batch"):
        xb.join_dims(0, 1)
    with pytest.raises(ValueError, match=r"join_dims\(2, 0\): merging the batch dimension into "
                                         r"dimension 2 would mix examples; join_dims\(0, 2\) "
                                         "makes each slice of dimension 2 an example"):
        xb.join_dims(2, 0)
    # Joining the dynamic dim as the minor one would put padding between real values.
    # (A user trial saw the message name Tensor.flatten, which join_dims calls.)
    with pytest.raises(ValueError, match=r"join_dims\(2, 1\): dimension 1 is dynamic and "
                                         r"would be the minor of the merged dimension: "
                                         r"padding would fall between each example's real "
                                         r"values; .* join_dims\(1, 2\) keeps it major"):
        xb.join_dims(2, 1)
    with pytest.raises(ValueError, match=r"join_dims\(3, 1\): dimension 1 is dynamic"):
        xb.join_dims(3, 1)


# ------------------------------------------------------------------ causal_mask

def _expected_causal(x):
    later = torch.ones(x.size(1), x.size(2), dtype=torch.bool).triu(1)
    return x.masked_fill(later, -math.inf)


@pytest.mark.parametrize("dims", [(True, True), (True, False), (False, True)])
@given(data=st.data())
def test_causal_mask_on_attention_scores_equals_the_loop(dims, data):
    pair = data.draw(example_lists(dims=dims))
    assert_loop(lambda s: s.causal_mask(2, 1), pair)
    assert_loop(lambda s: s.causal_mask(in_dim=-1, out_dim=-2).exp(), pair)
    assert_loop(lambda s: MF.causal_mask(s, in_dim=2, out_dim=1) * 2, pair)
    for x in pair[0]:
        assert torch.equal(x.causal_mask(in_dim=2, out_dim=1), _expected_causal(x))


def test_causal_mask_keeps_the_batch_layout_and_hides_later_keys():
    xs = [torch.randn(1, n, n, dtype=torch.float64) for n in (3, 1, 2)]
    xb = MaskedBatch.fromlist(xs, (True, True), padding_value=float("nan"))
    out = xb.causal_mask(in_dim=2, out_dim=1)
    assert out.dims == xb.dims and torch.equal(out.mask, xb.mask)
    for got, x in zip(out.examples(), xs):
        assert torch.equal(got, _expected_causal(x))


def test_causal_mask_on_a_plain_tensor_is_masked_fill():
    x = torch.randn(1, 4, 6)
    assert torch.equal(x.causal_mask(2, 1), _expected_causal(x))
    assert torch.equal(x.causal_mask(1, 2), x.masked_fill(
        torch.ones(4, 6, dtype=torch.bool).tril(-1), -math.inf))


# ------------------------------------------------------------------ conversions

CONVERSIONS = {
    "Tensor.double": lambda x: x.float().double(),
    "Tensor.float": lambda x: x.float(),
    "Tensor.half": lambda x: x.half(),
    "Tensor.bfloat16": lambda x: x.bfloat16(),
    "Tensor.long": lambda x: (x * 10).long(),
    "Tensor.int": lambda x: (x * 10).int(),
    "Tensor.short": lambda x: (x * 10).short(),
    "Tensor.char": lambda x: (x * 10).char(),
    "Tensor.byte": lambda x: (x.abs() * 10).byte(),
    "Tensor.bool": lambda x: (x > 0).bool(),
    "Tensor.type_as": lambda x: x.type_as(torch.zeros(1, dtype=torch.float16)),
    "Tensor.type": lambda x: x.type(torch.float64) + x.type("torch.DoubleTensor"),
    "Tensor.to": lambda x: x.to(torch.float32),
    "Tensor.contiguous": lambda x: x.transpose(1, 2).contiguous().transpose(1, 2) * 2,
    "Tensor.cpu": lambda x: x.cpu() * 2,
    "Tensor.detach": lambda x: x.detach() * x,
    "torch.detach": lambda x: torch.detach(x) + x,
    "Tensor.detach_": lambda x: (x * 3).detach_(),
    "Tensor.requires_grad_": lambda x: x.detach().requires_grad_() * x,
    "torch.is_floating_point": lambda x: (torch.is_floating_point(x),
                                          torch.is_floating_point(x > 0)),
    "torch.is_complex": lambda x: torch.is_complex(x),
}
CONVERSION_OPS = [e.name for e in _registry.entries() if e.family == "conversion"]


def test_type_without_arguments_names_the_type_as_a_tensors_does():
    xs, xb = mb_rand(2, (True, 3), min_size=0)
    assert xb.type() == xs[0].type() == xb.data.type()
    assert xb.type() in ("torch.FloatTensor", "torch.DoubleTensor")


@pytest.mark.parametrize("name", CONVERSION_OPS)
@given(pair=example_lists(dims=(True, False)))
def test_every_registered_conversion_equals_the_loop(name, pair):
    if name == "Tensor.cuda":
        if not torch.cuda.is_available():
            pytest.skip("Tensor.cuda needs a CUDA device")
        assert_loop(lambda x: x.cuda().cpu(), pair)
        return
    assert name in CONVERSIONS, f"{name} is registered as a conversion but has no test case"
    assert_loop(CONVERSIONS[name], pair)


@given(pair=example_lists(dims=(True, False)))
def test_to_with_every_argument_form_equals_the_loop(pair):
    assert_loop(lambda x: x.to(dtype=torch.float64), pair)
    assert_loop(lambda x: x.to("cpu", torch.float32), pair)
    assert_loop(lambda x: x.to(torch.zeros((), dtype=torch.float16)), pair)


@given(pairs=st.lists(example_lists(dims=(True, False), min_batch=2, max_batch=2),
                      min_size=2, max_size=2))
def test_to_another_batch_takes_its_dtype(pairs):
    (xs, xb), (ys, yb) = pairs
    yb = yb.half()
    out = xb.to(yb)
    assert out.dtype == torch.float16 and out.dims == xb.dims
    assert torch.equal(out.mask, xb.mask)
    for got, x in zip(out.examples(), xs):
        assert torch.equal(got, x.to(torch.float16))
    assert_loop(lambda x, y: x.to(y), (xs, xb), (ys, yb))


def test_detach_and_requires_grad_keep_the_layout():
    _, xb = batch_of(2, 0, 3)
    xb.requires_grad_()
    assert xb.requires_grad and xb.data.requires_grad
    detached = xb.detach()
    assert not detached.requires_grad and detached.dims == xb.dims
    assert detached.mask is xb.mask and detached.data.data_ptr() == xb.data.data_ptr()
    again = detached.requires_grad_()
    assert again is detached and again.requires_grad
    assert detached.requires_grad_(False) is detached and not detached.requires_grad


def test_casts_keep_the_mask_and_dims():
    _, xb = batch_of(2, 0, 3)
    for out in (xb.float(), xb.double(), xb.to(torch.float32), xb.half(), xb.long()):
        assert out.mask is xb.mask and out.dims == xb.dims
    assert xb.float().dtype == torch.float32 and xb.float().double().dtype == torch.float64


# ------------------------------------------------------------------ torch is left unchanged

_SNAPSHOT = textwrap.dedent("""
    import sys, torch
    def snapshot():
        return {cls.__name__: dict(vars(cls)) for cls in torch.Tensor.__mro__}
    before = snapshot()
    functional = dict(vars(torch.nn.functional))
    import matchbox, matchbox.functional
    after = snapshot()
    changed = sorted(f"{c}.{n}" for c in before for n in before[c]
                     if n not in after[c] or after[c][n] is not before[c][n])
    added = {c: sorted(set(after[c]) - set(before[c])) for c in after}
    f_changed = sorted(n for n in functional
                       if vars(torch.nn.functional).get(n) is not functional[n])
    print(repr((changed, added, f_changed)))
""")


def test_importing_matchbox_only_adds_names_to_torch_tensor():
    out = subprocess.run([sys.executable, "-c", _SNAPSHOT], capture_output=True, text=True,
                         check=True)
    changed, added, f_changed = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert changed == [], f"importing matchbox changed torch.Tensor attributes: {changed}"
    assert f_changed == [], f"importing matchbox changed torch.nn.functional: {f_changed}"
    assert set(added["Tensor"]) >= set(CONVENIENCE) | {"maxsize"}
    assert set(added["Tensor"]) <= set(_registry.convenience_methods()), (
        f"names added to torch.Tensor that are not Matchbox convenience methods: "
        f"{sorted(set(added['Tensor']) - set(_registry.convenience_methods()))}")
    assert all(not names for cls, names in added.items() if cls != "Tensor"), added


def test_matchbox_functional_is_there_after_import_matchbox():
    # As torch.nn.functional after `import torch` (a user trial ran a README snippet
    # writing matchbox.functional.maxsize after `import matchbox` only).
    code = "import matchbox; print(matchbox.functional.maxsize.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "matchbox.convenience"


def test_convenience_names_are_on_batches_tensors_and_matchbox_functional():
    for name in _registry.convenience_methods():
        assert hasattr(MaskedBatch, name), name
        assert hasattr(torch.Tensor, name), name
        assert hasattr(MF, name) and name in MF.__all__, name


def test_matchbox_functional_keeps_every_torch_functional_name_unchanged():
    # cross_entropy also takes the original Matchbox's classes-last layout, where
    # PyTorch's does not fit (tested below: PyTorch's call is otherwise unchanged).
    for name in dir(torch_F):
        if not name.startswith("_") and name not in ("stack", "cross_entropy"):
            assert getattr(MF, name) is getattr(torch_F, name), name
    assert MF.batch_sum is not None and MF.batch_mean is not None


# ---------------------------------------------------------------------------- cross_entropy


def test_functional_cross_entropy_takes_the_originals_classes_last_layout():
    # The original Matchbox's call: logits (1, T, C) against targets (1, T).
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 3, dtype=torch.float64, requires_grad=True)
    target = torch.randint(3, (1, 5))
    with pytest.raises(RuntimeError, match="Expected target size"):
        torch_F.cross_entropy(logits, target)  # PyTorch's own function is unchanged
    for reduction in ("mean", "sum", "none"):
        got = MF.cross_entropy(logits, target, reduction=reduction)
        want = torch_F.cross_entropy(logits.transpose(1, 2), target, reduction=reduction)
        torch.testing.assert_close(got, want)
    got_grad, = torch.autograd.grad(MF.cross_entropy(logits, target), logits)
    want_grad, = torch.autograd.grad(torch_F.cross_entropy(logits.transpose(1, 2), target),
                                     logits)
    torch.testing.assert_close(got_grad, want_grad)


def test_functional_cross_entropy_is_pytorchs_where_pytorchs_layout_fits():
    torch.manual_seed(0)
    for logits, target in [
        (torch.randn(2, 4, 4), torch.randint(4, (2, 4))),   # fits both: PyTorch's reading
        (torch.randn(2, 3, 5), torch.randint(3, (2, 5))),   # PyTorch's layout
        (torch.randn(4, 3), torch.randint(3, (4,))),        # no position dimension
        (torch.randn(2, 3, 5), torch.rand(2, 3, 5)),        # class probabilities
    ]:
        torch.testing.assert_close(MF.cross_entropy(logits, target),
                                   torch_F.cross_entropy(logits, target))
    # Neither layout fits: PyTorch's own error.
    with pytest.raises(RuntimeError, match="Expected target size"):
        MF.cross_entropy(torch.randn(1, 5, 3), torch.randint(3, (1, 4)))
