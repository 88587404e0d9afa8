"""A PackedBatch's ops get their arguments bound to the callable's own signature
(``matchbox._binding``), as MaskedBatch's do: a positional ``dtype`` is the dtype, and
keyword spellings reach the handler (or the same error as the positional call)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from packed_strategies import examples_of_lengths

from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [1, 2])
def test_a_positional_dtype_of_softmax_is_the_dtype(name, dim):
    # p.softmax(1, torch.float64) returned float32: the handler read dtype as _stacklevel.
    xs = examples_of_lengths([3, 0, 1, 4], static=(2,), dtype=torch.float32)
    pb = PackedBatch.fromlist(xs)
    f = lambda x: getattr(x, name)(dim, torch.float64)  # noqa: E731
    assert f(pb).dtype == torch.float64
    mb_assert(f, [xs], [pb], len(xs))


KEYWORD_SPELLINGS = {
    "softmax": lambda x: x.softmax(dim=1, dtype=torch.float64),
    "F.softmax": lambda x: F.softmax(x, dim=2, dtype=torch.float64),
    "transpose": lambda x: x.transpose(dim0=1, dim1=0).transpose(0, 1),
    "sum": lambda x: x.sum(dim=2, keepdim=True),
    "sum axis": lambda x: x.sum(axis=1),
    "cat": lambda x: torch.cat(tensors=[x, x], dim=2),
}


@pytest.mark.parametrize("name", sorted(KEYWORD_SPELLINGS))
def test_keyword_spellings_equal_the_loop(name):
    xs = examples_of_lengths([2, 0, 3], static=(3,), dtype=torch.float64)
    mb_assert(KEYWORD_SPELLINGS[name], [xs], [PackedBatch.fromlist(xs)], len(xs))


@pytest.mark.parametrize("call", [
    lambda x: x.split(split_size=1, dim=2), lambda x: x.view(size=(1, -1, 6)),
    lambda x: x.reshape(shape=(1, -1, 6)), lambda x: x.permute(dims=(0, 1, 3, 2)),
    lambda x: x.expand(size=(1, -1, 2, 3))], ids=["split", "view", "reshape", "permute",
                                                 "expand"])
def test_keyword_spellings_of_ops_it_does_not_implement_name_the_op(call):
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3], static=(2, 3)))
    with pytest.raises(NotImplementedError, match=r"^Tensor\.\w+ is not implemented for "
                                                  r"PackedBatch; convert the batch with "
                                                  r"matchbox.packed.as_masked\(x\)"):
        call(pb)
