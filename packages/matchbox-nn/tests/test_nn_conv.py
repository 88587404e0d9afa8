"""conv1d / conv2d / conv3d and their transposed forms on batches equal the per-example loop.

Values, input gradients and weight/bias gradients, with NaN padding (mb_assert rebuilds
every batch with NaN padding), zero-length examples, examples shorter than the kernel
(an empty output, see conv_oracle.py), batch size one, float32 and float64.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conv_oracle import CountOps, batch, examples, loop_or_empty
from hypothesis import given
from hypothesis import strategies as st

from matchbox import MaskedBatch, _registry
from matchbox.testing import mb_assert

# PyTorch's note that 'same' with an even kernel copies the input (for the loop too).
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")

DTYPES = [torch.float32, torch.float64]
# Mostly short examples (0, 1, shorter than the kernel), sometimes long ones.
LENGTHS = st.lists(st.one_of(st.integers(0, 8), st.integers(20, 40)), min_size=1, max_size=5)
SIDES = st.lists(st.tuples(st.integers(1, 7), st.integers(1, 7)), min_size=1, max_size=4)


def check(f, xs, dims, *shared, dynamic=(2,)):
    """mb_assert of ``f(x, *shared)``: the weight and bias are shared arguments, so
    their gradients are compared too."""
    batch_size = len(xs)
    mb_assert(loop_or_empty(f, dynamic), [xs] + [[s] * batch_size for s in shared],
              [batch(xs, dims)] + list(shared), batch_size)


def weights(rows, columns, kernel, dtype, bias=True, seed=1, bias_size=None):
    """A (rows, columns, *kernel) weight and a bias of ``bias_size`` (default: rows)."""
    g = torch.Generator().manual_seed(seed)
    kernel = (kernel,) if isinstance(kernel, int) else tuple(kernel)
    w = torch.randn(rows, columns, *kernel, generator=g, dtype=dtype)
    b = torch.randn(bias_size or rows, generator=g, dtype=dtype) if bias else None
    return w, b


# ---------------------------------------------------------------- every registered op


OP_CASES = {
    # name: (example sizes, dims, f(x), dynamic output dims)
    "torch.conv1d": ([5, 0, 2, 9, 1], (False, True),
                     lambda x: F.conv1d(x, torch.ones(3, 2, 3, dtype=x.dtype), padding=1), (2,)),
    "torch.conv2d": ([(3, 4), (1, 1), (6, 2)], (False, True, True),
                     lambda x: F.conv2d(x, torch.ones(3, 2, 2, 3, dtype=x.dtype)), (2, 3)),
    "torch.conv_transpose1d": ([4, 0, 1, 7], (False, True), lambda x: F.conv_transpose1d(
        x, torch.ones(2, 3, 3, dtype=x.dtype), stride=2), (2,)),
    "torch.conv_transpose2d": ([(2, 3), (1, 1), (4, 2)], (False, True, True),
                               lambda x: F.conv_transpose2d(
                                   x, torch.ones(2, 3, 2, 2, dtype=x.dtype), padding=1), (2, 3)),
    "torch.conv3d": ([(3, 4, 2), (1, 1, 1), (2, 5, 3)], (False, True, True, True),
                     lambda x: F.conv3d(x, torch.ones(3, 2, 2, 2, 1, dtype=x.dtype)), (2, 3, 4)),
    "torch.conv_transpose3d": ([(2, 3, 1), (1, 1, 2), (3, 2, 2)], (False, True, True, True),
                               lambda x: F.conv_transpose3d(
                                   x, torch.ones(2, 3, 2, 1, 2, dtype=x.dtype), stride=(2, 1, 1)),
                               (2, 3, 4)),
}


@pytest.mark.parametrize("name", sorted(e.name for e in _registry.entries()
                                        if e.family == "convolution"))
def test_every_registered_convolution_equals_the_loop(name, dtype):
    assert name in OP_CASES, f"{name} is registered as a convolution but has no case here"
    sizes, dims, f, dynamic = OP_CASES[name]
    check(f, examples(sizes, 2, dtype), dims, dynamic=dynamic)


# ---------------------------------------------------------------- conv1d


@given(lengths=LENGTHS, kernel=st.integers(1, 5), stride=st.integers(1, 3),
       padding=st.one_of(st.integers(0, 3), st.sampled_from(["same", "valid"])),
       dilation=st.integers(1, 3), groups=st.sampled_from([1, 2]), bias=st.booleans(),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_conv1d_equals_the_loop(lengths, kernel, stride, padding, dilation, groups, bias,
                                dtype, seed):
    if padding == "same":
        stride = 1  # PyTorch's rule, for the loop and the batch alike
    w, b = weights(6, 4 // groups, kernel, dtype, bias, seed)
    check(lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups),
          examples(lengths, 4, dtype, seed), (False, True), w, b)


@pytest.mark.parametrize("padding", [0, 2, "same", "valid"])
def test_conv1d_module_equals_the_loop(padding, dtype):
    conv = torch.nn.Conv1d(4, 6, 5, padding=padding, dilation=2 if padding != 2 else 1,
                           groups=2).to(dtype)
    xs = examples([7, 0, 1, 3, 12, 4], 4, dtype)
    mb_assert(loop_or_empty(conv), [xs], [batch(xs, (False, True))], len(xs),
              params=list(conv.parameters()))


def test_conv1d_batch_of_one(dtype):
    conv = torch.nn.Conv1d(3, 2, 3, stride=2).to(dtype)
    for length in (0, 1, 2, 3, 10):
        xs = examples([length], 3, dtype)
        mb_assert(loop_or_empty(conv), [xs], [batch(xs, (False, True))], 1,
                  params=list(conv.parameters()))


@pytest.mark.parametrize("lengths", [[1, 2, 0], [3, 3], [0, 0], [2, 2]], ids=[
    "every example shorter than the kernel", "equal lengths (no padding)",
    "every example empty", "equal lengths, all shorter than the kernel"])
def test_conv1d_when_no_example_or_every_example_has_an_output(lengths, dtype):
    # Every example too short: the padded data is grown for the one batched call,
    # and no output position is real.  Equal lengths: no mask at all.
    conv = torch.nn.Conv1d(2, 3, 4, padding=0).to(dtype)
    xs = examples(lengths, 2, dtype)
    mb_assert(loop_or_empty(conv), [xs], [batch(xs, (False, True))], len(xs),
              params=list(conv.parameters()))


def test_conv1d_output_sizes_follow_pytorch_formula():
    xb = batch(examples([0, 1, 4, 5, 11], 2), (False, True))
    out = F.conv1d(xb, torch.ones(1, 2, 3, dtype=xb.dtype), stride=2, padding=1, dilation=2)
    # floor((L + 2 - 4 - 1) / 2) + 1 where it is at least 1; PyTorch refuses L = 0 and 1.
    assert out.lengths()[:, 0].tolist() == [0, 0, 1, 2, 5]


# ---------------------------------------------------------------- conv2d


@given(sides=SIDES, kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 2), st.integers(1, 3)),
       padding=st.one_of(st.tuples(st.integers(0, 2), st.integers(0, 2)),
                         st.sampled_from(["same", "valid"])),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), bias=st.booleans(),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_conv2d_over_dynamic_height_and_width_equals_the_loop(sides, kernel, stride, padding,
                                                              dilation, bias, dtype, seed):
    if padding == "same":
        stride = (1, 1)
    w, b = weights(3, 2, kernel, dtype, bias, seed)
    check(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation),
          examples(sides, 2, dtype, seed), (False, True, True), w, b, dynamic=(2, 3))


@given(widths=LENGTHS, kernel=st.integers(1, 3), padding=st.integers(0, 1),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_conv2d_with_static_height_equals_the_loop(widths, kernel, padding, dtype, seed):
    # Only the width is dynamic, so an example may be empty there.
    w, b = weights(4, 1, (3, kernel), dtype, True, seed)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=padding, groups=2),
          examples([(5, n) for n in widths], 2, dtype, seed), (False, False, True), w, b,
          dynamic=(3,))


def test_conv2d_module_batch_of_one_and_groups(dtype):
    conv = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False).to(dtype)
    for sides in ([(5, 3)], [(2, 6), (4, 4), (1, 1)]):
        xs = examples(sides, 4, dtype)
        mb_assert(loop_or_empty(conv, (2, 3)), [xs], [batch(xs, (False, True, True))],
                  len(xs), params=list(conv.parameters()))


# ---------------------------------------------------------------- transposed


@given(lengths=LENGTHS, kernel=st.integers(1, 4), stride=st.integers(1, 3),
       padding=st.integers(0, 2), extra=st.integers(0, 2), dilation=st.integers(1, 2),
       groups=st.sampled_from([1, 2]), bias=st.booleans(), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_conv_transpose1d_equals_the_loop(lengths, kernel, stride, padding, extra, dilation,
                                          groups, bias, dtype, seed):
    output_padding = extra % max(stride, dilation)  # PyTorch: below stride or dilation
    # (C_in, C_out / groups, k) and a bias of C_out = 6
    w, b = weights(4, 6 // groups, kernel, dtype, bias, seed, bias_size=6)
    check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride, padding, output_padding,
                                             groups, dilation),
          examples(lengths, 4, dtype, seed), (False, True), w, b)


def test_conv_transpose2d_module_equals_the_loop(dtype):
    conv = torch.nn.ConvTranspose2d(2, 3, (2, 3), stride=(2, 1), padding=(0, 1),
                                    output_padding=(1, 0)).to(dtype)
    xs = examples([(3, 4), (1, 1), (5, 2), (2, 7)], 2, dtype)
    mb_assert(loop_or_empty(conv, (2, 3)), [xs], [batch(xs, (False, True, True))], len(xs),
              params=list(conv.parameters()))


# ---------------------------------------------------------------- padding never leaks


@pytest.mark.parametrize("padding_value", [float("nan"), float("inf"), float("-inf"), 1e30])
def test_padding_values_reach_neither_outputs_nor_weight_gradients(padding_value, dtype):
    conv = torch.nn.Conv1d(2, 3, 3, padding=1).to(dtype)
    xs = examples([4, 1, 6], 2, dtype)
    xb = MaskedBatch.fromlist(xs, (False, True), padding_value=padding_value)
    out = conv(xb)
    for y, x in zip(out.examples(), xs):
        torch.testing.assert_close(y, conv(x))
    # A NaN gradient arriving at the output's padding is dropped, not summed into the weight.
    grad = torch.full_like(out.data, float("nan")).where(~out.mask, torch.ones(()))
    out.data.backward(grad.to(dtype))
    expected = torch.autograd.grad(sum(conv(x).sum() for x in xs), conv.weight)[0]
    torch.testing.assert_close(conv.weight.grad, expected)


def test_examples_masked_out_whole_do_not_reach_the_weight():
    # A batch of static examples whose mask marks example 1 as padding (as a
    # finished sequence's step in a loop): its NaN data reaches nothing.
    data = torch.randn(3, 2, 5, dtype=torch.float64)
    data[1] = float("nan")
    mask = torch.tensor([True, False, True]).reshape(3, 1, 1)
    xb = MaskedBatch(data, mask, (False, False))
    conv = torch.nn.Conv1d(2, 3, 3).double()
    out = conv(xb)
    assert out.mask.reshape(-1).tolist() == [True, False, True]
    for j in (0, 2):
        torch.testing.assert_close(out.data[j : j + 1], conv(data[j : j + 1]))
    out.data.backward(torch.ones_like(out.data))
    expected = torch.autograd.grad(conv(data[[0, 2]]).sum(), conv.weight)[0]
    torch.testing.assert_close(conv.weight.grad, expected)


# ---------------------------------------------------------------- one batched call


@pytest.mark.parametrize("make", [
    lambda: torch.nn.Conv1d(2, 3, 3, padding="same"),
    lambda: torch.nn.ConvTranspose1d(2, 3, 3, stride=2),
])
def test_the_batch_runs_one_convolution(make):
    conv = make().double()
    xb = batch(examples([3, 9, 1, 0, 5, 7], 2), (False, True))
    with CountOps() as ops:
        conv(xb)
    assert sum("convolution" in name for name in ops.names) == 1, ops.names


# ---------------------------------------------------------------- errors


def test_a_dynamic_channel_dimension_is_refused():
    xb = MaskedBatch.fromlist([torch.rand(1, c, 5) for c in (2, 3)], (True, False))
    with pytest.raises(ValueError, match=r"torch.conv1d: dimension 1 of the input \(the "
                                         r"channels\) is dynamic"):
        F.conv1d(xb, torch.rand(3, 2, 3))


def test_an_example_of_the_wrong_rank_is_refused():
    xb = MaskedBatch.fromlist([torch.rand(1, n) for n in (2, 5)], (True,))
    with pytest.raises(ValueError, match=r"torch.conv1d: each example must be \(1, channels, "
                                         r"length\) \(rank 3\), got rank 2"):
        F.conv1d(xb, torch.rand(3, 1, 3))
    xb = batch(examples([4, 2], 2), (False, True))
    with pytest.raises(ValueError, match=r"torch.conv2d: each example must be \(1, channels, "
                                         r"height, width\) \(rank 4\), got rank 3"):
        F.conv2d(xb, torch.rand(3, 2, 1, 1))


def test_a_batched_weight_is_refused():
    xb = batch(examples([4, 2], 2), (False, True))
    wb = MaskedBatch.fromlist([torch.rand(1, 2, 3), torch.rand(1, 2, 3)], (False, False))
    with pytest.raises(NotImplementedError, match=r"torch.conv1d: the weight is a MaskedBatch; "
                                                  r"only the input may be a batch"):
        F.conv1d(xb, wb)
    with pytest.raises(NotImplementedError, match="the weight is a MaskedBatch"):
        F.conv1d(torch.rand(1, 2, 5), wb)


def test_bad_arguments_are_named():
    xb = batch(examples([4, 2], 2), (False, True))
    with pytest.raises(ValueError, match=r"torch.conv1d: padding must be 'same', 'valid' or "
                                         r"ints, got 'full'"):
        F.conv1d(xb, torch.rand(3, 2, 3), padding="full")
    with pytest.raises(ValueError, match=r"torch.conv1d: stride must be an int or a sequence "
                                         r"of 1, got \(1, 2\)"):
        F.conv1d(xb, torch.rand(3, 2, 3), stride=(1, 2))


def test_a_static_dimension_shorter_than_the_kernel_raises_as_in_the_loop():
    # Static sizes are every example's: PyTorch's own error, as for each example.
    xb = batch(examples([(2, 5), (2, 3)], 2), (False, False, True))
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input"):
        F.conv2d(xb, torch.rand(3, 2, 3, 1, dtype=xb.dtype))


def test_conv_transpose_output_size_needs_a_single_size():
    conv = torch.nn.ConvTranspose1d(2, 3, 3, stride=2).double()
    xb = batch(examples([4, 2], 2), (False, True))
    with pytest.raises(ValueError, match=r"size\(2\): dimension 2 is dynamic"):
        conv(xb, output_size=[9])


@given(sides=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)),
                     min_size=1, max_size=3),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 2)),
       stride=st.integers(1, 2), padding=st.integers(0, 1), dilation=st.integers(1, 2),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_conv3d_equals_the_loop(sides, kernel, stride, padding, dilation, dtype, seed):
    # Depth and height dynamic, width static (and wide enough for the kernel, which the
    # loop needs too); examples too short for the kernel get an empty output.
    width = max(sides[0][2], (kernel[2] - 1) * dilation + 1)
    w, b = weights(3, 2, kernel, dtype, True, seed)
    check(lambda x, w, b: F.conv3d(x, w, b, stride, padding, dilation),
          examples([(d, h, width) for d, h, _ in sides], 2, dtype, seed),
          (False, True, True, False), w, b, dynamic=(2, 3))


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv3d_module_equals_the_loop(padding_mode, dtype):
    conv = torch.nn.Conv3d(2, 4, (3, 1, 2), padding=(1, 0, 1), padding_mode=padding_mode,
                           groups=2).to(dtype)
    xs = examples([(4, 2, 3), (2, 3, 2), (5, 1, 3)], 2, dtype)
    mb_assert(loop_or_empty(conv, (2, 3, 4)), [xs], [batch(xs, (False, True, True, True))],
              len(xs), params=list(conv.parameters()))


def test_conv3d_is_one_convolution_for_the_batch():
    xs = examples([(4, 2, 3), (2, 3, 2), (5, 1, 3)], 2)
    conv = torch.nn.Conv3d(2, 4, 2).double()
    with CountOps() as ops:
        conv(batch(xs, (False, True, True, True)))
    assert ops.names.count("convolution.default") == 1


def test_unimplemented_3d_pooling_names_the_op():
    xb = batch(examples([(2, 2, 2), (3, 1, 2)], 2), (False, True, True, True))
    with pytest.raises(NotImplementedError, match="torch.nn.functional.max_pool3d is not "
                                                  "implemented for MaskedBatch"):
        F.max_pool3d(xb, 2)


# ---------------------------------------------------------------- CUDA


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_conv1d_on_cuda_equals_the_loop():
    conv = torch.nn.Conv1d(4, 6, 5, padding=2).double().cuda()
    xs = [x.cuda() for x in examples([7, 0, 1, 3, 12], 4)]
    mb_assert(loop_or_empty(conv), [xs], [batch(xs, (False, True))], len(xs),
              params=list(conv.parameters()))


# ---------------------------------------------------------------- README


def test_readme_convolution_example_runs_and_equals_the_loop():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Convolutions and pooling"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102
    for x, y in zip(ns["sequences"], ns["y"].examples()):
        torch.testing.assert_close(y, F.max_pool1d(torch.relu(ns["conv"](x)), 2))
    for x, z in zip(ns["images"], ns["z"].examples()):
        torch.testing.assert_close(z, ns["conv2d"](x))
