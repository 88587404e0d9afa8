"""``@batch`` functions compiled: ``matchbox.compile`` (loops unrolled in one graph) and
``torch.compile`` (which runs Matchbox eagerly), both equal to eager and to the loop.

``matchbox.compile`` graphs run with ``backend="aot_eager"`` here (PyTorch's kernels,
the backward pass derived as inductor's is); ``packages/matchbox-core/tests/test_compile.py`` runs
inductor too.
"""

from __future__ import annotations

import pytest
import torch
from control_cases import (
    assert_batch_equals_loop,
    compiled_for_batches,
    doubling,
    jax_oracle,
    per_example,
    scalars,
    scans_expected,
    sequences,
)

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.testing import mb_assert

# matchbox.compile over loops: not run by tox's `oldest` (tox.ini, marker compiled_loops).
pytestmark = pytest.mark.compiled_loops

BACKEND = "aot_eager"


def assert_captured(run):
    """Every call ran a compiled graph (none fell back to eager)."""
    assert [s.eager_reason for s in run.compiled.specializations] == [None] * len(
        run.compiled.specializations)


def test_oracle_while():
    examples, batch = scalars([0, 1, 2, 3])
    run = compiled_for_batches(jax_oracle)
    assert per_example(run(batch)) == [4, 3, 4, 3]
    assert_captured(run)


def test_while_values_gradients_and_counter(dtype):
    run = compiled_for_batches(doubling)
    assert_batch_equals_loop(run, scalars([0.1, 3.0, 12.0, -1.0, 0.0], dtype))
    assert_captured(run)
    assert [s.scans for s in run.compiled.specializations] == [0]  # unrolled by default


def test_a_while_as_a_scan_values_gradients_and_counter(dtype, scan_loops):
    run = compiled_for_batches(doubling)
    assert_batch_equals_loop(run, scalars([0.1, 3.0, 12.0, -1.0, 0.0], dtype))
    assert_captured(run)
    # One scan of the bound's steps (its first ones peeled: `n = 0` becomes a batch).
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()]


@pytest.mark.parametrize("loops", ["auto", "scan"])
def test_a_while_longer_than_the_bound_is_captured_again_with_a_larger_one(
        loops: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", loops)
    # -0.49 takes 10 doublings to leave (-10, 10): more than a bound of 8 steps.
    run = compiled_for_batches(doubling, max_steps=None)
    examples, batch = scalars([-0.49, 3.0])
    matchbox.compiler.MIN_STEPS, saved = 8, matchbox.compiler.MIN_STEPS
    try:
        assert_batch_equals_loop(run, (examples, batch))
    finally:
        matchbox.compiler.MIN_STEPS = saved
    assert [s.bound for s in run.compiled.specializations] == [16]
    scans = scans_expected() if loops == "scan" else 0
    assert [s.scans for s in run.compiled.specializations] == [scans]
    assert_captured(run)


def test_max_steps_is_a_promise():
    run = compiled_for_batches(doubling, max_steps=4)
    _, batch = scalars([-0.49, 3.0])
    with pytest.raises(RuntimeError, match=r"a loop needs more than max_steps=4 steps for some "
                                           r"example; raise max_steps"):
        run(batch)


@matchbox.batch
def rnn_with_jumps(x, w, u):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        if xt.sum() > 2:
            break
        if xt.sum() < -1:
            continue
        h = (xt @ w + h @ u).tanh()
    return h


def test_for_over_a_dynamic_dimension_with_break_and_continue(dtype):
    w = torch.randn(3, 3, dtype=dtype)
    u = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(rnn_with_jumps, bucket=None)
    for lengths in ([4, 1, 6, 0], [6, 6, 2, 3]):  # one padded size: one graph
        examples, batch = sequences(lengths, dtype=dtype)
        assert_batch_equals_loop(run, (examples, batch), ([w] * len(lengths), w),
                                 ([u] * len(lengths), u))
    assert len(run.compiled.specializations) == 1
    assert_captured(run)
    # A scan whose steps narrow their mask by the break flag, as the unrolled loop does.
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()]


