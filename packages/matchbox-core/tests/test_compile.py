"""``matchbox.compile``: one captured graph per specialisation, equal to eager and to the loop.

The graphs run with ``backend="aot_eager"`` (PyTorch's own kernels, the
backward pass derived by AOTAutograd as inductor's is) to keep the tests
quick; one test compiles with inductor.  The oracle is the per-example loop,
with NaN padding, empty and one-long examples, batch size one, float32 and
float64.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import matchbox
from matchbox import MaskedBatch
from matchbox.compiler import CaptureError
from matchbox.compiler.structure import bucket_size
from matchbox.testing import assert_examples_close as _assert_example_close

BACKEND = "aot_eager"


def assert_examples_close(batch, loop):
    """Each example of ``batch`` equals the loop's result for it."""
    examples = list(batch.examples())
    assert len(examples) == len(loop)
    for b, (value, expected) in enumerate(zip(examples, loop)):
        _assert_example_close(value, expected, example=b, output=0)


def assert_values_and_gradients_equal_the_loop(out, loop, examples, xb, w):
    """``out`` (a compiled call on ``xb``) equals ``loop`` (the calls on ``examples``), and
    so do the gradients of their sums into each example and the shared weight ``w``."""
    assert_examples_close(out, loop)
    grads = torch.autograd.grad(matchbox.batch_sum(out), [xb.data, w])
    expected = torch.autograd.grad(sum(lo.sum() for lo in loop), [*examples, w])
    torch.testing.assert_close(grads[1], expected[-1])
    for b, (x, g) in enumerate(zip(examples, expected)):
        torch.testing.assert_close(grads[0][b:b + 1, :x.size(1)], g)


def scores(x, w):
    """Per example: a softmax-free attention-like mix of a sequence with itself."""
    h = (x @ w).tanh()
    centred = h - h.mean(1, keepdim=True)
    return (centred * centred).sum(-1).mean(1) + h.amax(1).sum(-1)


