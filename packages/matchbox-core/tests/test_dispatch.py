"""Dispatch: torch functions, Tensor methods and torch.nn.functional reach the registry."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

import pytest
import torch
import torch.nn.functional as F

import matchbox
import matchbox.functional as MF
from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_rand


def test_function_method_and_functional_forms_agree():
    _, xb = mb_rand(3, (True, 4), (False, 2), padding_value=0.0, min_size=0)
    expected = xb.data.tanh()
    for result in (torch.tanh(xb), xb.tanh(), F.tanh(xb), MF.tanh(xb)):
        assert isinstance(result, MaskedBatch)
        assert torch.equal(result.data, expected)
    assert torch.equal(F.relu(xb).data, xb.data.relu())


def test_unsupported_op_names_itself():
    _, xb = mb_rand(2, (True, 3), min_size=0)
    with pytest.raises(NotImplementedError, match=r"torch.masked_select is not implemented for "
                                                  r"MaskedBatch"):
        torch.masked_select(xb, xb > 0)
    with pytest.raises(NotImplementedError, match=r"Tensor.nonzero is not implemented"):
        xb.nonzero()


def test_unknown_attribute_is_an_attribute_error():
    _, xb = mb_rand(2, (True, 3), min_size=0)
    assert not hasattr(xb, "no_such_thing")
    with pytest.raises(AttributeError, match=r"'MaskedBatch' object has no attribute"):
        xb.no_such_thing  # noqa: B018


def test_a_batch_takes_no_new_attributes_and_reads_an_unset_guards_slot_as_none():
    # ``_make`` leaves the rarely set ``_guards`` slot unset (a store fewer per op result):
    # it reads None, as every other slot of an op's result does; a batch still has no
    # ``__dict__``, so a name it lacks is refused, read or written.
    _, xb = mb_rand(2, (True, 3), (False, 3), min_size=0)
    for batch in (xb, xb.tanh(), xb * 2, xb.unsqueeze(1), xb.chunk(3, -1)[0]):
        assert batch._guards is None and getattr(batch, "_guards", 0) is None
    with pytest.raises(AttributeError, match=r"'MaskedBatch' object has no attribute '_other'"):
        xb._other  # noqa: B018
    with pytest.raises(AttributeError, match=r"'MaskedBatch' object has no attribute 'extra'"):
        xb.extra = 1
    guard = xb.tanh()
    guard._guards = xb
    assert guard._guards is xb

def test_unsqueeze_and_chunk_without_their_arguments_raise_pythons_error():
    # Their methods' fast paths call the handler for too few arguments: the error is the
    # one Python gives for the handler's signature, as before the fast paths had a function
    # of their own; too many go to the dispatch, which names the op's own signature.
    _, xb = mb_rand(2, (True, 3), (False, 4), min_size=0)
    with pytest.raises(TypeError, match=r"unsqueeze\(\) missing 1 required positional argument"):
        xb.unsqueeze()
    with pytest.raises(TypeError, match=r"chunk\(\) missing 1 required positional argument"):
        xb.chunk()
    with pytest.raises(TypeError, match=r"unsqueeze\(\) takes 3 positional arguments but 4"):
        xb.unsqueeze(1, 2)


@pytest.mark.skipif(importlib.util.find_spec("matchbox.nn") is not None,
                    reason="names matchbox-nn only when that distribution is not installed")
def test_nn_op_without_matchbox_nn_names_the_distribution():
    _, xb = mb_rand(2, (True, 3), min_size=0)
    with pytest.raises(NotImplementedError,
                       match=r"torch.nn.functional.softmax is not implemented for MaskedBatch; "
                             r"it is provided by the matchbox-nn distribution: pip install "
                             r"matchbox-nn"):
        F.softmax(xb, -1)


def test_registry_lists_families_and_every_entry_has_a_handler():
    families = {e.family for e in _registry.entries()}
    assert {"pointwise", "reduction", "linalg", "shape", "indexing", "constructor",
            "conversion"} <= families
    assert all(callable(e.handler) for e in _registry.entries())


def test_convenience_methods_are_new_tensor_names_only():
    for name in ["batch_zeros", "batch_ones", "batch_empty", "split_dim", "join_dims",
                 "causal_mask", "size_as_tensor", "maxsize"]:
        assert hasattr(torch.Tensor, name)
    x = torch.rand(1, 3)
    assert x.batch_zeros(5).shape == (1, 5)
    # An existing torch behaviour is unchanged by importing matchbox.
    assert torch.equal(x + 1, torch.add(x, 1))


def _installed(distribution):
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize(("name", "distribution"), sorted(matchbox._NAMES_ELSEWHERE.items()))
def test_lazy_names_resolve_or_name_their_distribution(name, distribution, monkeypatch):
    if _installed(distribution):
        # The installed distribution declares the name (an entry point of its own).
        entry = matchbox._entry_points(matchbox.NAMES_GROUP)[name]
        assert entry.dist.name.lower().replace("_", "-") == distribution
        assert getattr(matchbox, name) is entry.load()
    else:
        with pytest.raises(ImportError, match=rf"provided by the {distribution} distribution, "
                                              rf"which is not installed: pip install "
                                              rf"{distribution}"):
            getattr(matchbox, name)
    # As if the distribution were not installed (no entry points): an imported
    # subpackage is also an attribute of the package, which must go too.
    monkeypatch.setattr(matchbox, "_NAMES", {})
    if name in vars(matchbox):
        monkeypatch.delattr(matchbox, name)
    with pytest.raises(ImportError, match=rf"pip install {distribution}"):
        getattr(matchbox, name)


def test_installed_distributions_declare_their_names_and_ops_by_entry_points():
    # Core finds its siblings through their metadata only; the table it keeps names
    # them for the errors of a missing one, and must agree with what they declare.
    declared = matchbox._entry_points(matchbox.NAMES_GROUP)
    for name, entry in declared.items():
        assert matchbox._NAMES_ELSEWHERE.get(name) == entry.dist.name.lower().replace("_", "-")
    providers = matchbox._entry_points(matchbox.OPS_GROUP)
    assert ("ops" in providers) == _installed("matchbox-nn")


def test_unknown_module_attribute():
    with pytest.raises(AttributeError, match=r"module 'matchbox' has no attribute 'nope'"):
        matchbox.nope  # noqa: B018


def test_test_utils_is_the_readme_name():
    import matchbox.test_utils as tu
    import matchbox.testing as t

    assert tu.mb_test is t.mb_test and tu.mb_assert is t.mb_assert and tu.mb_rand is t.mb_rand


def test_an_unsupported_function_of_a_torch_submodule_is_named_with_its_module():
    # torch.autograd.grad was named torch.grad (a user trial).
    xb = MaskedBatch.fromlist([torch.randn(1, 3, 2, requires_grad=True)], (True, False))
    with pytest.raises(NotImplementedError,
                       match=r"^torch.autograd.grad is not implemented for MaskedBatch"):
        torch.autograd.grad(xb.sum(), [xb])


def test_pad_sequence_of_batches_is_named_with_its_module():
    # Its C function lives in torch._C._nn, which named it torch.nn.functional.pad_sequence
    # (a user trial).  (Its rule, test_pad_sequence.py, refuses batch_first=True.)
    from torch.nn.utils.rnn import pad_sequence

    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(ValueError, match=r"^torch\.nn\.utils\.rnn\.pad_sequence: batch_first"):
        pad_sequence(list(xb.unbind(1)), batch_first=True)


@pytest.mark.parametrize("f", [
    lambda x: torch.masked_select(x, x > 0),
    lambda x: x.masked_select(x > 0),
    lambda x: torch.masked_select(torch.ones(1, 2, 3), x > 0),
    lambda x: torch.nonzero(x),
    lambda x: x.nonzero(as_tuple=True),
    lambda x: torch.argwhere(x),
    lambda x: x.argwhere(),
], ids=["masked_select", "Tensor.masked_select", "a batch mask", "nonzero",
        "Tensor.nonzero-as_tuple", "argwhere", "Tensor.argwhere"])
def test_ops_with_a_count_per_example_in_dimension_0_are_refused_with_a_way_out(f):
    # Each example's result is (k,) or (k, rank): no batch holds its own count in dim 0.
    x = MaskedBatch.fromlist([torch.randn(1, 2, 3), torch.randn(1, 1, 3)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^(torch|Tensor)\.(masked_select|nonzero|"
                                                  r"argwhere) is not implemented for "
                                                  r"MaskedBatch: each example's result has its "
                                                  r"own count of selected positions in "
                                                  r"dimension 0 .* torch\.where\(mask, x, "
                                                  r"fill\)"):
        f(x)


@pytest.mark.parametrize("f", [
    lambda x: torch.histc(x, 4),
    lambda x: x.histc(bins=3, min=0, max=1),
    lambda x: torch.histogram(x, 4),
    lambda x: torch.bincount(x.sum(1).long().abs()),
], ids=["histc", "Tensor.histc", "histogram", "bincount"])
def test_histograms_are_refused_with_a_way_out(f):
    # Each example's counts are (bins,): no batch holds them in dimension 0.
    x = MaskedBatch.fromlist([torch.rand(1, 2), torch.rand(1, 1)], (True,))
    with pytest.raises(NotImplementedError, match=r"^(torch|Tensor)\.(histc|histogram|bincount) "
                                                  r"is not implemented for MaskedBatch: each "
                                                  r"example's result is 1-D, one count per bin "
                                                  r"in dimension 0 .* \(1, bins\) in each "
                                                  r"example$"):
        f(x)
