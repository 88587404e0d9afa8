"""PackedBatch itself: construction, the layouts it converts to and from, inspection, errors.

The oracles are the examples themselves and PyTorch's own packing functions:
``pad_packed_sequence`` of our PackedSequence, ``pack_sequence`` of the
examples, ``torch.nested`` components.
"""

from __future__ import annotations

import collections.abc

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from nested_checks import assert_examples, check_from_nested_refusals, check_from_nested_with_holes
from packed_strategies import examples_of_lengths, packed_examples
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence
from torch_features import pinned_or_torchs_error

import matchbox
from matchbox import MaskedBatch
from matchbox.packed import PackedBatch, as_masked, as_packed
from matchbox.testing import mb_assert

# ---------------------------------------------------------------------------- fromlist


@given(packed_examples())
def test_fromlist_holds_the_examples_in_the_callers_order(pair):
    xs, pb = pair
    assert_examples(pb, xs)
    assert pb.data.shape[0] == sum(x.size(1) for x in xs)  # exactly the real rows
    assert pb.batch_size == len(xs) and pb.dims == (True,) + (False,) * (xs[0].dim() - 2)


@given(packed_examples(min_length=1))
def test_layout_is_pytorchs_packed_layout(pair):
    # PyTorch unpacks our PackedSequence into the padded examples, in the caller's order.
    xs, pb = pair
    padded, lengths = pad_packed_sequence(pb.to_packed_sequence(), batch_first=True)
    assert lengths.tolist() == [x.size(1) for x in xs]
    for b, x in enumerate(xs):
        assert torch.equal(padded[b : b + 1, : x.size(1)], x)


def test_distinct_lengths_give_pack_sequence_byte_for_byte():
    xs = examples_of_lengths([2, 5, 1, 3])
    expected = pack_sequence([x[0] for x in xs], enforce_sorted=False)
    pb = PackedBatch.fromlist(xs)
    assert torch.equal(pb.data, expected.data)
    assert torch.equal(pb.batch_sizes, expected.batch_sizes)
    assert torch.equal(pb.sorted_indices, expected.sorted_indices)
    assert torch.equal(pb.unsorted_indices, expected.unsorted_indices)
    assert pb.offsets.tolist() == [0, 4, 7, 9, 10, 11]


def test_ties_keep_the_callers_order():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3, 2, 3, 0]))
    assert pb.sorted_indices.tolist() == [1, 3, 0, 2, 4]
    assert pb.batch_sizes.tolist() == [4, 4, 2]


def test_fromlist_gradients_reach_every_example():
    xs = [x.requires_grad_() for x in examples_of_lengths([3, 0, 2])]
    pb = PackedBatch.fromlist(xs)
    weights = torch.randn_like(pb.data)
    (pb.data * weights).sum().backward()
    for x, g in zip(xs, PackedBatch._make(weights, pb.layout).examples()):
        assert torch.equal(x.grad, g)


def test_fromlist_of_token_ids_and_of_several_static_dims():
    ids = [torch.randint(0, 9, (1, n)) for n in (4, 1, 0)]
    assert_examples(PackedBatch.fromlist(ids, (True,)), ids)
    cubes = [torch.randn(1, n, 2, 3) for n in (2, 3)]
    assert_examples(PackedBatch.fromlist(cubes, (True, False, False)), cubes)


def test_fromlist_with_dimension_one_static_when_lengths_agree():
    xs = examples_of_lengths([3, 3])
    assert_examples(PackedBatch.fromlist(xs, (False, False)), xs)


@pytest.mark.parametrize("lengths", [[0], [0, 0, 0], [4, 0, 0, 1]],
                         ids=["one-empty", "all-empty", "empties-between"])
def test_zero_length_examples_are_held(lengths):
    xs = examples_of_lengths(lengths)
    pb = PackedBatch.fromlist(xs)
    assert_examples(pb, xs)
    assert pb.batch_sizes.tolist() == [sum(n > t for n in lengths) for t in range(max(lengths))]
    assert pb.sorted_indices[-lengths.count(0):].tolist() == [
        i for i, n in enumerate(lengths) if n == 0]
    assert_examples(pb.to_masked(), xs)


