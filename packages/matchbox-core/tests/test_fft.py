"""``torch.fft`` against the per-example loop, values and gradients: transforms over
static dimensions, over dynamic ones with the output length given (``n=``/``s=``: each
example's signal zero-padded or trimmed to it), and the refusals over a dynamic dimension
without it.

Padding holds NaN.  Complex results are compared through ``abs``/``angle`` or a transform
back to real values.  (torch's CPU kernels fail on a signal of an example that is empty in
another dimension, so the empty examples are in the dynamic-dimension cases, where the
transformed dimension is the empty one.)
"""

from __future__ import annotations

import pytest
import torch
from family_cases import assert_every_op_has_a_case, batch_of, registered

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

FFT = torch.fft
# Each registered op: cases f(x) on examples (1, n, 4) (n dynamic, or static).
CASES = {
    "torch.fft.fft": [lambda x: FFT.fft(x).abs(), lambda x: FFT.fft(x, 6, 2, "ortho").angle()],
    "torch.fft.ifft": [lambda x: FFT.ifft(x, dim=-1, norm="forward").abs()],
    "torch.fft.rfft": [lambda x: FFT.rfft(x).abs(), lambda x: FFT.rfft(x, n=3).angle()],
    "torch.fft.irfft": [lambda x: FFT.irfft(FFT.rfft(x), n=4),
                        lambda x: FFT.irfft(FFT.fft(x), dim=2, norm="ortho")],
    "torch.fft.hfft": [lambda x: FFT.hfft(FFT.ifft(x), n=4), lambda x: FFT.hfft(x * 1.0)],
    "torch.fft.ihfft": [lambda x: FFT.ihfft(x).abs()],
    "torch.fft.fft2": [lambda x: FFT.fft2(x, dim=(2,)).abs()],
    "torch.fft.ifft2": [lambda x: FFT.ifft2(x, s=(5,), dim=(-1,)).angle()],
    "torch.fft.rfft2": [lambda x: FFT.rfft2(x, dim=(2,)).abs()],
    "torch.fft.irfft2": [lambda x: FFT.irfft2(FFT.rfft2(x, dim=(2,)), s=(4,), dim=(2,))],
    "torch.fft.hfft2": [lambda x: FFT.hfft2(x * 1.0, dim=(2,))],
    "torch.fft.ihfft2": [lambda x: FFT.ihfft2(x, dim=(2,)).abs()],
    "torch.fft.fftn": [lambda x: FFT.fftn(x, dim=2).abs(), lambda x: FFT.fftn(x, (4,)).abs()],
    "torch.fft.ifftn": [lambda x: FFT.ifftn(x, dim=[-1]).abs()],
    "torch.fft.rfftn": [lambda x: FFT.rfftn(x, dim=(2,)).abs()],
    "torch.fft.irfftn": [lambda x: FFT.irfftn(FFT.rfftn(x, dim=(2,)), s=(4,), dim=(2,))],
    "torch.fft.hfftn": [lambda x: FFT.hfftn(x * 1.0, dim=(2,))],
    "torch.fft.ihfftn": [lambda x: FFT.ihfftn(x, dim=(2,)).abs()],
    "torch.fft.fftshift": [lambda x: FFT.fftshift(x, 2), lambda x: FFT.fftshift(x, (-1,))],
    "torch.fft.ifftshift": [lambda x: FFT.ifftshift(x, dim=2)],
}
REGISTERED = registered("fft")
LAYOUTS = {
    "dynamic-static": ((True, False), [(2, 4), (3, 4), (1, 4)]),
    "all-static": ((False, False), [(3, 4), (3, 4)]),
    "batch-of-one": ((True, False), [(3, 4)]),
}


def test_every_registered_fft_op_has_a_case_here():
    assert_every_op_has_a_case("fft", REGISTERED, CASES)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_transforms_over_static_dimensions_match_loop(name, layout, dtype):
    dims, shapes = LAYOUTS[layout]
    xs, xb = batch_of(shapes, dims, dtype)
    for f in CASES[name]:
        mb_assert(f, [xs], [xb], len(xs))


