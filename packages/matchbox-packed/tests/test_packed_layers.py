"""Layers on the packed rows (linear, embedding, dropout, layer_norm, rms_norm, activations)
against the per-example loop, values and gradients (inputs and module parameters).

They are the rules matchbox-nn writes once for every batch type (registered for
``"Batch"``), which run on a PackedBatch's rows through its ``rows()``/``from_rows()``
and ``positions()``/``from_positions()``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from packed_strategies import examples_of_lengths, packed_examples
from torch import nn

from matchbox import MaskedBatch, _registry
from matchbox.packed import PackedBatch
from matchbox.testing import mb_assert

LAYER_FAMILIES = ("linear", "normalization", "dropout", "embedding")
LAYERS = {e.name for e in _registry.entries("PackedBatch") if e.family in LAYER_FAMILIES}
# The channel-wise dropouts find the channels by the input's rank, which a PackedBatch's
# rows do not have: they are refused (test_feature_dropout_is_refused).
FEATURE_DROPOUTS = {"torch.nn.functional.dropout1d", "torch.nn.functional.dropout2d",
                    "torch.nn.functional.dropout3d", "torch.nn.functional.feature_alpha_dropout",
                    "torch.feature_dropout", "torch.feature_dropout_",
                    "torch.feature_alpha_dropout", "torch.feature_alpha_dropout_"}


def test_every_registered_layer_is_tested_here():
    expected = {"torch.nn.functional.linear", "torch.nn.functional.embedding",
                "torch.nn.functional.one_hot", "torch.nn.functional.dropout",
                "torch.nn.functional.alpha_dropout", "torch.dropout", "torch.dropout_",
                "torch.alpha_dropout", "torch.alpha_dropout_", "torch.nn.functional.layer_norm",
                "torch.layer_norm", *FEATURE_DROPOUTS}
    if hasattr(F, "rms_norm"):
        expected.add("torch.nn.functional.rms_norm")
    if hasattr(torch, "rms_norm"):
        expected.add("torch.rms_norm")
    assert LAYERS == expected
    # One rule for both batch types: the handlers are MaskedBatch's.
    for name in LAYERS:
        func = next(e.func for e in _registry.entries("PackedBatch") if e.name == name)
        assert _registry.lookup(func, "PackedBatch") is _registry.lookup(func, "MaskedBatch")


@given(packed_examples(static=(4,)))
def test_linear_activation_layer_norm_stack_equals_loop(pair):
    xs, pb = pair
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.GELU(), nn.LayerNorm(5), nn.Linear(5, 3),
                          nn.SiLU()).to(xs[0].dtype)
    mb_assert(model, [xs], [pb], len(xs))


@pytest.mark.parametrize("activation", [F.relu, F.gelu, F.silu, F.elu, torch.tanh, F.softplus,
                                        F.leaky_relu, F.mish, F.hardtanh, torch.sigmoid])
def test_activations_equal_loop(activation, dtype):
    xs = examples_of_lengths([3, 0, 5, 1], dtype=dtype)
    mb_assert(activation, [xs], [PackedBatch.fromlist(xs)], 4)


def test_linear_over_several_static_dims(dtype):
    xs = examples_of_lengths([2, 4, 0], static=(2, 3), dtype=dtype)
    layer = nn.Linear(3, 4).to(dtype)
    mb_assert(layer, [xs], [PackedBatch.fromlist(xs)], 3)


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_embedding_equals_loop(padding_idx, dtype):
    ids = [torch.randint(0, 7, (1, n)) for n in (3, 0, 5, 1)]
    table = nn.Embedding(7, 4, padding_idx=padding_idx).to(dtype)
    pb = PackedBatch.fromlist(ids)
    mb_assert(table, [ids], [pb], 4)
    assert table(pb).dims == (True, False)


def test_embedding_with_max_norm_equals_loop():
    ids = [torch.randint(0, 7, (1, n)) for n in (3, 0, 5)]
    table = nn.Embedding(7, 4, max_norm=1.0).double()
    mb_assert(table, [ids], [PackedBatch.fromlist(ids)], 3)


def test_layer_norm_over_two_static_dims_and_rms_norm(dtype):
    xs = examples_of_lengths([2, 0, 3], static=(2, 3), dtype=dtype)
    pb = PackedBatch.fromlist(xs)
    mb_assert(nn.LayerNorm((2, 3)).to(dtype), [xs], [pb], 3)
    weight, bias = torch.randn(3, dtype=dtype, requires_grad=True), torch.randn(3, dtype=dtype)
    mb_assert(lambda x: torch.layer_norm(x, (3,), weight, bias, 1e-5, False), [xs], [pb], 3)
    if hasattr(nn, "RMSNorm"):
        mb_assert(nn.RMSNorm(3).to(dtype), [xs], [pb], 3)
    if hasattr(torch, "rms_norm"):
        mb_assert(lambda x: torch.rms_norm(x, (2, 3), None, 1e-6), [xs], [pb], 3)


def test_embedding_scales_gradients_by_each_examples_own_frequencies():
    # As the loop: each example's gradient divided by the id's count in that example.
    ids = [torch.tensor([[1, 1, 2]]), torch.tensor([[1, 3]]), torch.tensor([[4]]),
           torch.zeros(1, 0, dtype=torch.long)]
    table = nn.Embedding(6, 3, scale_grad_by_freq=True).double()
    mb_assert(table, [ids], [PackedBatch.fromlist(ids)], 4)


def test_one_hot_equals_loop_and_names_a_bad_class():
    ids = [torch.tensor([[1, 0, 2]]), torch.zeros(1, 0, dtype=torch.long), torch.tensor([[3]])]
    pb = PackedBatch.fromlist(ids)
    result = F.one_hot(pb, 4)
    assert isinstance(result, PackedBatch) and result.layout is pb.layout
    assert [torch.equal(a, F.one_hot(x, 4)) for a, x in zip(result.examples(), ids)] == [True] * 3
    with pytest.raises(RuntimeError, match=r"^torch\.nn\.functional\.one_hot: class values must "
                                           r"be in \[0, num_classes=3\): example 2 has 3"):
        F.one_hot(pb, 3)


@pytest.mark.parametrize("name", sorted(FEATURE_DROPOUTS))
def test_feature_dropout_is_refused(name):
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3], static=(4,)))
    func = next(e.func for e in _registry.entries("PackedBatch") if e.name == name)
    with pytest.raises(NotImplementedError, match=rf"^{name} is not implemented for PackedBatch; "
                                                  r"convert the batch with matchbox.packed."
                                                  r"as_masked\(x\)"):
        func(pb, 0.5, True)


def test_dropout_in_eval_is_the_identity_and_in_training_scales_kept_rows():
    xs = examples_of_lengths([3, 0, 5])
    pb = PackedBatch.fromlist(xs)
    layer = nn.Dropout(0.5)
    mb_assert(layer.eval(), [xs], [pb], 3)
    torch.manual_seed(3)
    out = layer.train()(pb)
    assert out.layout is pb.layout
    kept = out.data != 0
    assert torch.allclose(out.data[kept], pb.data[kept] * 2)
    assert 0 < kept.float().mean() < 1
    alpha = F.alpha_dropout(pb, 0.5, training=False)
    assert torch.equal(alpha.data, pb.data)
    assert torch.dropout(pb, 0.0, True).layout is pb.layout
    inplace = pb * 1
    assert F.dropout(inplace, 0.5, True, inplace=True) is inplace
    inplace = pb * 1
    assert torch.dropout_(inplace, 0.5, True) is inplace
    assert torch.alpha_dropout_(inplace, 0.5, False) is inplace


def test_one_call_for_the_whole_batch():
    pb = PackedBatch.fromlist(examples_of_lengths([5, 1, 0, 3], static=(4,)))
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    with torch.autograd.profiler.profile() as prof:
        model.double()(pb)
    names = [e.name for e in prof.function_events]
    assert names.count("aten::linear") == 1 and names.count("aten::layer_norm") == 1


def test_errors_name_the_op_and_argument():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3], static=(4,)))
    with pytest.raises(NotImplementedError, match=r"torch.nn.functional.linear: weight must be "
                                                  r"a plain tensor shared by every example "
                                                  r"\(only the input may be a batch\)"):
        F.linear(pb, pb)
    tokens = PackedBatch.fromlist([torch.randn(1, 2), torch.randn(1, 3)])
    with pytest.raises(ValueError, match=r"torch.nn.functional.linear: the feature dimension "
                                         r"\(the last\) covers dimension 1, which is dynamic"):
        F.linear(tokens, torch.randn(2, 2))
    with pytest.raises(ValueError, match=r"torch.nn.functional.layer_norm: normalized_shape "
                                         r"\[3, 4\] covers dimension 1, which is dynamic"):
        F.layer_norm(pb, (3, 4))


ACTIVATIONS = {e.name for e in _registry.entries("PackedBatch") if e.family == "activation"}


def test_every_registered_activation_is_tested_here():
    assert ACTIVATIONS == {"torch.nn.functional.glu", "torch.prelu", "Tensor.prelu",
                           "torch.nn.functional.normalize"}


@pytest.mark.parametrize("module", [
    lambda: nn.GLU(-1), lambda: nn.GLU(2), lambda: nn.PReLU(), lambda: nn.Softmin(-1),
    lambda: nn.Softmin(1), lambda: (lambda x: F.normalize(x, dim=-1)),
    lambda: (lambda x: F.normalize(x, p=1.0, dim=2)), lambda: (lambda x: x.prelu(
        torch.tensor([0.2], dtype=x.dtype)))],
    ids=["glu-1", "glu2", "prelu", "softmin-1", "softmin1", "normalize", "normalize-p1",
         "Tensor.prelu"])
def test_activations_that_are_not_pointwise_equal_loop(module, dtype):
    # (1, T, 4) examples, lengths 0 and 1 among them; PReLU's weight gets its gradient.
    xs = examples_of_lengths([3, 0, 1, 4], static=(4,), dtype=dtype)
    f = module()
    if isinstance(f, nn.Module):
        f = f.to(dtype)
    mb_assert(f, [xs], [PackedBatch.fromlist(xs)], len(xs))


def test_type_and_contiguous_keep_the_layout():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 0, 3]))
    assert pb.type() == pb.data.type()  # the name of the type, as a tensor's
    cast = pb.type(torch.float32)
    assert cast.dtype == torch.float32 and cast.layout is pb.layout
    same = pb.contiguous()
    assert same.layout is pb.layout and torch.equal(same.data, pb.data)


def test_non_pointwise_activations_over_the_packed_dimension_are_refused():
    pb = PackedBatch.fromlist(examples_of_lengths([2, 3], static=(4,)))
    with pytest.raises(ValueError, match=r"^torch.nn.functional.glu: dim=1 is dimension 1, which "
                                         r"is dynamic \(its size differs between examples\); "
                                         r"glu splits it in halves"):
        F.glu(pb, 1)
    with pytest.raises(ValueError, match=r"^torch.nn.functional.normalize: dimension 0 is the "
                                         r"batch dimension of each example \(size one; dim=0\)"):
        F.normalize(pb, dim=0)
    with pytest.raises(ValueError, match=r"^torch.prelu: a weight of 4 channels reads "
                                         r"dimension 1 of each example as the channels, but "
                                         r"dimension 1 is dynamic"):
        nn.PReLU(4).double()(pb)


def test_ctc_loss_of_a_packed_batchs_time_major_view_equals_loop(dtype):
    # Per-example CTC code on packed scores: the view's batch is padded for the one call.
    xs = examples_of_lengths([4, 2, 6], (5,), dtype)
    ts = [torch.tensor([[1, 2]]), torch.tensor([[3]]), torch.tensor([[1, 1, 2]])]
    targets = MaskedBatch.fromlist(ts, (True,), padding_value=10**6)
    lengths = [torch.tensor([x.size(1)]) for x in xs]
    label_counts = [torch.tensor([t.size(1)]) for t in ts]

    def f(x, t, il, tl):
        return F.ctc_loss(x.log_softmax(2).transpose(0, 1), t, il, tl, reduction="mean")

    mb_assert(f, [xs, ts, lengths, label_counts],
              [PackedBatch.fromlist(xs), targets, MaskedBatch.fromlist(lengths, ()),
               MaskedBatch.fromlist(label_counts, ())], 3)


@pytest.mark.parametrize("layer", ["MultiheadAttention", "TransformerEncoderLayer",
                                   "TransformerDecoderLayer"])
def test_attention_layers_refuse_a_packed_batch_saying_to_convert(layer):
    # They raised AttributeError: 'PackedBatch' object has no attribute '_mask'.
    xs = examples_of_lengths([3, 1, 2], static=(4,))
    pb = PackedBatch.fromlist(xs)
    module = {"MultiheadAttention": lambda: nn.MultiheadAttention(4, 2, batch_first=True),
              "TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(
                  4, 2, 8, dropout=0.0, batch_first=True),
              "TransformerDecoderLayer": lambda: nn.TransformerDecoderLayer(
                  4, 2, 8, dropout=0.0, batch_first=True)}[layer]().to(xs[0].dtype)
    args = {"MultiheadAttention": (pb, pb, pb), "TransformerEncoderLayer": (pb,),
            "TransformerDecoderLayer": (pb, pb)}[layer]
    with pytest.raises(NotImplementedError, match=(
            r"^torch\.nn\.functional\.multi_head_attention_forward is not implemented for "
            r"PackedBatch; convert the batch with matchbox\.packed\.as_masked\(x\)")):
        module(*args)
    # What it says to write runs, and equals the loop.
    masked = pb.to_masked()
    out = module(*[masked] * len(args))
    out = out[0] if isinstance(out, tuple) else out
    assert isinstance(out, MaskedBatch)
    mb_assert(lambda *a: module(*a)[0] if layer == "MultiheadAttention" else module(*a),
              tuple([xs] * len(args)), tuple([masked] * len(args)), 3)