def test_fromlist_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: the list of examples is empty"):
        PackedBatch.fromlist([])
    with pytest.raises(TypeError, match=r"PackedBatch.fromlist: example 1 is a list, not a "
                                        r"tensor"):
        PackedBatch.fromlist([torch.zeros(1, 2, 3), [1, 2]])
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: dimension 2 is static but the "
                                         r"examples differ in size there: example 0 has 3, "
                                         r"example 1 has 4 \(a PackedBatch has one "
                                         r"dynamic dimension, 1; use MaskedBatch.fromlist "
                                         r"for more\)"):
        PackedBatch.fromlist([torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)])
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: dimension 2 is dynamic too; a "
                                         r"PackedBatch packs one dynamic dimension"):
        PackedBatch.fromlist([torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)], (True, True))
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: examples need a dimension 1 to "
                                         r"pack"):
        PackedBatch.fromlist([torch.zeros(1), torch.zeros(1)], ())
    with pytest.raises(ValueError, match=r"^PackedBatch.fromlist: each example must be \(1, "
                                         r"length, ...\), a batch dimension of size one first; "
                                         r"example 0 has shape \(3,\) \(add it with "
                                         r"x.unsqueeze\(0\)\)$"):
        PackedBatch.fromlist([torch.zeros(3), torch.zeros(5)])
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: example 0 has size 2 in "
                                         r"dimension 0"):
        PackedBatch.fromlist([torch.zeros(2, 3)])
    with pytest.raises(ValueError, match=r"PackedBatch.fromlist: example 1 has dtype "
                                         r"torch.float64 but example 0 has torch.float32"):
        PackedBatch.fromlist([torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.float64)])


# ---------------------------------------------------------------------------- MaskedBatch


@given(packed_examples())
def test_from_masked_and_to_masked_keep_the_examples(pair):
    xs, pb = pair
    mb = MaskedBatch.fromlist(xs, pb.dims, padding_value=float("nan"))
    from_masked = PackedBatch.from_masked(mb)
    assert torch.equal(from_masked.data, pb.data)  # the same layout, NaN padding never read
    assert from_masked.layout.same_as(pb.layout)
    masked = pb.to_masked()
    assert masked.dims == pb.dims
    assert_examples(masked, xs)
    assert torch.equal(masked.lengths(), mb.lengths()) and torch.equal(pb.lengths(), mb.lengths())


def test_conversions_carry_gradients_and_never_read_padding(dtype):
    xs = examples_of_lengths([3, 0, 5, 1], dtype=dtype)
    mb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    pb = PackedBatch.fromlist(xs)
    # Per example as_packed / as_masked are the identity, so the loop is x * 2.
    mb_assert(lambda x: as_packed(x) * 2, [xs], [mb], 4)
    mb_assert(lambda x: as_masked(x) * 2, [xs], [pb], 4)
    mb_assert(lambda x: as_packed(as_masked(x)).tanh(), [xs], [pb], 4)


def test_from_masked_with_dimension_one_static():
    xs = examples_of_lengths([3, 3, 3])
    static = MaskedBatch.fromlist(xs, (False, False))
    assert_examples(PackedBatch.from_masked(static), xs)
    # A static dimension 1 keeps its full length even where a mask is present.
    masked = MaskedBatch(static.data, torch.ones(3, 1, 1, dtype=torch.bool), (False, False))
    assert_examples(PackedBatch.from_masked(masked), xs)


def test_to_masked_pads_with_zeros_and_omits_the_mask_without_padding():
    masked = PackedBatch.fromlist(examples_of_lengths([2, 0, 3])).to_masked()
    assert torch.equal(masked.data[~masked.mask.expand_as(masked.data)],
                       torch.zeros(int((~masked.mask).sum()) * 3, dtype=torch.float64))
    assert PackedBatch.fromlist(examples_of_lengths([2, 2])).to_masked()._mask is None


def test_batches_converted_from_one_layout_share_their_mask():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 4, 1]))
    assert pb.to_masked()._mask is pb.tanh().to_masked()._mask


def test_from_masked_errors_name_the_dimension():
    mb = MaskedBatch.fromlist([torch.zeros(1, 2, 3), torch.zeros(1, 2, 4)], (False, True))
    with pytest.raises(ValueError, match=r"PackedBatch.from_masked: a PackedBatch packs dimension "
                                         r"1 of each example .* got dim=2; move that dimension "
                                         r"to position 1 first \(x.transpose\(1, 2\)\)"):
        PackedBatch.from_masked(mb, dim=2)
    with pytest.raises(ValueError, match=r"PackedBatch.from_masked: dimension 2 is dynamic too"):
        PackedBatch.from_masked(mb)
    with pytest.raises(ValueError, match=r"PackedBatch.from_masked: dimension 0 is the batch "
                                         r"dimension"):
        PackedBatch.from_masked(mb, dim=0)
    scalars = MaskedBatch.fromlist([torch.zeros(1), torch.zeros(1)], ())
    with pytest.raises(ValueError, match=r"PackedBatch.from_masked: examples of rank 1 have no "
                                         r"dimension 1 to pack"):
        PackedBatch.from_masked(scalars)
    with pytest.raises(TypeError, match=r"PackedBatch.from_masked: expected a MaskedBatch, got "
                                        r"Tensor"):
        PackedBatch.from_masked(torch.zeros(1, 2))