@matchbox.batch
def first_large_state(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        if h.sum() > 0.5:
            return h * 2  # a return inside the loop: the examples that return leave it
    return h


def test_a_return_inside_a_for_is_a_scan_equal_to_the_loop(dtype):
    w = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(first_large_state)
    for lengths in ([4, 1, 6, 0, 9], [7, 7, 2]):
        assert_batch_equals_loop(run, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))
    # Two padded sizes: one graph whose scan takes any length, else one graph for each.
    graphs = 1 if scans_expected() else 2
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()] * graphs
    assert_captured(run)


def test_a_batch_of_examples_all_empty_in_the_looped_dimension_is_captured(dtype):
    # Padded size 0: the loop takes no step. The steps' record of their examples once
    # reshaped the empty mask with -1, which failed the capture (the call ran eagerly).
    w = torch.randn(3, 3, dtype=dtype)
    u = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(rnn_with_jumps)
    examples, batch = sequences([0, 0], dtype=dtype)
    assert_batch_equals_loop(run, (examples, batch), ([w] * 2, w), ([u] * 2, u))
    assert_captured(run)


@matchbox.batch
def branches(x):
    if x > 0:
        y = x.log()
    else:
        y = -x
    return y * 2


def test_a_side_no_example_takes_still_runs_masked():
    run = compiled_for_batches(branches)
    for values in ([1.0, -2.0, 3.0], [1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]):
        assert_batch_equals_loop(run, scalars(values))
    assert len(run.compiled.specializations) == 1
    assert_captured(run)


@matchbox.batch
def counting(x, n):
    total = x * 0
    for i in range(n):
        total = total + x * i
    return total


def test_a_range_of_per_example_counts():
    run = compiled_for_batches(counting)
    counts = [torch.tensor([k]) for k in (3, 0, 5)]
    assert_batch_equals_loop(run, scalars([1.0, 2.0, 0.5]),
                             (counts, MaskedBatch.fromlist(counts, ())))
    assert_captured(run)


@matchbox.batch
def third(x):
    if x.sum() > 0:
        return x[:, 2]
    return x[:, 0]


def test_a_check_that_fails_in_the_graph_raises_the_eager_error():
    run = compiled_for_batches(third, bucket=None)
    _, good = sequences([3, 4, 1])  # the short one takes the other side
    good.data[2] = -1.0
    run(good)
    _, bad = sequences([3, 2, 4])
    bad.data[:, :, :] = 1.0
    with pytest.raises(IndexError, match="index 2 is out of range for example 1, which has "
                                         "size 2 in dynamic dimension 1"):
        run(bad)
    assert_captured(run)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_while_compiles_with_inductor_on_cuda():
    # The graph's flags once stacked a CPU constant with the CUDA flags of the loop:
    # capture allowed it, inductor's CUDA compile did not, and every call ran eagerly.
    compiled = matchbox.compile(doubling, fallback="raise")
    examples = [torch.tensor([v], dtype=torch.float64, device="cuda") for v in (0.1, 3.0, -1.0)]
    batch = MaskedBatch.fromlist(examples, ())
    assert_batch_equals_loop(
        lambda x: compiled(x) if isinstance(x, MaskedBatch) else doubling(x), (examples, batch))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_of_a_while_gives_the_eager_result(backend):
    # torch.compile traced Matchbox's dispatch and reused one generated method's frame
    # for another: `steps + 1` ran as `steps < 1`, the loop never ended.  Matchbox's
    # files are skipped by Dynamo now: its ops run eagerly between graphs.
    @matchbox.batch
    def halting(score):
        steps = 0
        while score < 1.0 and steps < 6:
            score = score + 0.1
            steps = steps + 1
        return score, steps

    compiled = torch.compile(halting, backend=backend)
    examples, batch = scalars([0.41, 0.07, 0.42, 2.0])
    assert_batch_equals_loop(lambda x: compiled(x) if isinstance(x, MaskedBatch) else halting(x),
                             (examples, batch))


