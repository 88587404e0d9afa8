"""PackedBatch on CUDA: device moves, and cuDNN's packed RNN path with no copy and no padding.

Skipped without a CUDA device (the lead runs it on a GPU machine).  Values are
compared in float64 (which cuDNN's RNNs support), so that TF32 and kernel
choices do not blur the comparison with the loop.
"""

from __future__ import annotations

import pytest
import torch
from packed_strategies import examples_of_lengths
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence
from torch.utils._python_dispatch import TorchDispatchMode

from matchbox import MaskedBatch
from matchbox.packed import PackedBatch, as_masked
from matchbox.testing import mb_assert

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

LENGTHS = [5, 1, 0, 3, 2, 7]


def cuda_examples(lengths=LENGTHS, static=(3,), dtype=torch.float64):
    return examples_of_lengths(lengths, static=static, dtype=dtype, device="cuda")


class RecordOps(TorchDispatchMode):
    """Every ATen op that runs, with its tensor arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.calls.append((str(func.overloadpacket), args))
        return func(*args, **(kwargs or {}))


def test_fromlist_on_cuda_keeps_batch_sizes_on_the_cpu():
    xs = cuda_examples()
    pb = PackedBatch.fromlist(xs)
    assert pb.device.type == "cuda" and pb.batch_sizes.device.type == "cpu"
    assert pb.sorted_indices.device.type == "cuda" and pb.unsorted_indices.device.type == "cuda"
    for got, x in zip(pb.examples(), xs):
        assert torch.equal(got, x)


def test_device_moves_round_trip_and_ops_run_on_the_moved_batch():
    xs = examples_of_lengths(LENGTHS)
    pb = PackedBatch.fromlist(xs)
    on_gpu = pb.to("cuda")
    assert on_gpu.is_cuda and on_gpu.layout.device.type == "cuda"
    assert on_gpu.batch_sizes.device.type == "cpu"
    assert on_gpu.cuda().is_cuda and on_gpu.cpu().device.type == "cpu"
    for got, x in zip(on_gpu.cpu().examples(), xs):
        assert torch.equal(got, x)
    assert torch.allclose(on_gpu.tanh().sum(1).data.cpu(), pb.tanh().sum(1).data)
    assert on_gpu.to(torch.float32).dtype == torch.float32


def test_packed_sequence_on_cuda_is_shared_both_ways():
    xs = cuda_examples([4, 2, 2, 1])
    sequence = pack_sequence([x[0] for x in xs], enforce_sorted=False)
    pb = PackedBatch.from_packed_sequence(sequence)
    assert pb.data is sequence.data and pb.sorted_indices is sequence.sorted_indices
    back = pb.to_packed_sequence()
    assert back.data is pb.data
    padded, lengths = pad_packed_sequence(back, batch_first=True)
    for b, x in enumerate(xs):
        assert torch.equal(padded[b : b + 1, : x.size(1)], x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("module_type", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_rnn_runs_cudnn_on_the_batchs_own_rows(module_type, dtype):
    pb = PackedBatch.fromlist(cuda_examples(dtype=dtype))
    module = module_type(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    module = module.to("cuda", dtype)
    with torch.backends.cudnn.flags(enabled=True), RecordOps() as ops:
        module(pb)
    cudnn = [args for name, args in ops.calls if name == "aten._cudnn_rnn"]
    assert len(cudnn) == 1, [name for name, _ in ops.calls]
    assert cudnn[0][0].data_ptr() == pb.data.data_ptr()  # no copy of the input rows
    names = {name for name, _ in ops.calls}
    assert not names & {"aten._pack_padded_sequence", "aten._pad_packed_sequence",
                        "aten.constant_pad_nd", "aten.index_copy"}


@pytest.mark.parametrize("module_type", [torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN])
def test_rnn_on_cuda_equals_loop(module_type):
    xs = cuda_examples([5, 1, 3, 2, 7])  # the loop refuses length 0; covered on the CPU
    module = module_type(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    module = module.to("cuda", torch.float64)

    mb_assert(lambda x: module(x)[0], [xs], [PackedBatch.fromlist(xs)], len(xs),
              params=list(module.parameters()))
    _, state = module(PackedBatch.fromlist(xs))  # final states: views (TimeMajorBatch)
    for b, x in enumerate(xs):
        _, expected = module(x)
        for got, want in zip(_states(state), _states(expected)):
            torch.testing.assert_close(list(got.examples())[b], want)


def _states(state):
    return list(state) if isinstance(state, tuple) else [state]


def test_zero_length_examples_on_cuda_keep_their_initial_state():
    pb = PackedBatch.fromlist(cuda_examples())
    module = torch.nn.LSTM(3, 4, batch_first=True).to("cuda", torch.float64)
    h0 = torch.randn(1, len(LENGTHS), 4, dtype=torch.float64, device="cuda")  # plain (L*D, B, H)
    c0 = torch.randn_like(h0)
    out, (h, c) = module(pb, (h0, c0))  # final states: views, one (L*D, 1, H) per example
    empty = LENGTHS.index(0)
    assert torch.equal(list(h.examples())[empty], h0[:, empty : empty + 1])
    assert torch.equal(list(c.examples())[empty], c0[:, empty : empty + 1])
    assert out.layout is pb.layout


def test_layers_segments_and_mixing_on_cuda_equal_loop():
    xs = cuda_examples()
    ys = cuda_examples()
    pb = PackedBatch.fromlist(xs)
    mb = MaskedBatch.fromlist(ys, (True, False), padding_value=float("nan"))
    layer = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.GELU(),
                                torch.nn.LayerNorm(3)).to("cuda", torch.float64)
    mb_assert(lambda x: torch.softmax(layer(x), 1).sum(1), [xs], [pb], len(xs),
              params=list(layer.parameters()))
    mb_assert(lambda x, y: as_masked(x) * y + x, [xs, ys], [pb, mb], len(xs))
    for got, x in zip(PackedBatch.from_masked(pb.to_masked()).examples(), xs):
        assert torch.equal(got, x)
