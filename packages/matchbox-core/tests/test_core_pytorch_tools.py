"""PyTorch's generic tools see a MaskedBatch: pytree, dataclass fields, torch.load, torch.func,
torch.export (``matchbox._interop``).

The oracle is the loop over examples wherever a value is computed.  DDP itself is
tested with real processes in tests/ecosystem/test_ecosystem_ddp.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.utils._pytree as pytree
from round_trips import export_reloaded, exports, saved
from torch.nn.parallel.distributed import _find_tensors
from torch_features import PYTREE_KEY_PATHS, SAFE_GLOBALS, needs

import matchbox
from matchbox import MaskedBatch


def _padded(lengths=(2, 4, 3)):
    xs = [torch.randn(1, n, 2, dtype=torch.float64) for n in lengths]
    return xs, MaskedBatch.fromlist(xs, (True, False), padding_value=float("nan"))


def _unpadded():
    xs = [torch.randn(1, 3, 2, dtype=torch.float64) for _ in range(3)]
    return xs, MaskedBatch.fromlist(xs, (True, False))


def _same_batch(a, b):
    assert type(a) is MaskedBatch and a.dims == b.dims
    assert torch.equal(a.mask, b.mask) and (a._mask is None) == (b._mask is None)
    real = a.mask.expand_as(a.data)
    assert torch.equal(a.data[real], b.data[real])


# ---------------------------------------------------------------------------- pytree


def test_pytree_children_are_data_and_mask_and_dims_the_context():
    _, xb = _padded()
    leaves, spec = pytree.tree_flatten(xb)
    assert leaves[0] is xb.data and leaves[1] is xb._mask and len(leaves) == 2
    back = pytree.tree_unflatten(leaves, spec)
    assert back.data is xb.data and back._mask is xb._mask and back.dims == xb.dims


@needs(PYTREE_KEY_PATHS, "registers pytree nodes with key paths")
def test_pytree_key_paths_name_the_attributes():
    _, xb = _padded()
    paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(xb)[0]]
    assert paths == [".data", "._mask"]


def test_a_batch_without_padding_has_its_data_as_only_child_and_keeps_no_mask():
    _, xb = _unpadded()
    assert xb._mask is None
    leaves, spec = pytree.tree_flatten(xb)
    assert leaves == [xb.data]  # tools such as torch.func want tensors only, not None
    assert pytree.tree_unflatten(leaves, spec)._mask is None


def test_tree_map_maps_the_tensors_and_keeps_the_layout():
    xs, xb = _padded()
    nested = pytree.tree_map(
        lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
        {"x": xb, "n": [xb, 3]})
    _same_batch(nested["x"], xb.float())
    assert nested["n"][1] == 3


def test_a_transform_that_changes_the_rank_is_refused():
    _, xb = _padded()
    with pytest.raises(ValueError, match=r"MaskedBatch: a pytree transform changed the rank of "
                                         r"the batch's data from 3 to 2"):
        pytree.tree_map(lambda t: t[0], xb)


# ---------------------------------------------------------------------------- dataclass fields


def test_tools_that_walk_dataclasses_find_the_batch_tensors():
    _, xb = _padded()
    assert dataclasses.is_dataclass(xb)
    assert [f.name for f in dataclasses.fields(xb)] == ["data", "mask"]
    # DDP's search for the tensors of a forward's output (find_unused_parameters).
    found = list(_find_tensors({"out": xb, "aux": [xb.data]}))
    assert found[0] is xb.data and found[1] is xb.mask and found[2] is xb.data
    # Every field is a tensor whose dimension 0 is the batch (what a batch-size
    # search such as Lightning's reads); a batch without padding has a mask too.
    _, full = _unpadded()
    for batch in (xb, full):
        sizes = {getattr(batch, f.name).size(0) for f in dataclasses.fields(batch)}
        assert sizes == {3}


def test_a_batch_is_not_an_iterable_collection():
    # Tools that walk collections ask isinstance(x, Iterable) first; a batch is one value.
    import collections.abc

    _, xb = _padded()
    assert not isinstance(xb, collections.abc.Iterable)


def test_dataclasses_replace_says_what_it_lacks():
    _, xb = _padded()
    with pytest.raises(TypeError, match=r"dims"):
        dataclasses.replace(xb, data=xb.data * 2)


# ---------------------------------------------------------------------------- saving


@pytest.mark.parametrize("make", [_padded, _unpadded], ids=["padded", "unpadded"])
def test_torch_load_round_trip(make):
    _, xb = make()
    _same_batch(torch.load(saved(xb), weights_only=False), xb)


@needs(SAFE_GLOBALS, "has torch.serialization.add_safe_globals (2.4)")
@pytest.mark.parametrize("make", [_padded, _unpadded], ids=["padded", "unpadded"])
def test_torch_load_weights_only_round_trip(make):
    _, xb = make()
    checkpoint = {"batch": xb, "steps": [xb.detach().requires_grad_(), 3]}
    loaded = torch.load(saved(checkpoint), weights_only=True)
    _same_batch(loaded["batch"], xb)
    _same_batch(loaded["steps"][0], xb)
    assert loaded["steps"][0].requires_grad


def test_a_loaded_batch_is_validated():
    # Saved from a batch built without validation (as ops build them): a file
    # holding an impossible batch is refused on load, not used.
    data = torch.zeros(2, 3)
    bad = MaskedBatch._make(data, torch.tensor([[True, False, True], [True] * 3]), (True,))
    with pytest.raises(ValueError, match=r"real position after a padding position"):
        torch.load(saved(bad), weights_only=False)


# ---------------------------------------------------------------------------- torch.func


def _example_loss(x):
    return x.tanh().sum(2).sum(1)


def test_func_grad_and_vjp_of_a_batch_without_padding_equal_the_loop():
    xs, xb = _unpadded()
    grad = torch.func.grad(lambda b: matchbox.batch_sum(_example_loss(b)))(xb)
    assert type(grad) is MaskedBatch and grad._mask is None
    for x, g in zip(xs, grad.examples()):
        expected, = torch.autograd.grad(_example_loss(x.requires_grad_()).sum(), x)
        torch.testing.assert_close(g, expected)
    out, pull = torch.func.vjp(lambda b: b.tanh(), xb)
    cotangent, = pull(MaskedBatch.fromlist([torch.ones_like(x) for x in xs], (True, False)))
    for x, g in zip(xs, cotangent.examples()):
        torch.testing.assert_close(g, 1 - x.tanh() ** 2)


def test_func_grad_of_a_padded_batch_is_refused_by_torch_for_its_mask():
    # torch.func differentiates every tensor of its input, and a mask cannot
    # require grad: differentiate with respect to weights and close over the batch.
    _, xb = _padded()
    with pytest.raises(RuntimeError, match=r"only Tensors of floating point.*can require "
                                           r"gradients"):
        torch.func.grad(lambda b: matchbox.batch_sum(_example_loss(b)))(xb)


class _Project(torch.nn.Module):
    """``x @ W + b`` in core ops (matchbox-nn's F.linear is not installed with core alone)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(2, 3, dtype=torch.float64))
        self.bias = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))

    def forward(self, x):
        return x @ self.weight + self.bias