def test_a_run_discarded_for_a_larger_bound_leaves_no_update_behind():
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(1, dtype=torch.float64))

        @matchbox.batch
        def forward(self, x):
            self.calls.add_(1)
            while x.abs() < 10:
                x = x * 2 + 0.5
            return x

    model = Counted()
    compiled = matchbox.compile(model, backend=BACKEND)
    matchbox.compiler.MIN_STEPS, saved = 8, matchbox.compiler.MIN_STEPS
    try:
        compiled(scalars([-0.49, 3.0])[1])  # 10 doublings: the first graph (8 steps) overflows
    finally:
        matchbox.compiler.MIN_STEPS = saved
    assert [s.bound for s in compiled.specializations] == [16]
    assert model.calls.item() == 1.0


@matchbox.batch
def squaring(x):
    while x < 100.0:
        x = x * x + 1.0
    return x


def test_inductor_compiles_an_unrolled_pointwise_loop():
    # Unrolled to 16 steps of a compare and a where over a value used twice, it did not
    # finish compiling with inductor's CPU default (pytorch/pytorch#192498).
    compiled = matchbox.compile(squaring)  # inductor
    examples, batch = scalars([1.5, 3.0, 50.0])
    assert per_example(compiled(batch)) == [per_example(squaring(x))[0] for x in examples]


@matchbox.batch
def stepped_by_size(x, w):
    h = x.new_zeros(1, x.size(-1))
    for t in range(x.size_as_tensor(1)):
        h = (x[:, t] @ w + h).tanh()
    return h


def test_a_range_over_a_dynamic_size_indexing_each_step_is_captured():
    # for t in range(x.size_as_tensor(1)): ... x[:, t] fell back to eager: the loop is
    # unrolled to the step bound (16) while x is padded to 8, and x[:, 8] raised
    # "select(): index 8 out of range". Steps past the padding are padding.
    run = compiled_for_batches(stepped_by_size)
    w = torch.randn(3, 3, dtype=torch.float64)
    assert_batch_equals_loop(run, sequences([3, 1, 5]), ([w] * 3, w))
    assert_captured(run)
    # An example longer than the bound: captured again with a larger one.
    assert_batch_equals_loop(run, sequences([17, 2]), ([w] * 2, w))
    assert_captured(run)


@matchbox.batch
def running_sums(x):
    row = []
    for j, v in enumerate(x.unbind(1)):
        if j == 0:
            r = v.sum(-1)
        else:
            r = v.sum(-1) + row[j - 1]  # once read on an empty list while capturing
        row.append(r)
    return torch.stack(row, 1), row[-1]


def test_a_list_read_in_the_else_of_the_first_step_is_captured(dtype):
    # Issue 24 §3: capture ran the else side at step 0 (a per-example count j) on an
    # empty list: "argmax: Expected reduction dim 0 to have non-zero size".  The steps
    # of a dynamic dimension are counted with plain ints, also while capturing.
    run = compiled_for_batches(running_sums)
    assert_batch_equals_loop(run, sequences([3, 1, 2, 4], dtype=dtype))
    assert_captured(run)


@matchbox.batch
def by_per_example_counter(x):
    row = []
    n = 0
    for v in x.unbind(1):
        row.append(v * 2)
        n = n + 1
        if v.sum() > 0:
            v = v + row[n - 1]  # a per-example index: each example's own last item
    return row[n - 1], len(row) + x.sum(1) * 0


def test_a_per_example_index_into_a_list_is_captured(dtype):
    run = compiled_for_batches(by_per_example_counter)
    assert_batch_equals_loop(run, sequences([3, 1, 2, 4], dtype=dtype))
    assert_captured(run)


@matchbox.batch
def reads_an_empty_list(x):
    k = (x.sum(1).sum(-1) > 1e6).long()  # 0 for every example
    items = []
    total = x.sum(1)
    if k > 0:
        total = total + items[k - 1]  # no example runs this
    return total


