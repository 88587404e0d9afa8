"""MaskedBatch construction, validation, inspection and their error messages."""

from __future__ import annotations

import collections.abc
import re

import pytest
import torch
from hypothesis import given
from strategies import example_lists
from torch_features import pinned_or_torchs_error

import matchbox
from matchbox import MaskedBatch


@given(example_lists(dims=(True, False)))
def test_fromlist_then_examples_round_trips(pair):
    xs, xb = pair
    for x, y in zip(xs, xb.examples()):
        assert torch.equal(x, y)


@given(example_lists(dims=(True, True), min_length=1))
def test_fromlist_round_trips_with_two_dynamic_dims(pair):
    xs, xb = pair
    assert [tuple(y.shape) for y in xb.examples()] == [tuple(x.shape) for x in xs]


def test_layout_follows_the_contract():
    xs = [torch.rand(1, n, 4) for n in (3, 7, 1, 0)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    assert xb.data.shape == (4, 7, 4)
    assert xb.mask.shape == (4, 7, 1)
    assert xb.mask.dtype == torch.bool and not xb.mask.requires_grad
    assert xb.dims == (True, False)
    assert xb.mask[:, :, 0].sum(1).tolist() == [3, 7, 1, 0]
    assert xb.lengths()[:, 0].tolist() == [3, 7, 1, 0]


def test_fromlist_gradients_reach_every_example():
    xs = [torch.rand(1, n, 2, requires_grad=True) for n in (2, 0, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False))
    sum(y.sum() for y in xb.examples()).backward()
    for x in xs:
        assert torch.equal(x.grad, torch.ones_like(x))


def test_inspection():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 5) for n in (2, 4)], (True, False))
    assert xb.dtype == torch.float32
    assert xb.device == torch.device("cpu")
    assert xb.dim() == 3 and xb.ndim == 3
    assert xb.size(0) == 2 and xb.size(2) == 5 and xb.size(-1) == 5
    assert xb.maxsize(1) == 4
    assert xb.shape[2] == 5
    assert xb.size_as_tensor(1).data.tolist() == [2, 4]


def test_size_of_dynamic_dim_raises():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 5) for n in (2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"size\(1\): dimension 1 is dynamic.*maxsize"):
        xb.size(1)
    with pytest.raises(ValueError, match=r"dimension 1 is dynamic"):
        xb.shape[1]


def test_bool_is_ambiguous():
    xb = MaskedBatch.fromlist([torch.rand(1, 2)], (False,))
    with pytest.raises(ValueError, match=r"truth value of a MaskedBatch is ambiguous.*"
                                         r"\.any\(\) or \.all\(\).*@matchbox.batch to branch "
                                         r"per example \(it rewrites if, while, for, 'a if c else "
                                         r"b' and and/or/not, not the filters of comprehensions\)"):
        bool(xb)
    with pytest.raises(ValueError, match="ambiguous"):
        if xb > 0:
            pass


def test_conversions_and_autograd_flags():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 2) for n in (1, 3)], (True, False))
    assert xb.double().dtype == torch.float64
    assert xb.to(torch.float64).dtype == torch.float64
    assert xb.cpu().device.type == "cpu"
    assert xb.requires_grad_().requires_grad
    assert not xb.detach().requires_grad
    assert xb.double().mask is xb.mask


def test_grad_can_be_cleared_and_set_as_on_a_tensor():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 2) for n in (1, 3)], (True, False))
    xb.requires_grad_()
    (xb * 2).sum(-1).sum(-1).backward(MaskedBatch.fromlist([torch.ones(1)] * 2, ()))
    assert [e.flatten().tolist() for e in xb.grad.examples()] == [[2.0] * 2, [2.0] * 6]
    xb.grad = None
    assert xb.grad is None and xb.data.grad is None
    xb.grad = MaskedBatch._make(torch.zeros_like(xb.data), xb._mask, xb.dims)
    assert torch.equal(xb.data.grad, torch.zeros_like(xb.data))


def test_dtype_queries_and_is_nested():
    # Modules ask these before choosing a path (nn.MultiheadAttention, Transformer layers).
    xb = MaskedBatch.fromlist([torch.rand(1, n, 2) for n in (1, 3)], (True, False))
    assert torch.is_floating_point(xb) and not torch.is_complex(xb)
    assert not torch.is_floating_point(xb > 0.5)
    assert xb.is_nested is False