@pytest.mark.parametrize("lengths", [[2, 0, 5, 1], [3], [0]])
def test_transforms_over_a_dynamic_dimension_with_the_length_given_match_loop(lengths, dtype):
    # Each example's signal zero-padded to n (or trimmed, the longer ones, for n=3).
    xs, xb = batch_of([(n, 4) for n in lengths], (True, False), dtype)
    for f in (lambda x: FFT.fft(x, n=6, dim=1).abs(),
              lambda x: FFT.fft(x, 3, 1).angle(),
              lambda x: FFT.rfft(x, 6, 1, "forward").abs(),
              lambda x: FFT.irfft(x, 6, 1),
              lambda x: FFT.ihfft(x, 5, -2).abs(),
              lambda x: FFT.fft2(x, s=(6,), dim=(1,)).abs(),
              lambda x: FFT.rfftn(x, s=(5,), dim=(1,)).abs(),
              lambda x: FFT.irfftn(FFT.rfftn(x, s=(6,), dim=(1,)), s=(6,), dim=(1,)),
              lambda x: FFT.fft(x, n=6, dim=1).abs().sum(1)):
        mb_assert(f, [xs], [xb], len(xs))


def test_two_dynamic_dimensions_one_transformed(dtype):
    # The other dynamic dimension stays dynamic; its padding rows are padding.
    xs, xb = batch_of([(2, 3), (1, 4), (3, 1)], (True, True), dtype)
    mb_assert(lambda x: FFT.fft(x, n=4, dim=2).abs(), [xs], [xb], 3)
    mb_assert(lambda x: FFT.rfft(x, n=4, dim=1).abs().sum(1), [xs], [xb], 3)


def test_refusals_name_the_op_the_dimension_and_what_to_write():
    _, xb = batch_of([(2, 4), (3, 4)], (True, False))
    with pytest.raises(NotImplementedError, match=r"^torch\.fft\.fft: dimension 1 is dynamic "
                                                  r"\(each example's own length\), and without "
                                                  r"n= .* pass n= \(each example's signal "
                                                  r"zero-padded or trimmed to it"):
        FFT.fft(xb, dim=1)
    with pytest.raises(NotImplementedError, match=r"^torch\.fft\.fftn: dimension 1 is dynamic.* "
                                                  r"pass s="):
        FFT.fftn(xb)
    with pytest.raises(NotImplementedError, match=r"^torch\.fft\.fft2: dimension 1 is dynamic"):
        FFT.fft2(xb, s=(-1, 4))
    with pytest.raises(NotImplementedError, match=r"^torch\.fft\.fftshift: dimension 1 is "
                                                  r"dynamic .* roll by half its own length"):
        FFT.fftshift(xb)
    with pytest.raises(ValueError, match=r"^torch\.fft\.rfft: dimension 0 is the batch dimension "
                                         r"of each example \(size one; dim=0\); the transform "
                                         r"would mix the examples"):
        FFT.rfft(xb, dim=0)
    with pytest.raises(ValueError, match=r"^torch\.fft\.fftn: dimension 0 is the batch"):
        FFT.fftn(xb, s=(1, 3, 4))
    with pytest.raises(RuntimeError, match=r"^torch\.fft\.fftn: when given, dim and shape "
                                           r"arguments must have the same length"):
        FFT.fftn(xb, s=(3, 4), dim=(2,))
    with pytest.raises(ValueError, match=r"^torch\.fft\.ifftn: the examples are scalars"):
        FFT.ifftn(MaskedBatch(torch.randn(3), None, ()))
    with pytest.raises(TypeError, match=r"x\.maxsize\(1\)"):
        FFT.fft(xb, n=xb.maxsize(1), dim=1)