def test_a_per_example_read_of_an_empty_list_runs_eagerly_saying_why():
    xs, xb = sequences([2, 1])
    compiled = matchbox.compile(reads_an_empty_list, backend=BACKEND)
    with pytest.warns(UserWarning, match=r"a list read items\[i\] with a per-example index i "
                                         r"where the list is empty \(.*test_control_compile.py, "
                                         r"line \d+\).*under `if len\(items\) > 0:`"):
        out = compiled(xb)
    assert_batch_equals_loop(reads_an_empty_list, (xs, xb))
    assert [e.tolist() for e in out.examples()] == [x.sum(1).tolist() for x in xs]


def test_a_per_example_read_of_an_empty_list_raises_index_error():
    @matchbox.batch
    def f(x):
        k = (x.sum(1).sum(-1) > 1e6).long()
        items = []
        return items[k]

    _, xb = sequences([2, 1])
    with pytest.raises(IndexError, match=r"list index out of range for examples \[0, 1\].*"
                                         r"which is empty"):
        f(xb)


# ---------------------------------------------------------------- loops captured as scan
# (matchbox.compiler.loops, opt-in with MATCHBOX_COMPILE_LOOPS=scan: torch's scan where it
# has it; torch 2.3 unrolls the loop, and the same tests check the values there with no
# scan in the graph.)

@pytest.fixture
def scan_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", "scan")


def test_loops_are_scans_unless_unrolling_is_asked_for(monkeypatch: pytest.MonkeyPatch):
    from matchbox.compiler import loops

    has_scan = loops._scan_op() is not None
    monkeypatch.delenv("MATCHBOX_COMPILE_LOOPS", raising=False)
    assert loops.available() == has_scan
    assert loops.allowed("inductor") == (has_scan, None)
    assert not loops.whiles_too()  # a while unrolls unless scans are asked for
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", "scan")
    assert loops.whiles_too() and loops.available() == has_scan
    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", "unroll")
    assert not loops.available()
    assert loops.allowed("aot_eager") == (False, None)


def test_a_misspelt_loop_mode_is_refused(monkeypatch: pytest.MonkeyPatch):
    from matchbox.compiler import loops

    monkeypatch.setenv("MATCHBOX_COMPILE_LOOPS", "scans")
    with pytest.raises(ValueError, match=r"MATCHBOX_COMPILE_LOOPS='scans': expected one of "
                                         r"auto, scan, unroll"):
        loops.available()


@matchbox.batch
def gated_rnn(x, w, u):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        z = (xt @ w + h @ u).tanh()
        if z.sum() > 0:  # a per-example branch inside the scan's body
            z = z * 0.5
        h = h + z
    return h