def test_repr_shows_dims_and_sizes():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 2) for n in (1, 3)], (True, False))
    text = repr(xb)
    assert "dims=DS (True, False)" in text
    assert "(1, 1, 2), (1, 3, 2)" in text


def test_dir_lists_supported_methods():
    names = dir(MaskedBatch)
    for name in ["tanh", "sum", "mean", "matmul", "transpose", "view", "unbind", "__add__",
                 "batch_zeros", "split_dim", "join_dims", "causal_mask", "size_as_tensor",
                 "maxsize", "new_zeros"]:
        assert name in names


def test_constructor_accepts_numeric_mask():
    data = torch.rand(2, 3, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]).unsqueeze(-1)
    xb = MaskedBatch(data, mask, (True, False))
    assert xb.mask.dtype == torch.bool
    assert [tuple(e.shape) for e in xb.examples()] == [(1, 2, 4), (1, 1, 4)]


@pytest.mark.parametrize(
    ("data", "mask", "dims", "message"),
    [
        (torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), (True, False),
         r"dims has 2 entries but data has 1 non-batch dimensions"),
        (torch.rand(2, 3), torch.ones(2, dtype=torch.bool), (True,),
         r"mask has rank 1 but data has rank 2"),
        (torch.rand(2, 3), torch.ones(3, 3, dtype=torch.bool), (True,),
         r"mask has batch size 3 but data has 2"),
        (torch.rand(2, 3), torch.ones(2, 2, dtype=torch.bool), (True,),
         r"mask has size 2 in dimension 1, which is dynamic, but must have size 3"),
        (torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), (False,),
         r"mask has size 3 in dimension 1, which is static, but must have size 1"),
        (torch.rand(2, 3), torch.tensor([[True, False, True], [True, True, True]]), (True,),
         r"real position after a padding position"),
        (torch.rand(2, 3), torch.full((2, 3), 2.0), (True,),
         r"non-bool mask must hold only zeros and ones"),
        ([1, 2], torch.ones(2, dtype=torch.bool), (), r"data must be a torch.Tensor"),
        (torch.tensor(1.0), torch.tensor(True), (), r"data must have a batch dimension"),
        (torch.rand(2, 3), torch.ones(2, 3, requires_grad=True), (True,),
         r"mask must not require grad"),
        (torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool), (1,),
         r"dims must be a tuple of bools"),
    ],
)
def test_malformed_batch_is_refused(data, mask, dims, message):
    with pytest.raises(ValueError, match=message):
        MaskedBatch(data, mask, dims)


def test_fromlist_errors():
    with pytest.raises(ValueError, match=r"fromlist: the list of examples is empty"):
        MaskedBatch.fromlist([], (True,))
    with pytest.raises(ValueError, match=r"dimension 2 is static but the examples differ in "
                                         r"size there: example 0 has 4, example 1 has 5"):
        MaskedBatch.fromlist([torch.rand(1, 2, 4), torch.rand(1, 2, 5)], (True, False))
    with pytest.raises(ValueError, match=r"example 1 has size 2 in dimension 0"):
        MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(2, 2)], (False,))
    with pytest.raises(ValueError, match=r"example 1 has dtype torch.float64 but example 0 "
                                         r"has torch.float32"):
        MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 2).double()], (False,))
    with pytest.raises(ValueError, match=r"example 0 has rank 2 but dims \(True, False\)"):
        MaskedBatch.fromlist([torch.rand(1, 2)], (True, False))
    with pytest.raises(TypeError, match=r"example 1 is a list, not a tensor"):
        MaskedBatch.fromlist([torch.rand(1, 2), [1.0, 2.0]], (False,))
    with pytest.raises(TypeError, match=r"examples must be a list of tensors"):
        MaskedBatch.fromlist(torch.rand(2, 2), (False,))


@pytest.mark.parametrize("dims", [None, True, "DS", (True, None), (2, 0), ("T", "F")],
                         ids=["None", "bool", "string", "None-entry", "two", "strings"])
