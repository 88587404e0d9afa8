"""Small models written the way a PyTorch researcher writes them for ONE example.

Each model is plain PyTorch code for an example of batch size one, ``(1, ...)``: no
Matchbox call in it except the documented convenience methods (``split_dim``,
``join_dims``, ``causal_mask``, ``batch_zeros``, ``size_as_tensor``), which work on
tensors too.  Each test runs the model on a ``MaskedBatch`` and on every example alone
(``mb_assert``: values, input gradients, parameter gradients), with NaN in the float
padding and an out-of-vocabulary id in the integer padding, over ragged lengths,
equal lengths (a batch without padding), batch size one, length one, and length zero
where the per-example code is defined for it; float32 and float64.

One test per model; where a model cannot run on some example in the loop either
(a maximum over an empty sequence, an LSTM over an empty one), that case is left out
and the batch's own error is pinned instead.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from user_batches import NAN, PAD_ID, floats, ids, labels, lengths_params

from matchbox import MaskedBatch
from matchbox.testing import mb_assert

# Per-example lengths: ragged, equal (no padding at all), batch size one, all length one.
LENGTHS = {
    "ragged": [3, 1, 6, 2],
    "equal": [4, 4, 4],
    "one-example": [5],
    "length-one": [1, 1],
}
WITH_EMPTY = {**LENGTHS, "with-empty": [0, 3, 1]}


def check(model, *pairs):
    """``model`` on the batches equals ``model`` on each example, values and gradients."""
    mb_assert(model, [xs for xs, _ in pairs], [xb for _, xb in pairs], len(pairs[0][0]))


# ---------------------------------------------------------------------------- text


class CNNTextClassifier(nn.Module):
    """Embedding -> Conv1d -> ReLU -> max over time -> Linear -> cross-entropy."""

    def __init__(self, vocab=20, emb=8, hidden=6, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.conv = nn.Conv1d(emb, hidden, 3, padding=1)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tokens, label):
        x = self.embed(tokens).transpose(1, 2)     # (1, emb, T)
        h = torch.relu(self.conv(x))                # (1, hidden, T)
        pooled = h.max(dim=2).values                # (1, hidden)
        return F.cross_entropy(self.out(pooled), label)


@lengths_params(LENGTHS)
def test_cnn_text_classifier(lengths, dtype):
    model = CNNTextClassifier().to(dtype)
    check(model, ids(lengths, 20), labels(len(lengths), 3))


def test_cnn_text_classifier_on_an_empty_sentence_is_refused_like_the_loop():
    # max over an empty time dimension raises in the loop; the batch says which example.
    model = CNNTextClassifier()
    _, tokens = ids([0, 3], 20)
    _, label = labels(2, 3)
    with pytest.raises(IndexError, match=r"Tensor.max: example 0 has size 0 in dynamic "
                                         r"dimension 2, and Tensor.max of an empty dimension is "
                                         r"undefined"):
        model(tokens, label)


class KimCNN(nn.Module):
    """Several kernel widths, each max-pooled over time by adaptive pooling, concatenated."""

    def __init__(self, vocab=20, emb=6, maps=4, classes=3, widths=(2, 3, 4)):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(emb, maps, w) for w in widths)
        self.dropout = nn.Dropout(0.5)
        self.out = nn.Linear(maps * len(widths), classes)

    def forward(self, tokens):
        x = self.embed(tokens).transpose(1, 2)
        feats = [F.adaptive_max_pool1d(F.relu(conv(x)), 1).squeeze(2) for conv in self.convs]
        return F.log_softmax(self.out(self.dropout(torch.cat(feats, 1))), dim=-1)


@pytest.mark.parametrize("lengths", [[4, 7, 5], [4, 4], [9]], ids=["ragged", "equal", "one"])
def test_kim_cnn_with_several_kernel_widths(lengths, dtype):
    # From length 4: the widest kernel needs that many positions (the loop raises below).
    check(KimCNN().to(dtype).eval(), ids(lengths, 20))


class CharCNNTagger(nn.Module):
    """Character CNN per word (a 1 x 3 Conv2d over words x characters), max over chars."""

    def __init__(self, chars=15, emb=5, hidden=4, tags=2):
        super().__init__()
        self.embed = nn.Embedding(chars, emb, padding_idx=0)
        self.conv = nn.Conv2d(emb, hidden, (1, 3), padding=(0, 1))
        self.out = nn.Linear(hidden, tags)

    def forward(self, chars):                                 # (1, words, characters)
        x = self.embed(chars).permute(0, 3, 1, 2)             # (1, emb, words, characters)
        h = torch.relu(self.conv(x)).amax(3)                  # (1, hidden, words)
        return self.out(h.transpose(1, 2)).log_softmax(-1)   # (1, words, tags)


@pytest.mark.parametrize("shapes", [[(3, 4), (1, 2), (5, 1)], [(2, 2), (2, 2)], [(4, 6)]],
                         ids=["ragged", "equal", "one-example"])
def test_char_cnn_over_two_dynamic_dims(shapes, dtype):
    # Words and characters both vary; within an example, short words hold the pad char 0.
    xs = [torch.randint(0, 15, (1, words, length)) for words, length in shapes]
    check(CharCNNTagger().to(dtype), (xs, MaskedBatch.fromlist(xs, (True, True),
                                                               padding_value=PAD_ID)))


class BiLSTMTagger(nn.Module):
    """Embedding -> bidirectional LSTM -> Linear -> per-token cross-entropy (ignore_index)."""

    def __init__(self, vocab=20, emb=8, hidden=5, tags=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=0)
        self.lstm = nn.LSTM(emb, hidden, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens, tags):
        h, _ = self.lstm(self.embed(tokens))        # (1, T, 2 * hidden)
        logits = self.out(h)                         # (1, T, tags)
        return F.cross_entropy(logits.transpose(1, 2), tags, ignore_index=-100)


@lengths_params(LENGTHS)
def test_bilstm_tagger(lengths, dtype):
    # No empty sentence: PyTorch's LSTM refuses a zero-length sequence in the loop.
    tags = [torch.randint(0, 4, (1, n)) for n in lengths]
    for t in tags:
        t[0, ::3] = -100  # some tokens carry no tag
    tag_batch = MaskedBatch.fromlist(tags, (True,), padding_value=7)
    check(BiLSTMTagger().to(dtype), ids(lengths, 20), (tags, tag_batch))


class BiLSTMClassifier(nn.Module):
    """Sentence classifier from the last forward and the first backward LSTM output."""

    def __init__(self, vocab=20, emb=6, hidden=5, classes=3):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, classes)

    def forward(self, tokens, label):
        out, _ = self.lstm(self.embed(tokens))
        feat = torch.cat([out[:, -1, :self.hidden], out[:, 0, self.hidden:]], dim=-1)
        return F.cross_entropy(self.out(feat), label, reduction="sum")


@lengths_params(LENGTHS)
def test_bilstm_classifier_from_the_output_ends(lengths, dtype):
    check(BiLSTMClassifier().to(dtype).eval(), ids(lengths, 20), labels(len(lengths), 3))


class FinalStateClassifier(nn.Module):
    """Sentence classifier from the LSTM's final states: h_n[-1], or both directions'."""

    def __init__(self, vocab=20, emb=6, hidden=5, classes=3, bidirectional=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, bidirectional=bidirectional,
                            batch_first=True)
        self.out = nn.Linear((2 if bidirectional else 1) * hidden, classes)

    def forward(self, tokens, label):
        _, (h, _) = self.lstm(self.embed(tokens))           # h: (layers * dirs, 1, hidden)
        if self.lstm.bidirectional:
            feat = torch.cat([h[-2], h[-1]], dim=1)          # (1, 2 * hidden)
        else:
            feat = h[-1]                                     # (1, hidden)
        return F.cross_entropy(self.out(feat), label, reduction="sum")


@pytest.mark.parametrize("bidirectional", [False, True], ids=["h[-1]", "cat(h[-2], h[-1])"])
@lengths_params(LENGTHS)
def test_classifier_on_the_lstm_final_states(lengths, bidirectional, dtype):
    # The final states are views whose examples are the loop's (layers * dirs, 1, hidden).
    check(FinalStateClassifier(bidirectional=bidirectional).to(dtype).eval(), ids(lengths, 20),
          labels(len(lengths), 3))


class GRUSeq2SeqLoss(nn.Module):
    """GRU encoder -> GRU decoder with teacher forcing; summed NLL and smoothed CE."""

    def __init__(self, vocab=11, size=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, size, padding_idx=0)
        self.encoder = nn.GRU(size, size, batch_first=True)
        self.decoder = nn.GRU(size, size, batch_first=True)
        self.out = nn.Linear(size, vocab)

    def forward(self, source, target_in, target_out):
        _, state = self.encoder(self.embed(source))            # (1, 1, size)
        states, _ = self.decoder(self.embed(target_in), state)
        logits = self.out(states).transpose(1, 2)               # (1, vocab, T)
        nll = F.nll_loss(F.log_softmax(logits, 1), target_out, ignore_index=0, reduction="sum")
        smoothed = F.cross_entropy(logits, target_out, label_smoothing=0.2, ignore_index=0)
        return nll, smoothed


@pytest.mark.parametrize("pairs", [[(3, 4), (1, 2), (6, 1)], [(2, 2), (2, 2)], [(2, 5)]],
                         ids=["ragged", "equal", "one-example"])
def test_gru_seq2seq_loss_with_label_smoothing(pairs, dtype):
    sources = [torch.randint(1, 11, (1, s)) for s, _ in pairs]
    targets = [torch.randint(1, 11, (1, t + 1)) for _, t in pairs]
    targets[0][0, -1] = 0  # a padding token inside an example: ignored by both losses
    ins, outs = [t[:, :-1] for t in targets], [t[:, 1:] for t in targets]
    check(GRUSeq2SeqLoss().to(dtype), *[(xs, MaskedBatch.fromlist(xs, (True,), padding_value=-5))
                                        for xs in (sources, ins, outs)])


class ShiftedLanguageModel(nn.Module):
    """Next-token model: inputs and targets sliced from one sequence, causal conv by F.pad."""

    def __init__(self, vocab=12, size=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, size)
        self.conv = nn.Conv1d(size, size, 2)
        self.lstm = nn.LSTM(size, size, batch_first=True)
        self.out = nn.Linear(size, vocab)

    def forward(self, sequence):
        inputs, targets = sequence[:, :-1], sequence[:, 1:]
        h = self.embed(inputs)
        c = self.conv(F.pad(h.transpose(1, 2), (1, 0))).transpose(1, 2)   # sees no future
        states, _ = self.lstm(c + h)
        logits = self.out(states)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="sum")
        accuracy = (logits.argmax(-1) == targets).to(h.dtype).mean(1)
        return nll, accuracy, F.mse_loss(c, h, reduction="none").mean(-1)


@pytest.mark.parametrize("lengths", [[4, 2, 7], [3, 3], [5], [2, 2]],
                         ids=["ragged", "equal", "one-example", "one-step"])
def test_shifted_language_model(lengths, dtype):
    # From length 2: one input and one target token (the LSTM refuses an empty input).
    check(ShiftedLanguageModel().to(dtype), ids(lengths, 12))


class MultiTaskLoss(nn.Module):
    """Two heads on a mean-pooled encoding; per-example losses added with weights."""

    def __init__(self, size=4, classes=3):
        super().__init__()
        self.encode = nn.Linear(size, size)
        self.classify = nn.Linear(size, classes)
        self.regress = nn.Linear(size, 1)

    def forward(self, x, label, value):
        h = F.relu(self.encode(x)).mean(1)
        classification = F.cross_entropy(self.classify(h), label)
        regression = F.smooth_l1_loss(self.regress(h).squeeze(-1), value)
        return sum([classification, 0.5 * regression]), classification - regression


@lengths_params(LENGTHS)
def test_multi_task_loss(lengths, dtype):
    values = [torch.randn(1, dtype=dtype) for _ in lengths]
    check(MultiTaskLoss().to(dtype), floats(lengths, 4, dtype), labels(len(lengths), 3),
          (values, MaskedBatch.fromlist(values, ())))


class EmbeddingBagClassifier(nn.Module):
    """Mean and max bags of the ids -> Linear -> per-example cross-entropy."""

    def __init__(self, vocab=30, size=6, classes=3):
        super().__init__()
        self.mean_bag = nn.EmbeddingBag(vocab, size, mode="mean")
        self.max_bag = nn.EmbeddingBag(vocab, size, mode="max")
        self.out = nn.Linear(2 * size, classes)

    def forward(self, tokens, label):
        h = torch.cat([self.mean_bag(tokens), self.max_bag(tokens)], dim=-1)
        return F.cross_entropy(self.out(h), label, reduction="none")


@lengths_params(LENGTHS)
def test_embedding_bag_classifier(lengths, dtype):
    check(EmbeddingBagClassifier().to(dtype), ids(lengths, 30), labels(len(lengths), 3))


class MaskedMeanPooling(nn.Module):
    """Mean of the embeddings of the non-pad tokens (a corpus padded per sentence)."""

    def __init__(self, vocab=12, size=5, pad=0):
        super().__init__()
        self.pad = pad
        self.embed = nn.Embedding(vocab, size, padding_idx=pad)
        self.proj = nn.Linear(size, size)

    def forward(self, tokens):
        keep = (tokens != self.pad).unsqueeze(-1).to(self.proj.weight.dtype)  # (1, T, 1)
        h = torch.tanh(self.proj(self.embed(tokens)))
        summed = (h * keep).sum(dim=1)
        count = keep.sum(dim=1).clamp(min=1)
        return summed / count, h.mean(dim=1)


@lengths_params(WITH_EMPTY)
def test_masked_mean_pooling(lengths, dtype):
    xs, xb = ids(lengths, 12)
    for x in xs:
        x[:, -1:] = 0  # the sentence's own trailing pad token
    check(MaskedMeanPooling().to(dtype), (xs, MaskedBatch.fromlist(xs, (True,),
                                                                   padding_value=PAD_ID)))


# ---------------------------------------------------------------------------- attention by hand


class AttentionPooling(nn.Module):
    """scores = x @ w, softmax over the positions, weighted sum; three ways to write it."""

    def __init__(self, size=6, form="matmul"):
        super().__init__()
        self.form = form
        self.w = nn.Parameter(torch.randn(size))
        self.proj = nn.Linear(size, size)

    def forward(self, x):                                   # (1, T, size)
        values = torch.tanh(self.proj(x))
        if self.form == "matmul":
            alpha = torch.softmax(x @ self.w.unsqueeze(-1), dim=1)      # (1, T, 1)
            return (alpha * values).sum(1)
        if self.form == "bmm":
            alpha = F.softmax(torch.matmul(x, self.w), -1)              # (1, T)
            return torch.bmm(alpha.unsqueeze(1), values).squeeze(1)
        alpha = torch.einsum("btd,d->bt", x, self.w).softmax(-1)
        return torch.einsum("bt,btd->bd", alpha, values)


@pytest.mark.parametrize("form", ["matmul", "bmm", "einsum"])
@lengths_params(WITH_EMPTY)
def test_attention_pooling(form, lengths, dtype):
    check(AttentionPooling(form=form).to(dtype), floats(lengths, 6, dtype))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written with core ops (not F.sdpa)."""

    def __init__(self, size=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(size, 3 * size)
        self.out = nn.Linear(size, size)

    def forward(self, x):                                   # (1, T, size)
        q, k, v = (t.split_dim(-1, t.size(-1) // self.heads).transpose(1, 2)  # (1, heads, T, d)
                   for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5         # (1, heads, T, T)
        weights = F.softmax(scores.causal_mask(in_dim=3, out_dim=2), dim=-1)
        return self.out((weights @ v).transpose(1, 2).join_dims(-2, -1))


@lengths_params(LENGTHS)
def test_causal_self_attention_by_hand(lengths, dtype):
    # No empty example: a (T, T) score matrix has two dynamic dims (a core limit).
    check(CausalSelfAttention().to(dtype), floats(lengths, 8, dtype))


class SpanExtractor(nn.Module):
    """Extractive QA head: start/end logits over the positions (a dynamic class dim)."""

    def __init__(self, size=6):
        super().__init__()
        self.encoder = nn.GRU(size, size, batch_first=True, bidirectional=True)
        self.start = nn.Linear(2 * size, 1)
        self.end = nn.Linear(2 * size, 1)

    def forward(self, x, start, end):
        h, _ = self.encoder(x)
        start_logits = self.start(h).squeeze(-1)                 # (1, T): one class per position
        end_logits = self.end(h).squeeze(-1)
        loss = F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)
        return loss, start_logits.argmax(-1), F.log_softmax(end_logits, -1)


@lengths_params(LENGTHS)
def test_span_extractor_over_a_dynamic_class_dim(lengths, dtype):
    positions = [[torch.randint(0, n, (1,)) for n in lengths] for _ in range(2)]
    check(SpanExtractor().to(dtype).eval(), floats(lengths, 6, dtype),
          *[(p, MaskedBatch.fromlist(p, ())) for p in positions])


class CrossAttentionSimilarity(nn.Module):
    """Attend from one sequence to another of its own length; cosine of each to its context."""

    def __init__(self, size=5):
        super().__init__()
        self.query = nn.Linear(size, size)
        self.key = nn.Linear(size, size)

    def forward(self, a, b):                                  # (1, Ta, size), (1, Tb, size)
        scores = self.query(a) @ self.key(b).transpose(1, 2) / a.size(-1) ** 0.5
        attention = scores.softmax(-1)                        # (1, Ta, Tb)
        context = attention @ b
        cosine = (a * context).sum(-1) / (a.norm(dim=-1) * context.norm(dim=-1) + 1e-6)
        return cosine.mean(1), attention.sum(1)


@pytest.mark.parametrize("lengths", [([3, 1, 6], [2, 4, 1]), ([2, 2], [3, 3]), ([4], [1])],
                         ids=["ragged", "equal", "one-example"])
def test_cross_attention_between_two_sequences(lengths, dtype):
    # No empty example: a (Ta, Tb) score matrix has two dynamic dims (a core limit).
    check(CrossAttentionSimilarity().to(dtype), *[floats(n, 5, dtype) for n in lengths])


# ---------------------------------------------------------------------------- images


class ImageCNN(nn.Module):
    """Conv -> pool -> strided conv -> adaptive pool to 2x2 -> flatten -> classifier."""

    def __init__(self, channels=3, hidden=4, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, hidden, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden, hidden, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(hidden * 4, classes)

    def forward(self, image, label):
        h = F.max_pool2d(F.relu(self.conv1(image)), 2, ceil_mode=True)
        h = self.pool(F.gelu(self.conv2(h)))
        h = h.view(h.size(0), -1)                               # the flatten idiom
        return F.cross_entropy(self.fc(h), label, label_smoothing=0.1)


class ImageGlobalPool(nn.Module):
    """Global max (adaptive pooling) and mean over height and width, concatenated."""

    def __init__(self, channels=3, hidden=4, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(channels, hidden, 3)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, image):
        h = torch.tanh(self.conv(image))
        peak = F.adaptive_max_pool2d(h, 1).flatten(1)
        mean = h.mean(dim=(2, 3))
        return self.fc(torch.cat([peak, mean], dim=1))


SIZES = {
    "ragged": [(5, 7), (3, 3), (9, 4)],
    "equal": [(4, 6), (4, 6)],
    "one-example": [(6, 6)],
}


def images(sizes, dtype):
    xs = [torch.randn(1, 3, h, w, dtype=dtype) for h, w in sizes]
    return xs, MaskedBatch.fromlist(xs, (False, True, True), padding_value=NAN)


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
def test_image_cnn_with_adaptive_pooling(sizes, dtype):
    check(ImageCNN().to(dtype), images(sizes, dtype), labels(len(sizes), 5))
    check(ImageCNN().to(dtype), images([(1, 1), (2, 5)], dtype), labels(2, 5))


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
def test_image_global_max_and_mean_pooling(sizes, dtype):
    check(ImageGlobalPool().to(dtype), images(sizes, dtype))


# ---------------------------------------------------------------------------- token MLPs


class PreNormBlock(nn.Module):
    """LayerNorm -> GELU MLP with residuals over tokens; mean-pooled sentence vector."""

    def __init__(self, size=8):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.up = nn.Linear(size, 4 * size)
        self.down = nn.Linear(4 * size, size)
        self.final = nn.LayerNorm(size, elementwise_affine=False)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        h = x + self.dropout(self.down(F.gelu(self.up(self.norm(x)), approximate="tanh")))
        h = h + 0.5 * F.silu(h)
        h = self.final(h)
        return h.mean(1), h


@lengths_params(WITH_EMPTY)
def test_pre_norm_mlp_block_with_residuals(lengths, dtype):
    # eval: dropout draws differ from the loop's in training (documented).
    check(PreNormBlock().to(dtype).eval(), floats(lengths, 8, dtype))


class ShapeMixer(nn.Module):
    """Static and dynamic dims through cat/stack/permute/reshape/split/indexing."""

    def __init__(self, size=6):
        super().__init__()
        self.size = size
        self.mix = nn.Linear(2 * size, size)
        self.positions = nn.Parameter(torch.randn(1, 16, size))

    def forward(self, x):                                       # (1, T, size)
        x = x + self.positions[:, : x.maxsize(1)]                # learned positions
        y = self.mix(torch.cat([x, 2 * x], dim=2))               # (1, T, size)
        z = torch.stack([y, x], dim=1)                           # (1, 2, T, size)
        z = z.permute(0, 2, 1, 3).reshape(1, -1, 2 * self.size)  # (1, T, 2 * size)
        a, b = z.split(self.size, dim=-1)
        w = (a.unsqueeze(2) * b.unsqueeze(2)).squeeze(2)         # (1, T, size)
        w = w.contiguous().view(1, -1, 2, self.size // 2).flatten(2)
        first, rest, last = x[:, :1], x[:, 1:], x[:, -1]
        return (w.transpose(1, 2).sum(-1) + first.sum(1) + rest.sum(1) + last,
                x[:, :, 0], x[..., -2:], z.unbind(2)[0])


@lengths_params(WITH_EMPTY)
def test_shape_mixer_of_static_and_dynamic_dims(lengths, dtype):
    if 0 in lengths:
        lengths = [n for n in lengths if n]  # x[:, -1] of an empty example is undefined
    check(ShapeMixer().to(dtype), floats(lengths, 6, dtype))


class SequenceStatistics(nn.Module):
    """A grab bag of per-example features: sizes, constructors, where/clamp, reductions."""

    def __init__(self, size=5):
        super().__init__()
        self.proj = nn.Linear(size, size)

    def forward(self, x):                                   # (1, T, size)
        h = self.proj(x)
        length = x.size_as_tensor(1)                          # a per-example scalar
        mean = h.sum(1) / length.clamp(min=1)
        state = x.batch_zeros(x.size(-1)) + x.new_zeros(x.size(0), x.size(-1))
        g = torch.where(h > 0, h, 0.1 * h).clamp(-1.0, 2.0)
        return (mean + state + torch.logsumexp(g, dim=1),
                g.std(dim=1, keepdim=True), torch.var(g, dim=-1, unbiased=False),
                g.argmax(dim=1), g.sum(-1).argmax(-1),
                torch.einsum("btd,bte->bde", g, x), length)


# std over one position is NaN (with PyTorch's warning) in the loop and on the batch alike.
@pytest.mark.filterwarnings("ignore:std\\(\\).*degrees of freedom:UserWarning")
@lengths_params(LENGTHS)
def test_sequence_statistics(lengths, dtype):
    # No empty example: argmax over an empty dimension raises in the loop.
    check(SequenceStatistics().to(dtype), floats(lengths, 5, dtype))


# ---------------------------------------------------------------------------- hypothesis


HYPOTHESIS_MODELS = {
    "attention-pooling": lambda: AttentionPooling(size=6, form="einsum"),
    "pre-norm-block": lambda: PreNormBlock(size=6).eval(),
    "shape-mixer": lambda: ShapeMixer(size=6),
    "sequence-statistics": lambda: SequenceStatistics(size=6),
    "causal-self-attention": lambda: CausalSelfAttention(size=6, heads=3),
}


@pytest.mark.filterwarnings("ignore:std\\(\\).*degrees of freedom:UserWarning")
@pytest.mark.parametrize("name", list(HYPOTHESIS_MODELS))
@settings(max_examples=10)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=5),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_models_on_drawn_lengths(name, lengths, dtype):
    check(HYPOTHESIS_MODELS[name]().to(dtype), floats(lengths, 6, dtype))