def test_a_for_over_a_dynamic_dimension_is_one_scan_equal_to_the_loop_and_eager(dtype,
                                                                               scan_loops):
    # Lengths past the steps run before the scan (peeled) and past one bucket; padding is
    # NaN, which must reach no value or gradient.
    w = torch.randn(3, 3, dtype=dtype)
    u = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(gated_rnn)
    lengths = [9, 3, 1, 12, 0, 5]
    examples, batch = sequences(lengths, dtype=dtype)
    assert_batch_equals_loop(run, (examples, batch), ([w] * len(lengths), w),
                             ([u] * len(lengths), u))
    (spec,) = run.compiled.specializations
    assert spec.eager_reason is None
    assert spec.scans == scans_expected(), spec.unrolled
    # ... and eager Matchbox's values and gradients, on the same NaN-padded batch.
    grads = []
    for f in (gated_rnn, run):
        wb, ub = w.clone().requires_grad_(), u.clone().requires_grad_()
        xb = MaskedBatch(batch.data.clone().requires_grad_(), batch.mask, batch.dims)
        h = f(xb, wb, ub)
        matchbox.batch_mean(h.sum(-1)).backward()
        grads.append((h.data[:, :3] if h.data.dim() > 1 else h.data, wb.grad, ub.grad,
                      xb.data.grad.nan_to_num(nan=1e9)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    assert not grads[1][3].isnan().any()


@matchbox.batch
def collecting(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        if h.sum() > 0:  # a per-example branch before the append
            h = h * 0.5
        states.append(h)  # one item a step: the scan's per-step output
    return F.stack(states, 1).sum(1), h, len(states)


def test_a_loop_that_appends_to_a_list_is_a_scan_emitting_the_items(dtype, scan_loops):
    w = torch.randn(3, 3, dtype=dtype)
    run = compiled_for_batches(collecting)
    lengths = [4, 1, 6, 11]  # (an empty example would stack no states)
    assert_batch_equals_loop(run, sequences(lengths, dtype=dtype), ([w] * len(lengths), w))
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()]


@matchbox.batch
def collecting_twice(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        states.append(h)
        states.append(h * 2)  # two items a step: the loop stays unrolled
    return F.stack(states, 1).sum(1), len(states)


@matchbox.batch
def reading_what_it_appends(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = [h]
    for xt in x.unbind(1):
        h = (xt @ w + states[-1]).tanh()  # reads the list: the loop stays unrolled
        states.append(h)
    return h


@pytest.mark.parametrize("f", [collecting_twice, reading_what_it_appends])
def test_a_loop_that_uses_its_list_otherwise_stays_unrolled(f, scan_loops):
    w = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(f)
    lengths = [4, 1, 6]
    assert_batch_equals_loop(run, sequences(lengths, dtype=torch.float64),
                             ([w] * len(lengths), w))
    assert [s.scans for s in run.compiled.specializations] == [0]


def test_graphs_over_a_sequence_of_lengths(scan_loops):
    # With the loop a scan, its steps are slices of the sequence whose number stays a
    # symbol: one graph serves every padded length (matchbox/compiler/loop_steps.py).
    # Unrolled (no scan in torch 2.3), one graph per padded size rounded up to the
    # bucket (8): lengths whose longest is 5, 7, 8 share one; 13 and 16 another; 17 a third.
    w = torch.randn(3, 3, dtype=torch.float64)
    u = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(gated_rnn)
    for longest in (5, 7, 8, 13, 16, 17, 3):
        lengths = [longest, 2, 1]
        examples, batch = sequences(lengths)
        assert_batch_equals_loop(run, (examples, batch), ([w] * 3, w), ([u] * 3, u))
    specs = run.compiled.specializations
    if scans_expected():
        assert [(s.calls, s.scans) for s in specs] == [(7, 1)]
        assert "<=*" in specs[0].summary
    else:
        assert [(s.calls, s.scans) for s in specs] == [(4, 0), (2, 0), (1, 0)]


def test_inductor_compiles_one_graph_for_every_padded_length():
    # The scan's length is a symbol (T - 1 after the peeled step).  Inductor's lowering of
    # a scan rebuilds its per-step outputs' shapes from the symbols among its inputs, and
    # failed on T (compiler/loop_steps.py, length_inputs): each length then fell back to a
    # graph of its own fixed sizes.  Lengths 5 to 19, no bucket: one graph, one compile.
    w = torch.randn(3, 3, dtype=torch.float64)
    u = torch.randn(3, 3, dtype=torch.float64)
    compiled = matchbox.compile(gated_rnn, bucket=None, fallback="raise")  # inductor

    def run(*args):
        return compiled(*args) if isinstance(args[0], MaskedBatch) else gated_rnn(*args)

    for lengths in ([5, 2, 1], [11, 0, 4, 7], [19, 19, 3]):
        n = len(lengths)
        assert_batch_equals_loop(run, sequences(lengths), ([w] * n, w), ([u] * n, u))
    specs = compiled.specializations
    if scans_expected():
        assert [(s.calls, s.scans, s.fixed_sizes_because) for s in specs] == [(3, 1, None)]
    else:  # torch 2.3: no scan, the loop unrolls to each length
        assert len(specs) == 3


@matchbox.batch
def zipped(x, y, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt, yt in zip(x.unbind(1), y.unbind(1)):
        h = (xt @ w + yt + h).tanh()
    return h


def test_a_zip_of_two_sequences_serves_every_batch_size():
    # zip checked the batch sizes through a set, which a symbolic size cannot enter: every
    # batch size was captured with fixed sizes (a user trial).
    w = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(zipped, bucket=None)
    for lengths in ([6, 2, 1], [6, 6, 3, 4, 1], [6, 5]):
        n = len(lengths)
        (xs, xb), (ys, yb) = sequences(lengths), sequences(lengths[::-1])
        assert_batch_equals_loop(run, (xs, xb), (ys, yb), ([w] * n, w))
    [spec] = run.compiled.specializations
    assert spec.summary.startswith("batch(B=*") and spec.fixed_sizes_because is None


def test_a_scanned_loop_serves_every_batch_size_of_its_padded_length():
    # Sizes are symbolic (matchbox/compiler/symbolic.py): the batch size too; a batch of
    # one example gets a graph of its own (PyTorch fixes sizes 0 and 1).
    w = torch.randn(3, 3, dtype=torch.float64)
    u = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(gated_rnn)
    for lengths in ([5, 2, 1], [7, 7, 0, 3, 6], [8, 1], [6], [4, 2, 2, 2, 2, 2, 2, 1]):
        examples, batch = sequences(lengths)
        n = len(lengths)
        assert_batch_equals_loop(run, (examples, batch), ([w] * n, w), ([u] * n, u))
    specs = run.compiled.specializations
    assert [(s.summary.split(",")[0], s.calls) for s in specs] == [("batch(B=*", 4),
                                                                  ("batch(B=1", 1)]
    assert [s.scans for s in specs] == [scans_expected()] * 2


class HaltingWhile(torch.nn.Module):
    """A halting ``while``: each example takes its own number of steps."""

    def __init__(self, size: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(size, size) / size ** 0.5)
        self.halt = torch.nn.Parameter(torch.randn(size))

    @matchbox.batch
    def forward(self, h):
        score = (h @ self.halt).sigmoid() * 0.5
        steps = 0
        while score < 1.0 and steps < 6:
            h = (h @ self.w).tanh() + h
            score = score + (h @ self.halt).sigmoid() * 0.2
            steps = steps + 1
        return h * steps


def test_inductor_holds_a_halting_while_as_a_scan_with_the_loops_gradients(scan_loops):
    torch.manual_seed(0)
    model = HaltingWhile(4).double()
    compiled = matchbox.compile(model, fallback="raise")  # inductor
    examples = [torch.randn(4, dtype=torch.float64) * 2 for _ in range(5)]
    batch = MaskedBatch.fromlist([e.unsqueeze(0) for e in examples], (False,))

    def run(h):
        return compiled(h) if isinstance(h, MaskedBatch) else model(h)

    mb_assert(run, [[e.unsqueeze(0) for e in examples]], [batch], len(examples),
              params=list(model.parameters()))
    assert [s.scans for s in compiled.specializations] == [scans_expected()]


@matchbox.batch
def counting_past_a_float64s_integers(x):
    h = x.sum(1).sum(-1).long() * 0 + 2 ** 60
    for _ in x.unbind(1):
        h = h + 1  # an int64 carry: exact past 2**53 (it travels as float64 bits)
    return h


def test_an_int64_loop_state_keeps_every_bit(scan_loops):
    run = compiled_for_batches(counting_past_a_float64s_integers)
    _, batch = sequences([6, 2, 5, 0])
    assert per_example(run(batch)) == [2 ** 60 + n for n in (6, 2, 5, 0)]
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()]


@matchbox.batch
def reading_its_list_through_a_closure(x):
    h = x.new_zeros(x.size(0), x.size(-1))
    states = []
    count = lambda: len(states)  # noqa: E731 -- reads the list while the loop appends
    for xt in x.unbind(1):
        h = h + xt * count()
        states.append(h)
    return h


def test_inductor_scans_a_loop_that_appends_its_state(scan_loops):
    # The appended state is tanh's output, which the scan's backward also saves: inductor
    # refused the scan as aliased until every per-step output was a copy.
    w = torch.randn(3, 3, dtype=torch.float64)
    compiled = matchbox.compile(collecting, fallback="raise")  # inductor

    def run(*args):
        return compiled(*args) if isinstance(args[0], MaskedBatch) else collecting(*args)

    lengths = [4, 1, 6, 11]
    assert_batch_equals_loop(run, sequences(lengths), ([w] * len(lengths), w))
    assert [(s.scans, s.unrolled) for s in compiled.specializations] == [(scans_expected(), [])]


def test_a_list_read_during_the_loop_through_a_closure_keeps_the_loop_unrolled(scan_loops):
    # Each step of a scan appends to a list of its own (the real one gets the items
    # after the loop): the closure would see the list empty at every step.
    run = compiled_for_batches(reading_its_list_through_a_closure)
    assert_batch_equals_loop(run, sequences([6, 2, 4]))
    assert [s.scans for s in run.compiled.specializations] == [0]


@matchbox.batch
def appending_through_values(x, w):
    states, logged, noted = [], [], []
    push = states.append
    log = lambda v: logged.append(v)  # noqa: E731

    def note(v):
        noted.append(v)

    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
        push(h)
        log(h * 2)
        note(1.0)
    return h * len(states) + len(logged) * len(noted), F.stack(states, 1).sum(1)


def test_a_loop_appending_through_a_bound_method_or_a_closure_stays_unrolled(scan_loops):
    # A step of a scan is traced once: a list the body reaches only through a value it
    # reads (``push = states.append``, a lambda or a function closing over the list)
    # would get one item, not one a step, so such a loop is unrolled (a user trial found
    # the lambda's and the function's lists one item long, the bound method refused with
    # a misleading error).
    w = torch.randn(3, 3, dtype=torch.float64)
    run = compiled_for_batches(appending_through_values)
    lengths = [4, 1, 6, 11]
    assert_batch_equals_loop(run, sequences(lengths, dtype=torch.float64),
                             ([w] * len(lengths), w))
    assert [(s.scans, s.unrolled) for s in run.compiled.specializations] == [(0, [])]


@matchbox.batch
def nested_loops(x):
    total = x[:, 0] * 0
    for xt in x.unbind(1):
        h = xt
        for yt in x.unbind(1):  # unrolled into the outer loop's step
            h = (yt + h).tanh()
        total = total + h
    return total


def test_a_loop_inside_a_scanned_loop_is_unrolled_into_its_step(scan_loops):
    run = compiled_for_batches(nested_loops)
    assert_batch_equals_loop(run, sequences([6, 2, 5]))
    assert [s.scans for s in run.compiled.specializations] == [scans_expected()]


def test_a_graph_whose_scan_fails_to_compile_is_captured_again_unrolled(scan_loops,
                                                                         monkeypatch):
    # As inductor refused some scans ("scan might be aliasing the input or the output!",
    # torch 2.13): the call is captured again with its loops unrolled, not run eagerly.
    from matchbox.compiler import loops

    def refusing_scans(graph, example_inputs):
        if "scan" in graph.code:
            raise RuntimeError("no scans here")
        return graph.forward

    monkeypatch.setattr(loops, "SCAN_BACKENDS", (*loops.SCAN_BACKENDS, refusing_scans))
    compiled = matchbox.compile(gated_rnn, backend=refusing_scans, fallback="raise")
    w, u = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)

    def run(*args):
        return compiled(*args) if isinstance(args[0], MaskedBatch) else gated_rnn(*args)

    lengths = [9, 3, 1, 12]
    assert_batch_equals_loop(run, sequences(lengths), ([w] * 4, w), ([u] * 4, u))
    (spec,) = compiled.specializations
    assert spec.scans == 0 and spec.eager_reason is None
    if scans_expected():
        assert spec.unrolled[0].startswith("every loop, as a graph with scans failed: "
                                           "torch.compile failed on the captured graph")


def test_a_graph_that_fails_to_compile_every_way_runs_eagerly(scan_loops, monkeypatch):
    # Retried with its own sizes, then unrolled: each retry gave up one thing and took
    # the other back, so a backend failing on every graph made the two retries call each
    # other until Python's recursion limit. Now the last retry keeps both and runs eagerly.
    from matchbox.compiler import loops

    calls = []

    def failing(graph, example_inputs):
        calls.append("scan" in graph.code)
        raise RuntimeError("this backend compiles nothing")

    monkeypatch.setattr(loops, "SCAN_BACKENDS", (*loops.SCAN_BACKENDS, failing))
    compiled = matchbox.compile(gated_rnn, backend=failing)
    w, u = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 3, dtype=torch.float64)

    def run(*args):
        return compiled(*args) if isinstance(args[0], MaskedBatch) else gated_rnn(*args)

    with pytest.warns(UserWarning, match="this backend compiles nothing"):
        assert_batch_equals_loop(run, sequences([9, 3, 1, 12]), ([w] * 4, w), ([u] * 4, u))
    (spec,) = compiled.specializations
    assert spec.eager_reason is not None and spec.sizes is None
    assert len(calls) <= 4 and calls[-1] is False  # the last graph: loops unrolled


def test_a_range_over_sizes_read_from_a_batch_takes_its_padded_size_in_steps():
    # The range of x.size_as_tensor(1) ran to the capture's step bound (16) whatever x's
    # padding (8): twice the steps, each past the padding reading nothing. Its sizes are
    # bounded by that padding, so the loop takes that many steps and cannot overflow.
    from matchbox import _capture

    x = MaskedBatch.fromlist([torch.rand(1, n, 3) for n in (3, 8, 5)], (True, False))
    state = _capture.Capture(16)
    token = _capture.begin(state)
    try:
        sizes = x.size_as_tensor(1)
        assert state.steps_for(sizes.data, sizes.data) == 8
        assert state.overflows == []
        assert state.steps_for(sizes.data) == 16  # counts computed some other way
        assert len(state.overflows) == 1
    finally:
        _capture.end(token)


@matchbox.batch
def tanh_rnn(x, w):
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).tanh()
    return h


@matchbox.batch
def sigmoid_rnn(x, w):  # tanh_rnn with another op in the loop's body, and nothing else
    h = x.new_zeros(x.size(0), x.size(-1))
    for xt in x.unbind(1):
        h = (xt @ w + h).sigmoid()
    return h


def test_inductor_caches_a_graph_holding_a_scan_keyed_on_its_body(
        tmp_path, monkeypatch: pytest.MonkeyPatch):
    # Inductor's caches refuse a graph holding a higher-order op not marked cacheable, and
    # torch does not mark scan: a second process compiled every graph with a loop again
    # (the README RNN: 16 s warm, 35 s cold).  Compiled under matchbox.compiler.
    # scan_settings, the graph and its backward are cached and found again; and the cache
    # key holds the scan's body, so a loop whose body differs by one op is compiled anew,
    # not taken for the cached one (its values and gradients are its own loop's).
    if not scans_expected():
        pytest.skip("torch 2.3 has no scan: loops are unrolled, cached as any graph")
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # empty: a cold start
    w = torch.randn(3, 3, dtype=torch.float64)
    lengths = [5, 2, 0, 4]
    args = (sequences(lengths), ([w] * len(lengths), w))

    def compile_and_check(model):
        torch._dynamo.reset()  # Dynamo traces again, as in a new process
        counters.clear()
        compiled = matchbox.compile(model, bucket=None, fallback="raise")  # inductor

        def run(*a):
            return compiled(*a) if isinstance(a[0], MaskedBatch) else model(*a)

        assert_batch_equals_loop(run, *args)
        assert [s.scans for s in compiled.specializations] == [1]
        return {k: v for k, v in counters["aot_autograd"].items() if k.startswith("autograd_cache")}

    assert compile_and_check(tanh_rnn) == {"autograd_cache_miss": 1, "autograd_cache_saved": 1}
    assert compile_and_check(tanh_rnn) == {"autograd_cache_hit": 1}
    assert compile_and_check(sigmoid_rnn) == {"autograd_cache_miss": 1,
                                              "autograd_cache_saved": 1}