class Scores(nn.Module):
    """``scores`` as a module: its weight a parameter."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return scores(x, self.w)


def batch_of(lengths, size=3, dtype=torch.float32, requires_grad=True):
    examples = [torch.randn(1, n, size, dtype=dtype, requires_grad=requires_grad)
                for n in lengths]
    return examples, MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))


def loop_and_batch(f, examples, xb, *shared):
    loop = [f(x, *shared) for x in examples]
    return loop, f(xb, *shared)


@pytest.mark.parametrize("lengths", [[3, 1, 4], [1], [2, 2], [5, 1, 1, 7]])
def test_function_equals_eager_and_the_loop(lengths, dtype):
    w = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    compiled = matchbox.compile(scores, backend=BACKEND)
    examples, xb = batch_of(lengths, dtype=dtype)
    out = compiled(xb, w)
    loop = [scores(x, w) for x in examples]
    assert_values_and_gradients_equal_the_loop(out, loop, examples, xb, w)


def test_the_graph_does_not_depend_on_the_lengths_it_was_captured_with():
    w = torch.randn(3, 3)
    compiled = matchbox.compile(scores, backend=BACKEND, bucket=None)
    for lengths in ([4, 4, 4], [4, 1, 2], [1, 4, 3]):  # one padded size: one graph
        examples, xb = batch_of(lengths, requires_grad=False)
        assert_examples_close(compiled(xb, w), [scores(x, w) for x in examples])
    assert len(compiled.specializations) == 1


def test_padded_sizes_are_rounded_up_to_buckets():
    w = torch.randn(3, 3)
    # (reuse=None, dynamic=False: each padded size its own graph, none run on a larger one
    # nor on one of symbolic sizes)
    fixed = dict(backend=BACKEND, reuse=None, dynamic=False)
    by_eight = matchbox.compile(scores, bucket=8, **fixed)
    exact = matchbox.compile(scores, bucket=None, **fixed)
    powers = matchbox.compile(scores, bucket="pow2", **fixed)
    for longest in (5, 7, 9, 12, 3):
        examples, xb = batch_of([longest, 2], requires_grad=False)
        loop = [scores(x, w) for x in examples]
        for compiled in (by_eight, exact, powers):
            assert_examples_close(compiled(xb, w), loop)
    assert len(by_eight.specializations) == 2  # 8 and 16
    assert len(exact.specializations) == 5
    assert len(powers.specializations) == 3  # 8, 16 and 4
    assert [bucket_size(n, "pow2") for n in (1, 3, 4, 5, 0)] == [1, 4, 4, 8, 0]
    assert [bucket_size(n, 8) for n in (1, 8, 9)] == [8, 8, 16]


def test_a_failing_check_raises_the_eager_error():
    def last_but_two(x):
        return x[:, 2] * 2

    compiled = matchbox.compile(last_but_two, backend=BACKEND, bucket=None)
    examples, xb = batch_of([4, 3, 5], requires_grad=False)
    assert_examples_close(compiled(xb), [last_but_two(x) for x in examples])
    _, short = batch_of([4, 2, 5], requires_grad=False)  # the same padded size
    with pytest.raises(IndexError, match="index 2 is out of range for example 1, which has "
                                         "size 2 in dynamic dimension 1"):
        compiled(short)
    assert len(compiled.specializations) == 1
    assert compiled.specializations[0].eager_reason is None


def test_a_module_trains_as_in_eager():
    torch.manual_seed(0)
    model = Scores()
    compiled = matchbox.compile(model, backend=BACKEND)
    assert list(compiled.parameters()) == list(model.parameters())
    examples, xb = batch_of([2, 5, 1])
    matchbox.batch_sum(compiled(xb)).backward()
    got = model.w.grad.clone()
    model.w.grad = None
    for x in examples:
        model(x).sum().backward()
    torch.testing.assert_close(got, model.w.grad)
    # A step of an optimiser is seen by the next call (the parameters are graph inputs).
    with torch.no_grad():
        model.w.mul_(2)
    examples, xb = batch_of([2, 5, 1], requires_grad=False)
    assert_examples_close(compiled(xb), [model(x) for x in examples])
    assert compiled.specializations[0].compile_seconds > 0
    assert compiled.specializations[0].nodes > 0


def test_grad_mode_and_training_flag_are_specialisations():
    compiled = matchbox.compile(Scores(), backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    compiled(xb)
    with torch.no_grad():
        out = compiled(xb)
    assert not out.requires_grad
    compiled.eval()
    compiled(xb)
    assert len(compiled.specializations) == 3


def test_code_that_reads_values_runs_eagerly_with_a_warning():
    def reads(x):
        # A Python decision from a value: a graph cannot hold it (nor should it guess).
        longest = int(x.size_as_tensor(1).data.max())
        return x.sum(1) * (2 if longest > 2 else 1)

    compiled = matchbox.compile(reads, backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    with pytest.warns(UserWarning, match=r"runs batch\(B=2, <=8, 3\) eagerly, as it cannot "
                                         r"be captured as one graph: .*test_compile.py"):
        out = compiled(xb)
    assert_examples_close(out, [x.sum(1) * 2 for x in examples])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per specialisation
        compiled(xb)
    strict = matchbox.compile(reads, backend=BACKEND, fallback="raise")
    with pytest.raises(CaptureError, match="cannot capture"):
        strict(xb)


def test_a_backend_that_fails_is_named_with_its_own_error():
    # torch.compile wraps a backend's error in BackendCompilerFailed, whose first line
    # says only "backend=... raised:"; the reason must say what the backend raised.
    def failing_backend(graph, example_inputs):
        raise ValueError("no kernel for this op")

    compiled = matchbox.compile(lambda x: x * 2, backend=failing_backend)
    examples, xb = batch_of([2, 3], requires_grad=False)
    with pytest.warns(UserWarning, match=r"torch.compile failed on the captured graph: "
                                         r"BackendCompilerFailed: .* raised: "
                                         r"ValueError: no kernel for this op"):
        out = compiled(xb)
    assert_examples_close(out, [x * 2 for x in examples])


def test_a_graphs_flags_are_made_on_the_device_of_what_they_flag():
    # A loop's overflow flag on one device and no failed check: the "no failure" constant
    # must join it there (a CPU constant beside CUDA flags failed inductor's CUDA compile;
    # the meta device stands for CUDA on a machine without one).
    from matchbox._capture import Capture

    capture = Capture(bound=1)
    capture.overflows.append(torch.ones((), dtype=torch.bool, device="meta"))
    flags = capture.flags()
    assert flags.device.type == "meta"
    assert flags.shape == (2,)


SCALE = 2.0  # read by the functions below: a graph freezes it, so it is part of the key


def test_plain_globals_and_closed_over_values_the_code_reads_are_part_of_the_key():
    global SCALE
    offset = 1.0

    def scaled(x):
        return x * SCALE + offset

    compiled = matchbox.compile(scaled, backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    try:
        for SCALE, offset in ((2.0, 1.0), (3.0, 1.0), (3.0, -1.0), (2.0, 1.0)):
            assert_examples_close(compiled(xb), [x * SCALE + offset for x in examples])
    finally:
        SCALE = 2.0
    assert len(compiled.specializations) == 3


def _scale_by_the_global(x):
    return [x * SCALE for _ in range(2)][0]  # read in nested code (a comprehension)


class _ScaledByAGlobal(nn.Module):
    def forward(self, x):
        return self.scale(x)

    def scale(self, x):  # a method forward calls, which calls a helper, which reads SCALE
        return _scale_by_the_global(x)


def test_a_global_read_by_a_submodules_methods_or_their_helpers_is_part_of_the_key():
    global SCALE
    compiled = matchbox.compile(nn.Sequential(_ScaledByAGlobal()), backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    try:
        for SCALE in (2.0, 5.0):
            assert_examples_close(compiled(xb), [x * SCALE for x in examples])
    finally:
        SCALE = 2.0
    assert len(compiled.specializations) == 2


def test_a_global_read_by_a_helper_the_function_calls_is_part_of_the_key():
    global SCALE
    compiled = matchbox.compile(lambda x: _scale_by_the_global(x) + 1, backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    try:
        for SCALE in (2.0, -1.0):
            assert_examples_close(compiled(xb), [x * SCALE + 1 for x in examples])
    finally:
        SCALE = 2.0
    assert len(compiled.specializations) == 2


def test_a_users_module_named_like_a_library_is_still_followed():
    # Only PyTorch's and Matchbox's own packages are skipped, by their top-level name:
    # a helper in a user's `torch_models` module reads globals a user changes.
    global SCALE

    def helper(x):
        return x * SCALE

    helper.__module__ = "torch_models"
    compiled = matchbox.compile(lambda x: helper(x), backend=BACKEND)
    examples, xb = batch_of([2, 3], requires_grad=False)
    try:
        for SCALE in (2.0, 4.0):
            assert_examples_close(compiled(xb), [x * SCALE for x in examples])
    finally:
        SCALE = 2.0
    assert len(compiled.specializations) == 2


def test_a_tensor_that_is_not_an_argument_is_refused():
    w = torch.randn(3, 3, requires_grad=True)

    def closes_over_a_weight(x):
        return x @ w

    compiled = matchbox.compile(closes_over_a_weight, backend=BACKEND, fallback="raise")
    _, xb = batch_of([2, 3], requires_grad=False)
    with pytest.raises(CaptureError, match=r"reads a parameter of shape \(3, 3\) that is not "
                                           r"one of its arguments .* compile the module"):
        compiled(xb)


def test_a_method_compiled_as_a_function_says_to_compile_the_module():
    class Model(nn.Module):
        @matchbox.compile
        def forward(self, x):
            return x * 2

    _, xb = batch_of([2, 3], requires_grad=False)
    with pytest.raises(TypeError, match=r"compile the module instead: model = "
                                        r"matchbox.compile\(Model\(...\)\)"):
        Model()(xb)


def test_arguments_that_cannot_be_captured_run_eagerly():
    compiled = matchbox.compile(lambda x, f: f(x), backend=BACKEND)
    _, xb = batch_of([2, 3], requires_grad=False)
    with pytest.warns(UserWarning, match="runs eagerly: an argument of type builtin_function_or_method, which a captured "
                                       "graph cannot take"):
        out = compiled(xb, torch.tanh)
    torch.testing.assert_close(out.data, xb.data.tanh(), equal_nan=True)


def test_specializations_list_the_graphs_then_the_calls_not_captured():
    # Calls whose arguments cannot be taken apart have no key and no graph: they come
    # after the graphs, one entry per reason, however the calls interleave.
    compiled = matchbox.compile(lambda x, f=None: x * 2 if f is None else f(x), backend=BACKEND)
    _, xb = batch_of([2, 3], requires_grad=False)
    with pytest.warns(UserWarning, match="runs eagerly: an argument of type"):
        compiled(xb, torch.tanh)
    compiled(xb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per reason
        compiled(xb, torch.tanh)
    graph, uncaptured = compiled.specializations
    assert (graph.eager_reason, graph.calls) == (None, 1)
    assert uncaptured.summary == "(arguments not captured)"
    assert uncaptured.eager_reason.startswith("an argument of type builtin_function_or_method")
    assert uncaptured.calls == 2


def test_a_batch_changed_in_place_runs_eagerly_when_the_graph_would_get_a_padded_copy():
    def bump(x):
        x.add_(1)
        return x.sum(1)

    for bucket, copied in ((8, True), (None, False)):
        compiled = matchbox.compile(bump, backend=BACKEND, bucket=bucket)
        examples, xb = batch_of([2, 3], requires_grad=False)
        real = xb.mask.expand_as(xb.data)
        before = xb.data[real]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled(xb)
            out = compiled(xb)
        warned = [w for w in caught if "changes a batch argument in place" in str(w.message)]
        assert len(warned) == int(copied)  # warned once
        torch.testing.assert_close(xb.data[real], before + 2)  # both calls changed it
        assert_examples_close(out, [(x + 2).sum(1) for x in examples])
        # An eager call is not a call of the graph.
        assert compiled.specializations[0].calls == (0 if copied else 2)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="bucket must be a positive int"):
        matchbox.compile(scores, bucket=0)
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        matchbox.compile(scores, max_steps=0)
    with pytest.raises(ValueError, match="fallback must be 'warn' or 'raise'"):
        matchbox.compile(scores, fallback="ignore")
    with pytest.raises(TypeError, match="expects an nn.Module or a function"):
        matchbox.compile(3)


def sums(x, w):
    """Per example: sums over a sequence, which may be empty (the sum is then zero)."""
    return ((x @ w).sigmoid() * x).sum(1).logsumexp(-1)


@pytest.mark.parametrize("backend", [BACKEND, "inductor"])
def test_empty_examples_and_inductor(backend):
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    compiled = matchbox.compile(sums, backend=backend)
    examples, xb = batch_of([3, 0, 4, 1], dtype=torch.float64)
    out = compiled(xb, w)
    loop = [sums(x, w) for x in examples]
    assert_values_and_gradients_equal_the_loop(out, loop, examples, xb, w)


def cross(q, k):
    """Per example: queries mixed with keys that may be none (scores of shape (1, n_q, 0))."""
    return ((q @ k.transpose(1, 2)).tanh() @ k).sum(1)


def test_examples_empty_in_one_of_two_dynamic_dimensions():
    qs = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in (2, 3, 1)]
    ks = [torch.randn(1, n, 3, dtype=torch.float64, requires_grad=True) for n in (4, 0, 2)]
    qb = MaskedBatch.fromlist(qs, (True, False), padding_value=float("nan"))
    kb = MaskedBatch.fromlist(ks, (True, False), padding_value=float("nan"))
    compiled = matchbox.compile(cross, backend=BACKEND, fallback="raise")
    out = compiled(qb, kb)
    loop = [cross(q, k) for q, k in zip(qs, ks)]
    assert_examples_close(out, loop)
    grads = torch.autograd.grad(matchbox.batch_sum(out.sum(-1)), [qb.data, kb.data])
    expected = torch.autograd.grad(sum(lo.sum() for lo in loop), qs + ks)
    for b, (q, k) in enumerate(zip(qs, ks)):
        torch.testing.assert_close(grads[0][b:b + 1, :q.size(1)], expected[b])
        torch.testing.assert_close(grads[1][b:b + 1, :k.size(1)], expected[3 + b])
    scores = matchbox.compile(lambda q, k: q @ k.transpose(1, 2), backend=BACKEND,
                              fallback="raise")(qb, kb)
    assert [tuple(e.shape) for e in scores.examples()] == [(1, 2, 4), (1, 3, 0), (1, 1, 2)]


def test_a_class_is_refused_at_decoration():
    with pytest.raises(TypeError, match=r"got the class Model; compile an instance: model = "
                                        r"matchbox.compile\(Model\(...\)\)"):
        @matchbox.compile
        class Model(nn.Module):
            pass


def test_autocast_is_part_of_a_graphs_key():
    w = torch.randn(3, 3)
    compiled = matchbox.compile(scores, backend=BACKEND)
    _, xb = batch_of([3, 2], requires_grad=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(xb, w).dtype == scores(xb, w).dtype
    assert compiled(xb, w).dtype == torch.float32
    assert len(compiled.specializations) == 2


# Per-example checks of ops become graph outputs (they broke capture with a data-dependent
# guard, issue 24 §3): the call is captured, and a failing check reruns it eagerly to
# raise its own error.
CHECKED_OPS = {
    "kthvalue": (lambda x: x.kthvalue(2, 1).values,
                 RuntimeError, r"selected number k=2 is out of range for example 1"),
    "quantile": (lambda x: torch.nanquantile(x, 0.5, dim=1),
                 RuntimeError, r"input tensor must be non-empty: example 1"),
}


@pytest.mark.parametrize("name", sorted(CHECKED_OPS))
def test_an_ops_per_example_check_is_captured_and_raises_its_own_error(name):
    fn, error, message = CHECKED_OPS[name]
    torch.manual_seed(0)
    good = MaskedBatch.fromlist([torch.randn(1, n, 2, dtype=torch.float64) for n in (3, 2, 4)],
                                (True, False), padding_value=float("nan"))
    compiled = matchbox.compile(fn, backend=BACKEND, fallback="raise")
    for a, b in zip(compiled(good).examples(), fn(good).examples()):
        torch.testing.assert_close(a, b, equal_nan=True)
    assert compiled.specializations[0].eager_reason is None
    short = {"kthvalue": 1, "quantile": 0}[name]
    bad = MaskedBatch.fromlist([torch.randn(1, n, 2, dtype=torch.float64)
                                for n in (3, short, 4)], (True, False))
    with pytest.raises(error, match=message):
        compiled(bad)


def test_new_zeros_of_a_per_example_size_read_from_a_batch_is_captured():
    # x.new_zeros(1, n, H) with n = x.size_as_tensor(1) fell back to eager with
    # GuardOnDataDependentSymNode (its padded size was n's largest value).
    def fn(x, w):
        n = x.size_as_tensor(1)
        z = x.new_zeros(1, n, x.size(2)) + torch.cat([x.new_ones(1, n, 2), x.new_zeros(1, 1, 2)],
                                                    1)[:, :-1]
        return ((z + x) @ w).tanh().sum(1)

    torch.manual_seed(0)
    xs, xb = batch_of([3, 1, 5], size=2, dtype=torch.float64)
    w = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    compiled = matchbox.compile(fn, backend=BACKEND, fallback="raise")
    out = compiled(xb, w)
    assert compiled.specializations[0].eager_reason is None
    assert_values_and_gradients_equal_the_loop(out, [fn(x, w) for x in xs], xs, xb, w)


def test_new_zeros_of_a_per_example_size_computed_from_values_says_what_to_write():
    def fn(x):
        return x.new_zeros(1, x.size_as_tensor(1) + 1, 2).sum(1)

    xb = MaskedBatch.fromlist([torch.randn(1, n, 2) for n in (3, 1)], (True, False))
    with pytest.raises(CaptureError, match=(
            r"Tensor\.new_zeros: size 1 is a per-example size computed from values, so the "
            r"padded size of the result depends on them and the call runs eagerly; to "
            r"capture it, give sizes read from a batch directly, n = x\.size_as_tensor\(d\)")):
        matchbox.compile(fn, backend=BACKEND, fallback="raise")(xb)
    with pytest.warns(UserWarning, match=r"size 1 is a per-example size computed from values"):
        out = matchbox.compile(fn, backend=BACKEND)(xb)
    assert [e.tolist() for e in out.examples()] == [[[0.0, 0.0]]] * 2


def test_compile_seconds_count_the_first_backward_which_compiles_the_backward_graph():
    # AOTAutograd compiles a graph's backward at its first backward pass, after the call.
    model = Scores()
    compiled = matchbox.compile(model, backend=BACKEND)
    _, xb = batch_of([3, 5], requires_grad=False)
    out = matchbox.batch_sum(compiled(xb))
    [spec] = compiled.specializations
    before = spec.compile_seconds
    out.backward()
    after = spec.compile_seconds
    assert after > before > 0
    matchbox.batch_sum(compiled(xb)).backward()  # later backward passes are not counted
    assert spec.compile_seconds == after


def two_weights(x, w_in, w_out):
    return ((x @ w_in).tanh() @ w_out).sum(1)


@pytest.mark.parametrize("dynamic", [True, False])
def test_one_tensor_in_two_arguments_is_part_of_the_key(dynamic):
    # A user trial: captured as f(x, W, W) the graph read one input for both weights, and
    # f(x, W, U) then ran on it with W twice; f(x, x) then f(a, b) likewise.
    w, u = torch.randn(3, 3), torch.randn(3, 3)
    compiled = matchbox.compile(two_weights, backend=BACKEND, dynamic=dynamic)
    examples, xb = batch_of([5, 3, 8], requires_grad=False)  # (no padding: xb itself)
    for first, second in ((w, w), (w, u), (u, u)):
        loop = [two_weights(x, first, second) for x in examples]
        assert_examples_close(compiled(xb, first, second), loop)
    assert len(compiled.specializations) == 2  # tied and untied

    pair = matchbox.compile(lambda q, k: (q @ k.transpose(1, 2)).tanh().sum(-1),
                            backend=BACKEND, dynamic=dynamic)
    keys, kb = batch_of([5, 3, 8], requires_grad=False)
    pair(xb, xb)
    loop = [(q @ k.transpose(1, 2)).tanh().sum(-1) for q, k in zip(examples, keys)]
    assert_examples_close(pair(xb, kb), loop)
