"""``F.interpolate``, ``F.unfold``/``F.fold``, ``pixel_shuffle``/``pixel_unshuffle`` and
``channel_shuffle`` on batches: each example's result equals the call on it alone, values
and gradients, over static dimensions (and ``interpolate`` over a dynamic channel
dimension); a dynamic dimension the op resamples or rearranges is refused, naming the op
and the dimension.

Padding holds NaN; a batch of one, float32 and float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_features import CHANNEL_SHUFFLE_HAS_DERIVATIVE, needs

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

NAN = float("nan")


def batch(examples, dims):
    return MaskedBatch.fromlist(examples, dims, padding_value=NAN)


def examples(shapes, dtype):
    return [torch.randn(1, *shape, dtype=dtype) for shape in shapes]


INTERPOLATIONS_1D = [
    lambda x: F.interpolate(x, scale_factor=2),
    lambda x: F.interpolate(x, size=7, mode="linear"),
    lambda x: F.interpolate(x, scale_factor=1.5, mode="linear", align_corners=True),
    lambda x: F.interpolate(x, size=3, mode="area"),
    lambda x: F.interpolate(x, scale_factor=0.5, mode="nearest-exact"),
    lambda x: nn.Upsample(scale_factor=3, mode="nearest")(x),
]
INTERPOLATIONS_2D = [
    lambda x: F.interpolate(x, scale_factor=(2, 1.5), mode="bilinear"),
    lambda x: F.interpolate(x, size=(3, 5), mode="bicubic", align_corners=False),
    lambda x: F.interpolate(x, size=(2, 2), mode="bilinear", antialias=True),
    lambda x: nn.UpsamplingNearest2d(scale_factor=2)(x),
]


@pytest.mark.parametrize("size", [3, 1])
@pytest.mark.parametrize("channels", ["static", "dynamic"])
def test_interpolate_matches_loop(size, channels, dtype):
    # Channels of each example's own count (torch refuses an example without channels)
    # or one count; static spatial sizes.
    counts = [2, 1, 3][:size] if channels == "dynamic" else [2] * size
    dims = (channels == "dynamic", False)
    xs = examples([(c, 5) for c in counts], dtype)
    for f in INTERPOLATIONS_1D:
        mb_assert(f, [xs], [batch(xs, dims)], size)
    ys = examples([(c, 4, 3) for c in counts], dtype)
    for f in INTERPOLATIONS_2D:
        mb_assert(f, [ys], [batch(ys, dims + (False,))], size)
    zs = examples([(c, 2, 3, 2) for c in counts], dtype)
    mb_assert(lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), [zs],
              [batch(zs, dims + (False, False))], size)


@pytest.mark.parametrize("size", [3, 1])
def test_unfold_fold_and_shuffles_match_loop(size, dtype):
    xs = examples([(4, 5, 6)] * size, dtype)
    xb = batch(xs, (False, False, False))
    for f in (lambda x: F.unfold(x, 2),
              lambda x: F.unfold(x, (2, 3), dilation=1, padding=1, stride=2),
              lambda x: nn.Unfold(3, padding=1)(x),
              lambda x: F.fold(F.unfold(x, 2), (5, 6), 2),
              lambda x: nn.Fold((5, 6), (2, 3), padding=(1, 0))(F.unfold(x, (2, 3),
                                                                         padding=(1, 0))),
              lambda x: F.pixel_shuffle(x, 2),
              lambda x: F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2),
              lambda x: F.pixel_unshuffle(x[:, :, :4, :6], downscale_factor=2)):
        mb_assert(f, [xs], [xb], size)


@needs(CHANNEL_SHUFFLE_HAS_DERIVATIVE, "differentiates channel_shuffle")
@pytest.mark.parametrize("size", [3, 1])
def test_channel_shuffle_matches_loop(size, dtype):
    xs = examples([(4, 5, 6)] * size, dtype)
    mb_assert(lambda x: torch.channel_shuffle(x, 2), [xs], [batch(xs, (False,) * 3)], size)


def test_refusals_name_the_op_and_the_dimension():
    xb = batch([torch.randn(1, 2, n) for n in (3, 5)], (False, True))
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.functional\.interpolate: "
                                                  r"dimension 2 \(a spatial dimension\) is "
                                                  r"dynamic \(each example's own size\).*padding "
                                                  r"would enter its last real positions; make it "
                                                  r"static .* \[F\.interpolate\(e, \.\.\.\) for e "
                                                  r"in x\.examples\(\)\]"):
        F.interpolate(xb, scale_factor=2, mode="linear")
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.functional\.interpolate: "
                                                  r"dimension 2"):
        nn.Upsample(size=4)(xb)
    images = batch([torch.randn(1, c, 4, 4) for c in (4, 8)], (True, False, False))
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.functional\.unfold: dimension 1 "
                                                  r"\(channels or spatial\) is dynamic"):
        F.unfold(images, 2)
    with pytest.raises(NotImplementedError, match=r"^torch\.pixel_shuffle: dimension 1 "
                                                  r"\(channels or spatial\) is dynamic"):
        F.pixel_shuffle(images, 2)
    with pytest.raises(NotImplementedError, match=r"^torch\.channel_shuffle: dimension 1"):
        torch.channel_shuffle(images, 2)
    with pytest.raises(NotImplementedError, match=r"^torch\.nn\.functional\.fold: dimension 2 "
                                                  r"\(blocks or their count\) is dynamic"):
        F.fold(xb, (2, 2), 1)
    with pytest.raises(TypeError, match=r"x\.maxsize\(2\)"):
        F.interpolate(batch([torch.randn(1, 2, 3)] * 2, (False, False)), size=xb.maxsize(2))