def test_fromlist_refuses_dims_that_are_not_bools(dims):
    # bool() of each entry read None as static and a string as dynamic, silently.
    examples = [torch.rand(1, n, 2) for n in (3, 1)]
    with pytest.raises(TypeError, match=r"MaskedBatch.fromlist: dims must be a tuple of bools, "
                                        r"one per dimension after the first \(True where the "
                                        r"examples may differ in size\); got "):
        MaskedBatch.fromlist(examples, dims)


def test_fromlist_takes_dims_as_a_list_or_as_zeros_and_ones():
    examples = [torch.rand(1, n, 2) for n in (3, 1)]
    assert MaskedBatch.fromlist(examples, [True, False]).dims == (True, False)
    assert MaskedBatch.fromlist(examples, (1, 0)).dims == (True, False)


def test_batch_of_one_and_zero_length_examples():
    xb = MaskedBatch.fromlist([torch.rand(1, 0, 3)], (True, False))
    assert xb.data.shape == (1, 0, 3)
    assert [tuple(e.shape) for e in xb.examples()] == [(1, 0, 3)]
    assert repr(xb)


def test_backward_on_per_example_losses_equals_loop():
    w = torch.randn(3, requires_grad=True)
    xs = [torch.randn(1, n, 3) for n in (2, 0, 5)]
    loop = sum(((x * w).tanh().sum()) for x in xs)
    (loop_grad,) = torch.autograd.grad(loop, w)
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    loss = (xb * w).tanh().sum((1, 2))
    assert loss.dims == ()
    loss.backward(retain_graph=True)
    torch.testing.assert_close(w.grad, loop_grad)
    w.grad = None
    matchbox.batch_sum(loss).backward()
    torch.testing.assert_close(w.grad, loop_grad)
    torch.testing.assert_close(matchbox.batch_mean(loss), loop.detach() / 3)


def test_backward_needs_per_example_scalars():
    xb = MaskedBatch.fromlist([torch.rand(1, 2, requires_grad=True)], (False,))
    with pytest.raises(RuntimeError, match=r"only for a batch of per-example scalars"):
        (xb * 2).backward()


def test_len_and_iteration_are_refused():
    xb = MaskedBatch.fromlist([torch.rand(1, 2)], (False,))
    with pytest.raises(TypeError, match=r"len\(\) of a MaskedBatch is ambiguous: use "
                                         r"x.batch_size for the number of examples"):
        len(xb)
    # Not iterable by declaration (__iter__ = None), so that tools which check
    # isinstance(x, Iterable) before walking a collection (Lightning's batch-size
    # search) take a batch as one value.
    assert not isinstance(xb, collections.abc.Iterable)
    with pytest.raises(TypeError, match=r"'MaskedBatch' object is not iterable"):
        iter(xb)


def test_one_number_per_example_is_no_dict_key_and_has_no_format_spec():
    # The loop hashes each example's number by its value: a dict's get, `in` a set. Hashed
    # by identity, the batch missed every key, silently (a user trial); a tensor of each
    # example (a (1,) batch) hashes by identity in the loop too, and still does.
    counts = MaskedBatch(torch.tensor([1, 2, 3]), None, ())
    counts._scalar = True  # a Python int in the loop (a @batch counter)
    with pytest.raises(TypeError, match=r"^a MaskedBatch of one number per example cannot be a "
                                        r"dict key or a set member"):
        {1: 10.0}.get(counts)
    with pytest.raises(TypeError, match=r"cannot be a dict key or a set member"):
        counts in {1, 2}  # noqa: B015
    rows = MaskedBatch.fromlist([torch.rand(1, 2)], (False,))
    assert {rows: 1}[rows] == 1
    with pytest.raises(TypeError, match=r"^format\(\): a MaskedBatch holds one value per "
                                        r"example, and the format spec '\.3f' formats one "
                                        r"number"):
        f"{counts:.3f}"  # noqa: B018
    assert f"{rows}" == str(rows)


@pytest.mark.parametrize("convert", [float, int, complex, lambda b: b.item(),
                                     lambda b: b.tolist()],
                         ids=["float", "int", "complex", "item", "tolist"])