def test_as_helpers_on_every_type():
    xs = examples_of_lengths([2, 3])
    pb, mb, t = PackedBatch.fromlist(xs), MaskedBatch.fromlist(xs, (True, False)), xs[0]
    assert as_packed(pb) is pb and as_masked(mb) is mb
    assert as_packed(t) is t and as_masked(t) is t
    assert isinstance(as_masked(pb), MaskedBatch) and isinstance(as_packed(mb), PackedBatch)
    with pytest.raises(TypeError, match=r"as_masked: expected a PackedBatch, a MaskedBatch or a "
                                        r"tensor, got list"):
        as_masked([1])
    with pytest.raises(TypeError, match=r"as_packed: expected a MaskedBatch, a PackedBatch or a "
                                        r"tensor, got int"):
        as_packed(3)


# ---------------------------------------------------------------------------- PackedSequence


def test_to_packed_sequence_shares_the_data():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5, 1]))
    sequence = pb.to_packed_sequence()
    assert sequence.data is pb.data
    assert sequence.batch_sizes is pb.batch_sizes


@pytest.mark.parametrize("enforce_sorted", [False, True])
def test_from_packed_sequence_shares_the_data(enforce_sorted):
    xs = examples_of_lengths([5, 3, 3, 1])
    sequence = pack_sequence([x[0] for x in xs], enforce_sorted=enforce_sorted)
    pb = PackedBatch.from_packed_sequence(sequence)
    assert pb.data is sequence.data
    assert_examples(pb, xs)


def test_to_packed_sequence_refuses_zero_length_examples():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 1]))
    with pytest.raises(ValueError, match=r"PackedBatch.to_packed_sequence: example 1 has length "
                                         r"0, which a PackedSequence cannot hold"):
        pb.to_packed_sequence()


def test_constructor_takes_packed_parts_and_zero_length_examples():
    xs = examples_of_lengths([3, 0, 1])
    reference = PackedBatch.fromlist(xs)
    pb = PackedBatch(reference.data, reference.batch_sizes, reference.sorted_indices)
    assert_examples(pb, xs)
    pb = PackedBatch(torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64), batch_size=2)
    assert [x.shape for x in pb.examples()] == [(1, 0, 3), (1, 0, 3)]


def test_constructor_validates_the_layout():
    data = torch.zeros(4, 2)
    sizes = torch.tensor([2, 1, 1])
    with pytest.raises(ValueError, match=r"PackedBatch: batch_sizes must be a 1-D int64 CPU "
                                         r"tensor"):
        PackedBatch(data, sizes.int())
    with pytest.raises(ValueError, match=r"PackedBatch: batch_sizes must be positive and "
                                         r"non-increasing, got \[1, 2, 1\]"):
        PackedBatch(data, torch.tensor([1, 2, 1]))
    with pytest.raises(ValueError, match=r"PackedBatch: data has 4 rows but batch_sizes sums to "
                                         r"5"):
        PackedBatch(data, torch.tensor([3, 1, 1]))
    with pytest.raises(ValueError, match=r"PackedBatch: sorted_indices must be a permutation of "
                                         r"0..1, got \[1, 1\]"):
        PackedBatch(data, sizes, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"PackedBatch: unsorted_indices is not the inverse "
                                         r"permutation of sorted_indices"):
        PackedBatch(data, sizes, torch.tensor([1, 0, 2]), torch.tensor([1, 2, 0]))
    with pytest.raises(ValueError, match=r"PackedBatch: batch_sizes\[0\] is 2 but there are only "
                                         r"1 examples"):
        PackedBatch(data, sizes, batch_size=1)
    with pytest.raises(ValueError, match=r"PackedBatch: data must be a tensor of packed rows"):
        PackedBatch(torch.tensor(1.0), sizes)


# ---------------------------------------------------------------------------- torch.nested


