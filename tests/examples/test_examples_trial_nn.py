"""A user trial of matchbox-nn modules with less common Python constructs: small models
written for ONE example, as a researcher writes them (``nn.Embedding``, ``nn.Conv1d``
with max over time, bidirectional ``nn.GRU``/``nn.LSTM`` with a CRF or attention on top,
``nn.MultiheadAttention``, ``nn.LayerNorm``, ``nn.BatchNorm1d``, ``nn.Dropout`` in eval,
``nn.TransformerEncoder``, ``F.cross_entropy`` with ``ignore_index`` and
``label_smoothing``, ``F.ctc_loss``; ``reversed(range(n))``, ``range(n - 1, -1, -1)``,
``range(0, n, 2)``, ``zip`` of two batches of different lengths, ``enumerate``, a
filtered comprehension, ``max``/``min`` with ``key=``, nested ``@batch`` functions,
``@batch`` methods, tuple and dict states, windows ``x[:, t:t + 3]``), each run on a
batch against the loop over examples (``mb_assert``: values, input and parameter
gradients, NaN in the float padding, an out-of-vocabulary id in the id padding), in
float32 and float64, with a zero-length example where the loop is defined for one, a
one-length example and a batch of one.

The last tests pin what the trial found: ``nn.BatchNorm1d(track_running_stats=False)``
in eval mode mixed the examples' statistics (``test_examples_trial_nn_embedding.py``
holds the embedding's findings)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from user_batches import floats, ids, labels, lengths_params

import matchbox
from matchbox import MaskedBatch
from matchbox.nn import run_encoder
from matchbox.testing import mb_assert

DTYPES = [torch.float32, torch.float64]
WITH_EMPTY = {"ragged": [3, 0, 1, 5], "one-example": [4], "empty-example": [0],
              "length-one": [1, 1]}
NON_EMPTY = {"ragged": [3, 2, 1, 5], "one-example": [4], "length-one": [1, 1]}


def check(model, dtype, *pairs):
    tolerances = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    mb_assert(model, [xs for xs, _ in pairs], [xb for _, xb in pairs], len(pairs[0][0]),
              **tolerances)


# ------------------------------------------------------------------------ the models


class BiGRUCRF(nn.Module):
    """Embedding -> bidirectional GRU -> emissions; a linear-chain CRF's negative
    log-likelihood: the forward algorithm over ``range(1, len(steps))`` and the gold path's
    score, indexing the transitions with the tags."""

    def __init__(self, vocab=12, emb=5, hidden=4, tags=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(2 * hidden, tags)
        self.trans = nn.Parameter(torch.randn(tags, tags))
        self.start = nn.Parameter(torch.randn(tags))

    @matchbox.batch
    def forward(self, tokens, tags):                     # (1, T), (1, T)
        out, _ = self.gru(self.embed(tokens))
        emissions = self.proj(out).unbind(1)             # T x (1, K)
        tag = tags.unbind(1)
        alpha = self.start + emissions[0]
        gold = self.start[tag[0]] + emissions[0].gather(1, tag[0].unsqueeze(1)).squeeze(1)
        for t in range(1, len(emissions)):
            scores = alpha.unsqueeze(2) + self.trans.unsqueeze(0) + emissions[t].unsqueeze(1)
            alpha = torch.logsumexp(scores, 1)
            gold = gold + self.trans[tag[t - 1], tag[t]] + emissions[t].gather(
                1, tag[t].unsqueeze(1)).squeeze(1)
        return torch.logsumexp(alpha, 1) - gold


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)  # the loop's GRU refuses an empty sequence
def test_bigru_crf_negative_log_likelihood(lengths, dtype):
    torch.manual_seed(0)
    check(BiGRUCRF().to(dtype), dtype, ids(lengths, 12), ids(lengths, 3))


class BackwardScans(nn.Module):
    """An RNN cell run backwards with ``reversed(range(n))`` (LayerNorm on each state, the
    states summed), and a second scan over ``range(n - 1, -1, -1)``."""

    def __init__(self, size=3):
        super().__init__()
        self.cell = nn.RNNCell(size, size)
        self.norm = nn.LayerNorm(size)

    @matchbox.batch
    def forward(self, x):                                 # (1, T, size)
        n = x.size_as_tensor(1)
        h = x.new_zeros(1, 3)
        states = []
        for t in reversed(range(n)):
            h = self.cell(x[:, t], h)
            states.append(self.norm(h))
        g = x.new_zeros(1, 3)
        for t in range(n - 1, -1, -1):
            g = torch.tanh(g + x[:, t])
        return h + g, sum(states) if states else h * 0


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_backward_scans_over_reversed_ranges(lengths, dtype):
    torch.manual_seed(1)
    check(BackwardScans().to(dtype), dtype, floats(lengths, 3, dtype))


class StridesAndWindows(nn.Module):
    """Every other step (``range(0, n, 2)``) and windows of three steps ``x[:, t:t + 3]``
    (joined with ``torch.cat``: ``w.reshape(1, 9)`` of a slice of a dynamic dimension is
    refused, see ``test_a_window_of_a_dynamic_dimension_reshaped_is_refused``)."""

    def __init__(self, size=3):
        super().__init__()
        self.lin = nn.Linear(3 * size, size)

    @matchbox.batch
    def forward(self, x):
        n = x.size_as_tensor(1)
        every_other = x.new_zeros(1, 3)
        for t in range(0, n, 2):
            every_other = every_other + x[:, t]
        windows = x.new_zeros(1, 3)
        for t in range(n - 2):
            w = x[:, t:t + 3]
            windows = windows + torch.relu(self.lin(torch.cat(w.unbind(1), 1)))
        return every_other, windows


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_strided_steps_and_windows(lengths, dtype):
    torch.manual_seed(2)
    check(StridesAndWindows().to(dtype), dtype, floats(lengths, 3, dtype))


def test_a_window_of_a_dynamic_dimension_reshaped_is_refused():
    lin = nn.Linear(9, 3)

    @matchbox.batch
    def windows(x):
        out = x.new_zeros(1, 3)
        for t in range(x.size_as_tensor(1) - 2):
            out = out + lin(x[:, t:t + 3].reshape(1, 9))
        return out

    with pytest.raises(ValueError, match=r"^Tensor\.reshape: cannot reshape examples of padded "
                                         r"shape \(1, 3, 3\) \(dynamic dims \[1\]\) to \(1, 9\)"):
        windows(floats([5, 3], 3, torch.float32)[1])


class PairedSteps(nn.Module):
    """``enumerate(zip(a, b))`` of two batches of different lengths, a filtered
    comprehension, ``max`` with ``key=`` and ``default=``."""

    def __init__(self, size=3):
        super().__init__()
        self.lin = nn.Linear(size, size)

    @matchbox.batch
    def forward(self, a, b):
        acc = a.new_zeros(1, 3)
        for i, (at, bt) in enumerate(zip(a.unbind(1), b.unbind(1))):
            acc = acc + self.lin(at) * bt * (i + 1)
        hs = [torch.tanh(self.lin(at)) for at in a.unbind(1)]
        positive = [h for h in hs if h.sum() > 0]
        best = max(hs, key=lambda h: h.sum(), default=acc)
        lowest = min(hs, key=lambda h: h.norm(), default=acc)
        return acc, sum(positive) if positive else acc * 0, best + lowest


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_zip_of_two_lengths_filtered_comprehension_and_keyed_max(lengths, dtype):
    torch.manual_seed(3)
    others = [max(0, n - 1) for n in reversed(lengths)] if len(lengths) > 1 else [2]
    check(PairedSteps().to(dtype), dtype, floats(lengths, 3, dtype), floats(others, 3, dtype))


class ConvClassifier(nn.Module):
    """Embedding -> Conv1d -> BatchNorm1d (eval) -> ReLU -> max over time -> Dropout (eval)
    -> Linear -> cross-entropy with label smoothing."""

    def __init__(self, vocab=12, emb=4, channels=5, classes=3, running=True):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.conv = nn.Conv1d(emb, channels, 3, padding=1)
        self.norm = nn.BatchNorm1d(channels, track_running_stats=running)
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(channels, classes)

    def forward(self, tokens, label):
        h = self.conv(self.embed(tokens).transpose(1, 2))   # (1, channels, T)
        h = torch.relu(self.norm(h)).max(2).values
        return F.cross_entropy(self.out(self.drop(h)), label, label_smoothing=0.1)


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)  # the loop's Conv1d refuses an empty sequence
def test_conv_classifier_with_batch_norm_in_eval(lengths, dtype):
    torch.manual_seed(4)
    model = ConvClassifier().to(dtype).eval()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-1, 1)
        model.norm.running_var.uniform_(0.5, 2)
    check(model, dtype, ids(lengths, 12), labels(len(lengths), 3))


class BiLSTMAttentionTagger(nn.Module):
    """Bidirectional LSTM -> self-attention (nn.MultiheadAttention) -> residual LayerNorm
    -> per-token cross-entropy with ``ignore_index`` and label smoothing."""

    def __init__(self, vocab=12, emb=4, hidden=4, tags=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)
        self.attn = nn.MultiheadAttention(2 * hidden, 2, batch_first=True)
        self.norm = nn.LayerNorm(2 * hidden)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens, tags):
        h, _ = self.lstm(self.embed(tokens))
        a, _ = self.attn(h, h, h)
        logits = self.out(self.norm(h + a))                    # (1, T, tags)
        return F.cross_entropy(logits.transpose(1, 2), tags, ignore_index=-100,
                               label_smoothing=0.05)


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)  # the loop's LSTM refuses an empty sequence
def test_bilstm_attention_tagger_with_ignored_tags(lengths, dtype):
    torch.manual_seed(5)
    tags = [torch.randint(0, 3, (1, n)) for n in lengths]
    tags[0][0, 0] = -100  # an ignored tag; a one-length first example has only that
    tag_batch = MaskedBatch.fromlist(tags, (True,), padding_value=7)
    check(BiLSTMAttentionTagger().to(dtype), dtype, ids(lengths, 12), (tags, tag_batch))


class CausalBlock(nn.Module):
    """A pre-norm block: nn.MultiheadAttention with a causal ``attn_mask`` cut to the
    padded length (and its weights), dropout in eval, a GELU feed-forward."""

    def __init__(self, size=4):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.attn = nn.MultiheadAttention(size, 2, batch_first=True, dropout=0.1)
        self.ff = nn.Sequential(nn.Linear(size, 8), nn.GELU(), nn.Dropout(0.2),
                                nn.Linear(8, size))
        self.register_buffer("causal", torch.triu(torch.full((16, 16), float("-inf")), 1))

    def forward(self, x):
        n = matchbox.functional.maxsize(x, 1)
        h = self.norm(x)
        a, weights = self.attn(h, h, h, attn_mask=self.causal[:n, :n], need_weights=True)
        x = x + a
        return x + self.ff(self.norm(x)), weights


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_causal_attention_block_in_eval(lengths, dtype):
    torch.manual_seed(6)
    check(CausalBlock().to(dtype).eval(), dtype, floats(lengths, 4, dtype))


class EncoderMeanPool(nn.Module):
    """nn.TransformerEncoder (through ``run_encoder``) and the mean over positions."""

    def __init__(self, size=8):
        super().__init__()
        layer = nn.TransformerEncoderLayer(size, 2, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return run_encoder(self.encoder, x).mean(1)


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)  # the mean over no position is NaN in the loop
def test_transformer_encoder_mean_pooled(lengths, dtype):
    torch.manual_seed(7)
    check(EncoderMeanPool().to(dtype).eval(), dtype, floats(lengths, 8, dtype))


@matchbox.batch
def dict_step(state, xt, w):
    c = state["c"] + torch.sigmoid(xt @ w)
    return {"h": torch.tanh(c) * state["h"] + xt, "c": c}


class DictAndTupleStates(nn.Module):
    """A loop whose state is a dict updated by another ``@batch`` function, a nested
    ``@batch`` function, and a ``(sum, count)`` tuple updated under a per-example
    condition."""

    def __init__(self, size=3):
        super().__init__()
        self.w = nn.Parameter(torch.randn(size, size) * 0.5)

    @matchbox.batch
    def forward(self, x):
        @matchbox.batch
        def damp(h, xt):
            if xt.sum() > 0:
                return h + xt
            return h * 0.5

        state = {"h": x.new_zeros(1, 3), "c": x.new_ones(1, 3)}
        total = (x.new_zeros(1, 3), 0)
        for xt in x.unbind(1):
            state = dict_step(state, xt, self.w)
            state["h"] = damp(state["h"], xt)
            if xt.sum() > 0:
                total = (total[0] + state["h"], total[1] + 1)
        return state["h"], state["c"], total[0] * total[1]


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_dict_and_tuple_states_with_nested_batch_functions(lengths, dtype):
    torch.manual_seed(8)
    check(DictAndTupleStates().to(dtype), dtype, floats(lengths, 3, dtype))


class TeacherForcedGRU(nn.Module):
    """A GRUCell decoder over ``range(len(steps) - 1)`` with a summed per-step
    cross-entropy whose padding id (0) is ignored."""

    def __init__(self, vocab=6, size=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, size)
        self.cell = nn.GRUCell(size, size)
        self.out = nn.Linear(size, vocab)

    @matchbox.batch
    def forward(self, target):                                  # (1, T) ids
        h = self.embed.weight.new_zeros(1, 4)
        loss = self.embed.weight.new_zeros(1)
        steps = target.unbind(1)
        for t in range(len(steps) - 1):
            h = self.cell(self.embed(steps[t]), h)
            loss = loss + F.cross_entropy(self.out(h), steps[t + 1], ignore_index=0,
                                          reduction="sum")
        return loss


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(WITH_EMPTY)
def test_teacher_forced_gru_decoder(lengths, dtype):
    torch.manual_seed(9)
    check(TeacherForcedGRU().to(dtype), dtype, ids(lengths, 6))


class CTCModel(nn.Module):
    """Linear -> log_softmax -> F.ctc_loss, time first as PyTorch takes one example."""

    def __init__(self, size=3, classes=4):
        super().__init__()
        self.lin = nn.Linear(size, classes)

    def forward(self, x, targets):
        lp = F.log_softmax(self.lin(x), -1)                     # (1, T, classes)
        if isinstance(x, MaskedBatch):
            frames, length = x.size_as_tensor(1).view(1), targets.size_as_tensor(1).view(1)
        else:
            frames, length = torch.tensor([x.size(1)]), torch.tensor([targets.size(1)])
        return F.ctc_loss(lp.transpose(0, 1), targets, frames, length, zero_infinity=True)


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)  # PyTorch refuses an example without time steps
def test_ctc_loss_model(lengths, dtype):
    torch.manual_seed(10)
    targets = [torch.randint(1, 4, (1, max(1, n // 2))) for n in lengths]
    check(CTCModel().to(dtype), dtype, floats(lengths, 3, dtype),
          (targets, MaskedBatch.fromlist(targets, (True,), padding_value=0)))


def test_clipped_gradients_are_the_loops():
    torch.manual_seed(11)
    model = BiLSTMAttentionTagger().double()
    copy_ = copy.deepcopy(model)
    lengths = [3, 5, 1]
    (xs, xb), tags = ids(lengths, 12), [torch.randint(0, 3, (1, n)) for n in lengths]
    for x, y in zip(xs, tags):
        copy_(x, y).backward()
    matchbox.batch_sum(model(xb, MaskedBatch.fromlist(tags, (True,)))).backward()
    norms = [nn.utils.clip_grad_norm_(m.parameters(), 0.5) for m in (copy_, model)]
    torch.testing.assert_close(norms[1], norms[0])
    for a, b in zip(model.parameters(), copy_.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


# ------------------------------------------------------------- what the trial found


@pytest.mark.parametrize("dtype", DTYPES)
@lengths_params(NON_EMPTY)
def test_batch_norm_without_running_statistics_in_eval_is_each_examples_own(lengths, dtype):
    # track_running_stats=False: in eval mode too the module normalises with the input's
    # statistics; the loop's input is one example.  The batch used the whole batch's.
    torch.manual_seed(12)
    model = ConvClassifier(running=False).to(dtype).eval()
    lengths = [n + 1 for n in lengths]  # the loop refuses one value per channel
    check(model, dtype, ids(lengths, 12), labels(len(lengths), 3))


@pytest.mark.compiled_loops  # not run by tox's `oldest` (tox.ini)
def test_compiled_batch_norm_without_running_statistics_in_eval_is_each_examples_own():
    torch.manual_seed(15)
    model = ConvClassifier(running=False).double().eval()
    compiled = matchbox.compile(model, backend="aot_eager", fallback="raise")
    (xs, xb), (ys, yb) = ids([3, 4, 2, 5], 12), labels(4, 3)

    def run(tokens, label):
        return compiled(tokens, label) if isinstance(tokens, MaskedBatch) else model(tokens, label)

    mb_assert(run, [xs, ys], [xb, yb], 4, params=list(model.parameters()))