def test_a_batch_has_no_single_value(convert):
    # Outside @batch a per-example scalar (a loss, a count) has no single Python value;
    # the error says why and what to write instead.
    xb = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 2)], (False,))
    with pytest.raises(TypeError, match=re.escape(
            "a MaskedBatch holds one value per example, not a single value (one scalar per "
            "example, 2 examples), so int(), float(), .item() and .tolist() have no answer: a "
            "Python number would be the same for every example, where the loop gives each "
            "its own. Keep the value a batch (arithmetic, comparisons, torch ops and indexing "
            "x[:, n] take one value per example), write branches and loops that differ per "
            "example in a function decorated with @matchbox.batch, or leave the batch "
            "explicitly: use matchbox.batch_sum / batch_mean for a plain tensor, or "
            "examples() for each example's tensor")):
        convert(xb.sum(1))
    with pytest.raises(TypeError, match=r"\(one tensor per example, 2 examples\)"):
        convert(xb)


def test_a_batch_is_no_python_index():
    xb = MaskedBatch.fromlist([torch.tensor([1]), torch.tensor([0])], ())
    with pytest.raises(TypeError, match=r"holds one value per example, not a single value: a "
                                        r"Python list index, a slice bound or a size must be the "
                                        r"same int for every example .*x\[:, i\]"):
        ["a", "b"][xb]


def test_size_without_dim_names_the_dynamic_dims():
    xb = MaskedBatch.fromlist([torch.rand(1, n, 5) for n in (2, 4)], (True, False))
    with pytest.raises(ValueError, match=r"size\(\): dimensions \[1\] are dynamic"):
        xb.size()
    static = MaskedBatch.fromlist([torch.rand(1, 5)] * 2, (False,))
    assert static.size() == (2, 5)


def test_padding_value_must_fit_the_dtype():
    examples = [torch.ones(1, 2, dtype=torch.long), torch.ones(1, 1, dtype=torch.long)]
    with pytest.raises(ValueError, match=r"padding_value nan is not representable in the "
                                         r"examples' dtype torch.int64"):
        MaskedBatch.fromlist(examples, (True,), padding_value=float("nan"))
    assert MaskedBatch.fromlist(examples, (True,)).data.tolist() == [[1, 1], [1, 0]]


def test_backward_with_a_gradient_batch_ignores_its_padding():
    xs = [torch.randn(1, n, 2, requires_grad=True) for n in (1, 3)]
    xb = MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))
    gs = [torch.randn(1, n, 2) for n in (1, 3)]
    gb = MaskedBatch.fromlist(gs, (True, False), padding_value=float("nan"))
    (xb * 3).backward(gb)
    for x, g in zip(xs, gs):
        torch.testing.assert_close(x.grad, 3 * g)


def test_real_rows_are_the_mask_rows_computed_once_per_mask():
    # Row-wise ops (a linear layer) run on these rows only; a layer's ops share one mask,
    # so the index is computed once for it.
    from matchbox import _masking

    xb = MaskedBatch.fromlist([torch.rand(1, n, 3) for n in (2, 0, 3)], (True, False))
    with _masking.host_reads(True):  # the CPU's way (an accelerator's finds no rows)
        rows = _masking.real_rows(xb)
        assert rows.tolist() == [0, 1, 6, 7, 8]
        assert _masking.real_rows(MaskedBatch._make(xb.data * 2, xb._mask, xb.dims)) is rows
        packed = _masking.pack_rows(xb.data, rows)
        assert torch.equal(packed, torch.cat([x[0] for x in xb.examples()]))
        back = _masking.unpack_rows(packed, rows, xb.data.shape[:-1])
        assert torch.equal(back[xb.mask.expand_as(back)], xb.data[xb.mask.expand_as(back)])
        assert not back[~xb.mask.expand_as(back)].any()
        # A mask of size one along a static dimension covers every row there.
        heads = MaskedBatch._make(torch.rand(3, 2, 3, 4), xb._mask.unsqueeze(1),
                                  (False, True, False))
        assert _masking.real_rows(heads).tolist() == [0, 1, 3, 4, 12, 13, 14, 15, 16, 17]
        assert _masking.real_rows(MaskedBatch.fromlist([torch.rand(1, 2)], (False,))) is None


def test_pin_memory_pins_data_and_mask_or_gives_torchs_error():
    # DataLoader(pin_memory=True) calls batch.pin_memory() on what it loads.
    xb = MaskedBatch.fromlist([torch.ones(1, n) for n in (2, 3)], (True,))
    pinned = pinned_or_torchs_error(xb)
    if pinned is not None:
        assert pinned.mask.is_pinned() and pinned.dims == xb.dims