@given(packed_examples())
def test_nested_round_trip(pair):
    xs, pb = pair
    nested = pb.to_nested()
    assert nested.is_nested and nested.layout == torch.jagged
    for component, x in zip(nested.unbind(), xs):
        assert torch.equal(component, x[0])
    assert_examples(PackedBatch.from_nested(nested), xs)


def test_nested_conversions_carry_gradients():
    xs = [x.requires_grad_() for x in examples_of_lengths([2, 0, 3])]
    nested = PackedBatch.fromlist(xs).to_nested()
    weights = torch.randn_like(nested.values())
    (nested.values() * weights).sum().backward()
    starts = [0, 2, 2]
    for x, s in zip(xs, starts):
        assert torch.equal(x.grad[0], weights[s : s + x.size(1)])


def test_from_nested_with_holes_reads_only_each_examples_rows():
    check_from_nested_with_holes(PackedBatch.from_nested)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_from_nested_errors():
    check_from_nested_refusals(PackedBatch.from_nested)


# ---------------------------------------------------------------------------- inspection


def test_the_padded_length_is_a_size_refused_as_a_number_like_a_masked_batchs():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5, 0], static=(3, 4)))
    assert torch.ones(pb.maxsize(1), 2).shape == (5, 2) and int(pb.maxsize(1)) == 5
    assert type(pb.maxsize(2)) is int and pb.maxsize(2) * 2 == 6
    with pytest.raises(TypeError, match=r"x\.maxsize\(1\) is the padded size of dimension 1, "
                                        r"which is dynamic"):
        pb.maxsize(1) - 1


def test_inspection_answers_like_a_masked_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5, 0], static=(3, 4)))
    assert pb.dim() == pb.ndim == 4 and pb.size(0) == 3 and pb.size(2) == 3
    assert pb.size(-1) == 4 and pb.maxsize(1) == 5 and pb.maxsize(0) == 3
    assert pb.dtype == torch.float64 and pb.device == torch.device("cpu") and not pb.is_cuda
    assert pb.lengths().tolist() == [[2], [5], [0]] and pb.is_floating_point()
    assert pb.shape[0] == 3 and pb.shape[3] == 4
    assert repr(pb.shape) == "BatchShape(3, *, 3, 4)  # * = dynamic"
    # == compares each example's shape, as the loop (it compared the objects, False).
    examples = examples_of_lengths([2, 0, 0], static=(3, 4))
    assert (pb.shape == PackedBatch.fromlist(examples).shape).data.tolist() == [True, False, True]
    assert (pb.shape == (1, 5, 3, 4)).data.tolist() == [False, True, False]
    assert (pb.shape == MaskedBatch.fromlist(examples, (True, False, False)).shape
            ).data.tolist() == [True, False, True]
    assert (pb.shape == (1, 5, 4, 3)) is False
    with pytest.raises(ValueError, match=r"size\(1\): dimension 1 is the packed dimension"):
        pb.size(1)
    with pytest.raises(ValueError, match=r"size\(\): dimension 1 is the packed dimension"):
        pb.size()
    with pytest.raises(IndexError, match=r"size: dimension 4 is out of range"):
        pb.size(4)


def test_repr_names_sizes_rows_and_padding():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 5, 0]))
    assert repr(pb) == ("PackedBatch(batch_size=3, dtype=torch.float64, rows=7 (padded: 15), "
                        "examples=[(1, 2, 3), (1, 5, 3), (1, 0, 3)])")
    many = PackedBatch.fromlist(examples_of_lengths([1] * 10)).requires_grad_()
    assert repr(many).endswith("(1, 1, 3), ... (10 examples)])")
    assert "requires_grad=True" in repr(many)


def test_dir_lists_the_supported_methods():
    names = dir(PackedBatch)
    for name in ("tanh", "__add__", "sum", "softmax", "to_masked", "examples", "to", "double"):
        assert name in names
    assert "transpose" in names  # transpose(0, 1): the time-major view
    assert "unsqueeze" not in names  # not supported: an error says to convert


def test_to_detach_and_requires_grad():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    assert pb.float().dtype == torch.float32 and pb.to(torch.float32).dtype == torch.float32
    assert pb.double().layout is pb.layout
    leaf = pb.detach().requires_grad_()
    assert leaf.requires_grad and leaf.data.is_leaf
    leaf.tanh().sum().backward()
    assert isinstance(leaf.grad, PackedBatch)
    assert torch.allclose(leaf.grad.data, 1 - pb.data.tanh() ** 2)
    assert pb.to("cpu").layout.device == torch.device("cpu")
    assert torch.detach(leaf).requires_grad is False


