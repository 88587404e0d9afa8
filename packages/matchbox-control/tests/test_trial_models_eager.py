"""A user trial of eager ``@matchbox.batch``: small models written for one example, as a
researcher writes them, run on a batch against the loop over examples (values and
gradients, of the inputs and of the shared weights), in float32 and float64, with empty
and one-step examples, a batch of one, and NaN padding (``control_cases.sequences``).

The first tests pin what the trial found: a merge under the user's ``torch.no_grad()``
(an assignment, a ``return``, a loop's state) cut the gradient of what it merged, for
every example (``runtime/grad_kept.py``).  Layers are plain matmuls (no matchbox-nn)."""

from __future__ import annotations

import pytest
import torch
from control_cases import assert_batch_equals_loop, sequences

import matchbox
from matchbox import MaskedBatch

DTYPES = [torch.float32, torch.float64]
LENGTHS = [(3, 0, 1, 5), (1,), (0,), (2, 2)]
D = 3


def tolerances(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}


def shared(weight: torch.Tensor, n: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [weight] * n, weight


def weight(*shape: int, dtype: torch.dtype, scale: float = 0.7) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype) * scale


def check(f, lengths, dtype, *weights, size: int = D) -> None:
    """``f(x, *weights)`` on sequences of ``lengths`` equals the loop."""
    n = len(lengths)
    assert_batch_equals_loop(f, sequences(lengths, size, dtype),
                             *[shared(w, n) for w in weights], **tolerances(dtype))


# --- merges under the user's no_grad keep the gradient (found by this trial) ---------


@matchbox.batch
def assigned_under_no_grad(x):
    h = x * 2
    with torch.no_grad():
        if x.sum() > 0:
            h = h * 3  # the examples that skip this keep h, and its gradient
    return h


@matchbox.batch
def chosen_under_no_grad(x):
    h = x * 2
    with torch.no_grad():
        y = h if x.sum() > 0 else h * 0
        if x.sum() > 1:
            z = h
        else:
            z = h + 1
    return y, z


@matchbox.batch
def loop_state_under_no_grad(x):
    h = x * 2
    with torch.no_grad():
        for _ in range(2):
            if x.sum() > 0:
                break
            h = h - 1
    return h


@matchbox.batch
def returned_under_no_grad(x, w):
    h = x.new_zeros(1, D)
    for xt in x.unbind(1):
        with torch.no_grad():
            g = (xt @ w).sum()
            if g > 1:
                return h  # in the loop: h itself, with its history
        h = h + xt * g
    return h * 2


@matchbox.batch
def grad_on_again_under_no_grad(x):
    h = x * 2
    with torch.no_grad():
        if x.sum() > 0:
            with torch.enable_grad():
                h = h.sqrt()  # NaN for the examples that skip it: guarded
    return h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("f", [assigned_under_no_grad, chosen_under_no_grad,
                               loop_state_under_no_grad, grad_on_again_under_no_grad])
def test_a_merge_under_no_grad_keeps_the_gradient(f, dtype):
    xs = [torch.tensor([[1.0, 2.0]], dtype=dtype), torch.tensor([[-1.0, -2.0]], dtype=dtype),
          torch.tensor([[0.5, 0.25]], dtype=dtype)]
    assert_batch_equals_loop(f, (xs, MaskedBatch.fromlist(xs, (False,))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5, 6), (6,), (0,)])
def test_a_return_under_no_grad_keeps_the_gradient(lengths, dtype):
    torch.manual_seed(0)
    check(returned_under_no_grad, lengths, dtype, weight(D, D, dtype=dtype))


@matchbox.batch
def items_read_under_no_grad(x):
    hs = [xt * 2 for xt in x.unbind(1)]
    n = 0
    with torch.no_grad():
        last = hs[-1] if hs else x.sum(1)  # in the loop: the item itself
        largest = max(hs, key=lambda h: h.sum()) if hs else x.sum(1)
        while n < len(hs) and hs[n].sum() < 0:
            n += 1
        first = hs[n] if n < len(hs) else x.sum(1)
        either = max(last.sum(1), first.sum(1))
    return last, largest, first, either


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5, 6), (1,), (0,)])
def test_items_read_under_no_grad_keep_the_gradient(lengths, dtype):
    torch.manual_seed(11)
    check(items_read_under_no_grad, lengths, dtype)


def test_a_call_under_no_grad_or_inference_mode_builds_no_graph():
    # The merges run with gradients on only to keep a history that exists: a call made
    # with gradients off (evaluation) records nothing, as the loop does.
    xs = [torch.tensor([[1.0]], requires_grad=True), torch.tensor([[-1.0]], requires_grad=True)]
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            batch = MaskedBatch.fromlist(xs, (False,))
            out = loop_state_under_no_grad(batch)
        assert not out.requires_grad
        assert [e.tolist() for e in out.examples()] == [[[2.0]], [[-4.0]]]


# --- structured prediction --------------------------------------------------------------

K = 4


@matchbox.batch
def crf_log_partition(x, trans):
    alpha = torch.zeros(1, trans.size(0), dtype=x.dtype)
    for xt in x.unbind(1):
        alpha = torch.logsumexp(alpha.unsqueeze(2) + trans, 1) + xt
    return torch.logsumexp(alpha, 1)


