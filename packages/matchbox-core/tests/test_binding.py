"""Arguments are bound to the torch callable's own signature before a handler sees them.

One handler serves several callables whose parameters differ in order and name
(``F.softmax(input, dim, _stacklevel, dtype)`` and ``Tensor.softmax(dim, dtype)``,
matchbox-nn's, pinned in packages/matchbox-nn/tests/test_nn_binding.py; ``torch.split(split_size_or_sections)``
and ``Tensor.split(split_size)``); the
registry binds each call to the signature of the callable that was invoked and
hands the handler its arguments by name (``matchbox._binding``).  The first test
checks every handler against every callable it serves; the others pin the calls
that went wrong before: a positional ``dtype`` read as ``_stacklevel`` or ``out``,
and keyword spellings that raised a raw ``TypeError``.
"""

from __future__ import annotations

import pytest
import torch
import torch_features

from matchbox import _binding, _registry
from matchbox.testing import mb_assert, mb_rand

# Parameters that no call reaching a batch can use, with the reason.
NEVER_A_BATCH = {
    # The overload of a PackedSequence (data, batch_sizes, ...): nn.RNN calls it with the
    # sequence's plain tensors, never with a batch.
    **{(f"torch.{name}", parameter): "PackedSequence overload"
       for name in ("lstm", "gru", "rnn_tanh", "rnn_relu")
       for parameter in ("data", "batch_sizes")},
}


def registered_pairs():
    return [(batch_type, entry) for batch_type in _registry.batch_type_names()
            for entry in _registry.entries(batch_type)]


def test_every_handler_takes_every_argument_of_every_callable_it_serves():
    unmapped = []
    known = 0
    for batch_type, entry in registered_pairs():
        binding = _registry.binding(batch_type, entry.func)
        known += binding.known
        names = [n for n in binding.unmapped if (entry.name, n) not in NEVER_A_BATCH]
        if names:
            unmapped.append(f"{batch_type} {entry.name} -> {entry.handler.__name__}: {names}")
    assert unmapped == []
    # Operators and a few casts have no signature Python can read; nearly every other op has.
    assert known > 0.9 * len(registered_pairs())


def test_signatures_come_from_python_aten_schemas_or_nowhere():
    # Python code: inspect; a torch function in C: its ATen schemas (TorchScript's own
    # overloads left out); a Tensor method in C: the schemas of its name; operators: none.
    split = _binding.parameters_of(torch.Tensor.split)
    assert split.positions[1] == {"split_size"}
    softmax = _binding.parameters_of(torch.Tensor.softmax)
    assert softmax.positions[2] == {"dtype"}
    copy = _binding.parameters_of(torch.Tensor.copy_)
    assert copy.names == {"input", "src", "non_blocking"}  # not TorchScript's copy_(other)
    assert _binding.parameters_of(torch.Tensor.__add__) is None


def test_calls_that_need_no_binding_pass_as_they_are():
    # The hot path: positional arguments in the handler's order, keywords it takes.
    binding = _registry.binding("MaskedBatch", torch.Tensor.sum)
    assert binding.prefix >= 3 and {"dim", "keepdim", "dtype"} <= set(binding.keywords)
    assert not binding.keywords.issuperset({"axis"})  # NumPy's spelling is rebound


def test_a_positional_dtype_of_norm_is_the_dtype():
    # Tensor.norm(p, dim, keepdim, dtype): the handler took the fifth argument as out=.
    xs, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    f = lambda x: x.norm(2, 2, False, torch.float64)  # noqa: E731
    assert f(xb).dtype == torch.float64
    mb_assert(f, [xs], [xb], 3)


KEYWORD_SPELLINGS = {
    "split": lambda x: x.split(split_size=1, dim=2)[0],
    "torch.split": lambda x: torch.split(x, split_size_or_sections=1, dim=2)[1],
    "view": lambda x: x.view(size=(1, -1, 2, 1)).sum(3),
    "reshape": lambda x: x.reshape(shape=(1, -1, 1, 2)).sum(2),
    "permute": lambda x: x.permute(dims=(0, 2, 1)),
    "expand": lambda x: x.unsqueeze(3).expand(size=(1, -1, -1, 3), implicit=False).sum(3),
    "axis": lambda x: x.sum(axis=2, keepdims=True),
}


@pytest.mark.parametrize("name", sorted(KEYWORD_SPELLINGS))
def test_keyword_spellings_equal_the_loop(name):
    # These raised a raw TypeError from the handler (split_size=, size=, shape=, dims=).
    xs, xb = mb_rand(3, (True, 4), (False, 2), min_size=0)
    mb_assert(KEYWORD_SPELLINGS[name], [xs], [xb], 3)


def test_a_bad_keyword_is_torchs_error_naming_the_op():
    _, xb = mb_rand(2, (True, 3), (False, 2), min_size=0)
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'sizes'"):
        xb.view(sizes=(1, -1))
    with pytest.raises(TypeError, match=r"Tensor.split: got multiple values for argument "
                                        r"'split_size_or_sections'"):
        xb.split(1, split_size=1)


@pytest.mark.skipif(not torch_features.BMM_TAKES_OUT_DTYPE,
                    reason=f"torch {torch.__version__}'s bmm has no out_dtype= (its own "
                           "TypeError comes first)")
def test_out_dtype_of_a_product_is_refused_naming_the_op():
    _, xb = mb_rand(2, (False, 3), (False, 3), min_size=0)
    with pytest.raises(NotImplementedError, match=r"^torch.bmm: out_dtype= is not supported for "
                                                  r"batches"):
        torch.bmm(xb, xb, out_dtype=torch.float64)