def test_backward_needs_a_gradient():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3])).requires_grad_()
    with pytest.raises(RuntimeError, match=r"backward\(\): grad can be implicitly created only "
                                           r"for per-example scalars"):
        pb.tanh().backward()
    pb.tanh().backward(PackedBatch._make(torch.ones_like(pb.data), pb.layout))
    assert pb.data.grad is not None


def test_ambiguous_uses_are_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(ValueError, match="the truth value of a PackedBatch is ambiguous"):
        bool(pb)
    with pytest.raises(TypeError, match="len\\(\\) of a PackedBatch is ambiguous"):
        len(pb)
    assert not isinstance(pb, collections.abc.Iterable)  # see MaskedBatch's test
    with pytest.raises(TypeError, match="'PackedBatch' object is not iterable"):
        iter(pb)
    with pytest.raises(TypeError, match="a PackedBatch holds one value per example"):
        float(pb)


def test_unsupported_ops_name_the_op_and_the_way_out():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(NotImplementedError, match=r"Tensor.unsqueeze is not implemented for "
                                                  r"PackedBatch; convert the batch with "
                                                  r"matchbox.packed.as_masked\(x\)"):
        pb.unsqueeze(1)
    with pytest.raises(NotImplementedError, match=r"torch.cumsum is not implemented for "
                                                  r"PackedBatch"):
        torch.cumsum(pb, 1)
    with pytest.raises(AttributeError, match="'PackedBatch' object has no attribute 'foo'"):
        pb.foo  # noqa: B018


@pytest.mark.parametrize("index", [(slice(None), -1), (slice(None), slice(1, None)), 0])
def test_indexing_names_the_op_and_the_way_out(index):
    # The README: indexing raises NotImplementedError naming the op and as_masked
    # (Python's own "not subscriptable" named neither).
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3]))
    with pytest.raises(NotImplementedError, match=r"Tensor.__getitem__ is not implemented for "
                                                  r"PackedBatch; convert the batch with "
                                                  r"matchbox.packed.as_masked\(x\)"):
        pb[index]
    # (An earlier message said MaskedBatch had no item assignment either; it has.)
    with pytest.raises(NotImplementedError, match=r"Tensor.__setitem__ is not implemented for "
                                                  r"PackedBatch; convert the batch with "
                                                  r"matchbox.packed.as_masked\(x\)"):
        pb[index] = 0


def test_indexing_by_a_masked_batch_goes_to_masked_batch():
    # The mixing rule: with a MaskedBatch argument (per-example ints) the op is MaskedBatch's.
    examples = examples_of_lengths([2, 3, 1])
    pb = PackedBatch.fromlist(examples)
    index = MaskedBatch.fromlist([torch.tensor([1]), torch.tensor([-1]), torch.tensor([0])], ())
    got = pb[:, index]
    assert isinstance(got, MaskedBatch)
    for g, x, i in zip(got.examples(), examples, (1, -1, 0)):
        # Each example's index is a (1,) tensor: the loop's advanced index keeps the dim.
        torch.testing.assert_close(g, x[:, torch.tensor([i])], rtol=0, atol=0)


def test_top_level_names():
    assert matchbox.PackedBatch is PackedBatch
    assert matchbox.as_masked is as_masked and matchbox.as_packed is as_packed


@given(st.lists(st.integers(0, 4), min_size=1, max_size=6))
def test_offsets_are_where_each_steps_rows_begin(lengths):
    pb = PackedBatch.fromlist(examples_of_lengths(lengths))
    offsets = pb.offsets.tolist()
    assert offsets[0] == 0 and offsets[-1] == pb.data.size(0)
    assert [b - a for a, b in zip(offsets, offsets[1:])] == pb.batch_sizes.tolist()


def test_pin_memory_pins_the_rows_or_gives_torchs_error():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    pinned = pinned_or_torchs_error(pb)
    if pinned is not None:
        assert pinned.layout is pb.layout


def test_grad_can_be_cleared_as_on_a_tensor():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3])).requires_grad_()
    matchbox.batch_sum((pb * 3).sum(-1).sum(1)).backward()
    assert torch.equal(pb.grad.data, torch.full_like(pb.data, 3.0))
    pb.grad = None
    assert pb.grad is None and pb.data.grad is None
