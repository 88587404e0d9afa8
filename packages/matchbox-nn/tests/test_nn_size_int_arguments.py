"""A batch's sizes given where a matchbox-nn op needs one int for every example.

``x.size(0)`` is 1 in each example of the loop and ``x.maxsize(d)`` of a dynamic dimension
each example's own size there, so as a pad width, a window's stride/padding/dilation/kernel
size, ``groups``, ``F.normalize``'s ``p``, ``F.one_hot``'s ``num_classes``, ``group_norm``'s
groups or a loss's ``ignore_index`` the loop's examples would each use their own, where the
batch read the batch size or the padded size (silently, for most of them).  Each is refused
naming the op and the argument, then the size's own message.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from matchbox import MaskedBatch

PADDED = (r"x\.maxsize\(1\) is the padded size of dimension 1, which is dynamic: the "
          r"longest example's size there")
BATCH = r"x\.size\(0\) of a MaskedBatch \(x\.shape\[0\]\) is the batch size"


def _sizes(kind):
    """A size of the given kind: the padded size of a batch of 3, 2 and 4 positions, or
    the batch size of a batch of two examples."""
    if kind == "padded":
        xs = [torch.randn(1, n, 4, dtype=torch.float64) for n in (3, 2, 4)]
        return MaskedBatch.fromlist(xs, (True, False)).maxsize(1)
    return MaskedBatch.fromlist([torch.randn(1, 2, dtype=torch.float64)] * 2,
                                (False,)).size(0)


def _channels(batch=2):
    """A batch of ``batch`` examples of 4 static channels of 6 positions."""
    return MaskedBatch.fromlist([torch.randn(1, 4, 6, dtype=torch.float64)
                                 for _ in range(batch)], (False, False))


def _ids():
    return MaskedBatch.fromlist([torch.tensor([[1, 0, 2]]), torch.tensor([[2, 1, 0]])],
                                (False,))


WEIGHT = torch.randn(2, 4, 1, dtype=torch.float64)
TABLE = torch.randn(5, 3, dtype=torch.float64)

# name: (f(n) with n the size, the op's name, the argument's name)
CASES = {
    "F.pad width": (lambda n: F.pad(_channels(), (0, n)), "torch.nn.functional.pad",
                    "pad width"),
    "conv1d stride": (lambda n: F.conv1d(_channels(), WEIGHT, stride=n), "torch.conv1d",
                      "stride"),
    "conv1d padding": (lambda n: F.conv1d(_channels(), WEIGHT, padding=n), "torch.conv1d",
                       "padding"),
    "conv1d dilation": (lambda n: F.conv1d(_channels(), WEIGHT, dilation=(n,)),
                        "torch.conv1d", "dilation"),
    "conv1d groups": (lambda n: F.conv1d(_channels(), WEIGHT, groups=n), "torch.conv1d",
                      "groups"),
    "conv_transpose1d stride": (lambda n: F.conv_transpose1d(_channels(), WEIGHT.transpose(0, 1),
                                                             stride=n),
                                "torch.conv_transpose1d", "stride"),
    "avg_pool1d kernel": (lambda n: F.avg_pool1d(_channels(), n), "torch.avg_pool1d",
                          "kernel_size"),
    "max_pool1d stride": (lambda n: F.max_pool1d(_channels(), 2, n),
                          "torch.nn.functional.max_pool1d", "stride"),
    "normalize p": (lambda n: F.normalize(_channels(), p=n), "torch.nn.functional.normalize",
                    "p"),
    "one_hot num_classes": (lambda n: F.one_hot(_ids(), n), "torch.nn.functional.one_hot",
                            "num_classes"),
    "group_norm num_groups": (lambda n: F.group_norm(_channels(), n),
                              "torch.nn.functional.group_norm", "num_groups"),
    "embedding padding_idx": (lambda n: F.embedding(_ids(), TABLE, padding_idx=n),
                              "torch.nn.functional.embedding", "padding_idx"),
    "cross_entropy ignore_index": (
        lambda n: F.cross_entropy(_channels(), MaskedBatch.fromlist(
            [torch.zeros(1, 6, dtype=torch.long)] * 2, (False,)), ignore_index=n),
        "torch.nn.functional.cross_entropy", "ignore_index"),
    "interpolate scale_factor": (lambda n: F.interpolate(_channels(), scale_factor=n),
                                 "torch.nn.functional.interpolate", "size or factor"),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("kind", ["padded", "batch"])
def test_a_batch_size_as_an_int_argument_is_refused(name, kind):
    f, op, argument = CASES[name]
    message = PADDED if kind == "padded" else BATCH
    with pytest.raises(TypeError, match=rf"^{op.replace('.', r'[.]')}: the {argument} must be "
                                        rf"the same number for every example, but it is a "
                                        rf"batch's size: {message}"):
        f(_sizes(kind))