def test_func_grad_over_parameters_with_functional_call_equals_the_loop():
    xs, xb = _padded()
    module = _Project()
    params = dict(module.named_parameters())

    def loss(p, x):
        return torch.func.functional_call(module, p, (x,)).tanh().sum(2).sum(1)

    grads = torch.func.grad(lambda p: matchbox.batch_sum(loss(p, xb)))(params)
    expected = torch.autograd.grad(sum(loss(params, x).sum() for x in xs),
                                   list(params.values()))
    for name, value in zip(params, expected):
        torch.testing.assert_close(grads[name], value)


def test_vmap_over_a_batch_is_refused_naming_the_way_out():
    _, xb = _padded()
    with pytest.raises(ValueError, match=r"torch.func.vmap does this to a batch it maps over "
                                         r"\(in_dims\) or returns \(out_dims\).*call the "
                                         r"function on the batch itself"):
        torch.func.vmap(lambda b: b.tanh())(xb)
    with pytest.raises(ValueError, match=r"changed the rank of the batch's data from 3 to 4"):
        torch.func.vmap(lambda w: xb * w)(torch.randn(5, 2, dtype=torch.float64))


def test_vmap_over_weights_of_a_batch_returning_plain_tensors_equals_the_loop():
    xs, xb = _padded()
    weights = torch.randn(5, 2, dtype=torch.float64)
    got = torch.func.vmap(lambda w: matchbox.batch_sum((xb * w).sum(2).sum(1)))(weights)
    expected = torch.stack([sum((x * w).sum() for x in xs) for w in weights])
    torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------------------- torch.export


class _Scaled(torch.nn.Module):
    def forward(self, x):
        return (x * 2).tanh().sum(2)


EXPORTS_BATCHES = exports(_Scaled(), _padded()[1])
exports = needs(EXPORTS_BATCHES, "exports (and saves) a function of a MaskedBatch: torch.export "
                "traces Matchbox's ops and serialises the batch's tree spec")


@exports
def test_export_takes_and_returns_batches_and_equals_the_loop():
    xs, xb = _padded((2, 4, 3))
    exported = torch.export.export(_Scaled(), (xb,))
    # Other examples of the same padded length: the exported graph reads their mask.
    ys, yb = _padded((4, 1, 1))
    for examples, batch in ((xs, xb), (ys, yb)):
        out = exported.module()(batch)
        assert type(out) is MaskedBatch and out.dims == (True,)
        for x, y in zip(examples, out.examples()):
            torch.testing.assert_close(y, _Scaled()(x))
    out = export_reloaded(exported).module()(xb)
    for x, y in zip(xs, out.examples()):
        torch.testing.assert_close(y, _Scaled()(x))


@exports
def test_an_exported_program_refuses_a_batch_of_another_structure():
    _, xb = _padded()
    _, full = _unpadded()
    exported = torch.export.export(_Scaled(), (xb,))
    with pytest.raises(ValueError, match=r"exported input tree spec"):
        exported.module()(full)  # no mask: another tree than the one exported


# ---------------------------------------------------------------------------- torch.compile


def test_compile_takes_and_returns_batches():
    # A compiled function that reads a batch's tensors and builds a batch: the
    # declarations above change nothing in how torch.compile treats the objects.
    # (Compiling Matchbox's ops themselves is matchbox.compile's and issue 14's.)
    xs, xb = _padded()

    def masked_sum_and_double(b):
        return (b.data.nan_to_num() * b.mask).sum(1), MaskedBatch(b.data * 2, b.mask, b.dims)

    torch._dynamo.reset()
    total, doubled = torch.compile(masked_sum_and_double)(xb)
    for x, t, d in zip(xs, total, doubled.examples()):
        torch.testing.assert_close(t, x[0].sum(0))
        torch.testing.assert_close(d, x * 2)
    assert doubled.dims == xb.dims and torch.equal(doubled.mask, xb.mask)