@matchbox.batch
def viterbi(x, trans):
    score = torch.zeros(1, trans.size(0), dtype=x.dtype)
    backs = []
    for xt in x.unbind(1):
        best, idx = (score.unsqueeze(2) + trans).max(1)
        backs.append(idx)
        score = best + xt
    best_score, tag = score.max(1)
    path = [tag]
    for bp in reversed(backs):
        tag = bp.gather(1, tag.unsqueeze(1)).squeeze(1)
        path.append(tag)
    path = path[::-1]
    return best_score, torch.stack(path, 1), len(path)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("f", [crf_log_partition, viterbi])
def test_crf(f, lengths, dtype):
    torch.manual_seed(1)
    check(f, lengths, dtype, weight(K, K, dtype=dtype, scale=1.0), size=K)


@matchbox.batch
def soft_edit_distance(a, b):
    steps = b.unbind(1)
    prev = [a.new_zeros(1, 1)]
    for _ in steps:
        prev.append(prev[-1] + 1)
    for ai in a.unbind(1):
        cur = [prev[0] + 1]
        for j, bj in enumerate(steps):
            cost = ((ai - bj) ** 2).sum(1, keepdim=True)
            cur.append(torch.minimum(torch.minimum(prev[j + 1] + 1, cur[j] + 1),
                                     prev[j] + cost))
        prev = cur
    return prev[-1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [((3, 0, 1, 2), (2, 2, 0, 3)), ((1,), (1,)), ((0,), (2,))])
def test_edit_distance_over_two_sequences(lengths, dtype):
    torch.manual_seed(2)
    assert_batch_equals_loop(soft_edit_distance, sequences(lengths[0], D, dtype),
                             sequences(lengths[1], D, dtype), **tolerances(dtype))


# --- decoding and routing ------------------------------------------------------------------


@matchbox.batch
def greedy_decode(h, w, emb, u):
    scores = []
    for _ in range(6):
        logits = h @ w
        tok = logits.argmax(1)
        if tok == 0:
            break
        scores.append(logits.max(1).values)
        h = torch.tanh(emb[tok] + h @ u)
    return h, len(scores), sum(scores) if scores else h.sum(1) * 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [6, 1])
def test_greedy_decoding_stops_per_example(n, dtype):
    torch.manual_seed(3)
    hs = [torch.randn(1, D, dtype=dtype) for _ in range(n)]
    weights = [weight(D, 3, dtype=dtype), weight(3, D, dtype=dtype), weight(D, D, dtype=dtype)]
    assert_batch_equals_loop(greedy_decode, (hs, MaskedBatch.fromlist(hs, (False,))),
                             *[shared(w, n) for w in weights], **tolerances(dtype))


@matchbox.batch
def span_sum(x, ws, we):
    s = (x @ ws).squeeze(2)
    e = (x @ we).squeeze(2)
    start, end = s.argmax(1), e.argmax(1)
    if end < start:
        start, end = end, start
    steps = []
    for t, xt in enumerate(x.unbind(1)):
        if t >= start and t <= end:
            steps.append(xt)
    return torch.stack(steps, 1).sum(1), s[:, start] + e[:, end], end - start


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 1, 5, 6), (1,), (4,)])
def test_span_extraction(lengths, dtype):
    torch.manual_seed(4)
    check(span_sum, lengths, dtype, weight(D, 1, dtype=dtype), weight(D, 1, dtype=dtype))


@matchbox.batch
def mixture_of_experts(x, wg, w0, w1, w2):
    h = x.sum(1)
    gate = h @ wg
    g = gate.argmax(1)
    if g == 0:
        y = h @ w0
    elif g == 1:
        y = torch.tanh(h @ w1)
    else:
        y = torch.relu(h @ w2) + gate[:, g]
    return y


@matchbox.batch
def early_exit(x, w0, w1, w2):
    h = x.sum(1)
    for i, w in enumerate([w0, w1, w2]):
        h = torch.tanh(h @ w)
        if torch.sigmoid(h.sum(1)) > 0.6:
            return h, i
    return h, 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5, 2, 2, 4), (1,), (0,)])
def test_routing(lengths, dtype):
    torch.manual_seed(5)
    check(mixture_of_experts, lengths, dtype, weight(D, 3, dtype=dtype),
          *[weight(D, D, dtype=dtype) for _ in range(3)])
    check(early_exit, lengths, dtype, *[weight(D, D, dtype=dtype) for _ in range(3)])


@matchbox.batch
def residual_depth(h, w, n):
    if n <= 0:
        return h
    return residual_depth(torch.tanh(h @ w) + h, w, n - 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depths", [(3, 0, 1, 5), (1,), (0,)])
def test_recursion_depth_per_example(depths, dtype):
    torch.manual_seed(6)
    hs = [torch.randn(1, D, dtype=dtype) for _ in depths]
    ns = [torch.tensor([d]) for d in depths]
    assert_batch_equals_loop(residual_depth, (hs, MaskedBatch.fromlist(hs, (False,))),
                             shared(weight(D, D, dtype=dtype), len(depths)),
                             (ns, MaskedBatch.fromlist(ns, ())), **tolerances(dtype))


# --- encoders and losses -----------------------------------------------------------------


@matchbox.batch
def char_words_rnn(x, wc, wh, wx):
    h = torch.zeros(1, wh.size(0), dtype=x.dtype)
    for word in x.unbind(1):
        bigrams = torch.cat([word[:, :-1], word[:, 1:]], 2)
        h = torch.tanh(h @ wh + torch.tanh(bigrams @ wc).sum(1) @ wx)
    return h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", [((3, 2), (0, 0), (1, 1), (2, 4), (2, 0)), ((1, 3),), ((0, 0),)])
def test_char_bigrams_then_a_word_rnn(sizes, dtype):
    torch.manual_seed(7)
    words = [torch.randn(1, nw, nc, D, dtype=dtype) for nw, nc in sizes]
    batch = MaskedBatch.fromlist(words, (True, True, False), padding_value=float("nan"))
    n = len(sizes)
    assert_batch_equals_loop(char_words_rnn, (words, batch),
                             shared(weight(2 * D, 5, dtype=dtype), n),
                             shared(weight(4, 4, dtype=dtype), n),
                             shared(weight(5, 4, dtype=dtype), n), **tolerances(dtype))


@matchbox.batch
def dilated_causal_stack(x, w0, w1, w2):
    h = x
    for i, w in enumerate([w0, w1, w2]):
        d = 2 ** i
        shifted = torch.cat([torch.zeros(1, d, h.size(2), dtype=h.dtype), h], 1)[:, :-d]
        h = h + torch.tanh(torch.cat([shifted, h], 2) @ w)
    return h, h.sum(1)


@matchbox.batch
def masked_lm_loss(x, targets, w1, w2, mask_embedding):
    masked = x[:, :, 0] > 0.3
    inputs = torch.where(masked.unsqueeze(2), mask_embedding, x)
    logits = torch.tanh(inputs @ w1) @ w2
    log_probs = logits - torch.logsumexp(logits, 2, keepdim=True)
    nll = -log_probs.gather(2, targets.unsqueeze(2)).squeeze(2)
    m = masked.to(x.dtype)
    return (nll * m).sum(1) / m.sum(1).clamp(min=1), nll.sum(1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5, 6), (1,), (0,)])
def test_encoders_and_losses(lengths, dtype):
    torch.manual_seed(8)
    check(dilated_causal_stack, lengths, dtype,
          *[weight(2 * D, D, dtype=dtype, scale=0.5) for _ in range(3)])
    n = len(lengths)
    targets = [torch.randint(0, 5, (1, t)) for t in lengths]
    assert_batch_equals_loop(
        masked_lm_loss, sequences(lengths, D, dtype),
        (targets, MaskedBatch.fromlist(targets, (True,), padding_value=-100)),
        shared(weight(D, 4, dtype=dtype), n), shared(weight(4, 5, dtype=dtype), n),
        shared(weight(D, dtype=dtype), n), **tolerances(dtype))


@matchbox.batch
def attention_decoder(src, tgt, we, wd, wo):
    enc = torch.tanh(src @ we)
    h = enc.sum(1)
    loss = 0
    for yt in tgt.unbind(1):  # teacher forcing
        scores = (enc @ h.unsqueeze(2)).squeeze(2)
        a = torch.exp(scores - torch.logsumexp(scores, 1, keepdim=True))
        h = torch.tanh(torch.cat([h, (a.unsqueeze(2) * enc).sum(1), yt], 1) @ wd)
        loss = loss + ((h @ wo - yt) ** 2).sum(1)
    return loss, h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [((3, 0, 1, 2), (2, 2, 0, 3)), ((0,), (2,)), ((2,), (0,))])
def test_attention_decoder_with_teacher_forcing(lengths, dtype):
    torch.manual_seed(9)
    n = len(lengths[0])
    assert_batch_equals_loop(attention_decoder, sequences(lengths[0], D, dtype),
                             sequences(lengths[1], D, dtype),
                             shared(weight(D, 4, dtype=dtype), n),
                             shared(weight(8 + D - 3 + 3, 4, dtype=dtype), n),
                             shared(weight(4, D, dtype=dtype), n), **tolerances(dtype))


@matchbox.batch
def running_statistics(x):
    s = x.sum(2)
    c = s.cumsum(1)
    top, order = s.sort(1, descending=True)
    mean = torch.zeros(1, x.size(2), dtype=x.dtype)
    n = 0
    for xt in x.unbind(1):
        n = n + 1
        mean = mean + (xt - mean) / n
    out = (c * s.cummax(1).values).sum(1) + torch.logcumsumexp(s, 1).sum(1)
    if len(x.unbind(1)) >= 2:
        out = out + s.topk(2, 1).values.sum(1)
    return out, order, top, mean, n, s.flip(1) * c


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", [(3, 0, 1, 5, 6), (1,), (0,)])
def test_running_statistics(lengths, dtype):
    torch.manual_seed(10)
    check(running_statistics, lengths, dtype)
