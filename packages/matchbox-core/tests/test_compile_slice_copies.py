"""A slice's copy in a scan's body is fused by inductor, not an ATen call each step
(``matchbox.compiler.slice_copies``).  Torch functionalizes a scan's joint graph with its
views as copies; inductor (torch 2.13) has no decomposition or lowering for ``slice_copy``
(a ``chunk``'s pieces, a ``cat``'s backward), and called ATen for each one at every step:
9 a step in the TreeLSTM's forward, 4 in its backward.

Pinned: the decomposition's values; that a graph holding a scan is compiled by a backend
that gives it to inductor's ``compile_fx`` as its ``decompositions`` parameter (inductor's
own tables, shared by the process, never hold it), with ``mode=`` and ``options=`` as
inductor's settings; and a compiled scan whose body chunks and concatenates: no
``slice_copy`` in inductor's code, values and gradients those of the per-example loop with
NaN padding.
"""

from __future__ import annotations

import pickle

import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.compiler import loops, slice_copies

# Graphs holding a scan: torch 2.3 (tox's `oldest`) has none.
pytestmark = pytest.mark.compiled_loops
pytest.importorskip("torch._higher_order_ops.scan")
from torch._inductor import decomposition  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

aten = torch.ops.aten
HIDDEN, INPUT = 4, 3


@pytest.mark.parametrize("args", [(1, 0, 2), (1, 2, None), (-1, 1, 100), (0, -3, -1, 2),
                                  (1, None, None, 3), (0,)])
def test_the_decomposition_gives_atens_values(args):
    x = torch.randn(5, 6, dtype=torch.float64).t()  # not contiguous
    got = slice_copies.slice_copy(x, *args)
    want = aten.slice_copy.Tensor(x, *args)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.is_contiguous() and got.data_ptr() != x.data_ptr()


def in_tables():
    return [aten.slice_copy.Tensor in table
            for table in (decomposition.decompositions, decomposition.fast_random_decomps())]


def test_a_graph_holding_a_scan_compiles_with_the_decomposition_as_inductors_parameter():
    assert slice_copies.available()
    backend = slice_copies.backend("inductor", scans=True, dynamic=False)
    assert isinstance(backend, slice_copies.Inductor)
    # Without a scan, under another backend, or ahead-of-time (use_aoti): torch's own.
    assert slice_copies.backend("inductor", scans=False, dynamic=False) == "inductor"
    assert slice_copies.backend("aot_eager", scans=True, dynamic=False) == "aot_eager"
    assert slice_copies.backend("inductor", True, False, None, {"use_aoti": True}) == "inductor"


def test_the_table_pickles_by_name_for_inductors_cache_key():
    # Inductor's graph cache keys a graph on the pickled table it was given; its own holds
    # pybind11 functions, which do not pickle, and the cache refused the graph (a second
    # process compiled it again).  Pickled, the table is its base's name and a version.
    for base in (decomposition.decompositions, decomposition.fast_random_decomps()):
        table = slice_copies.Decompositions(base)
        assert table == {**base, aten.slice_copy.Tensor: slice_copies.slice_copy}
        assert base.get(aten.slice_copy.Tensor) is None  # (inductor's table left as it is)
        data = pickle.dumps(table)
        assert len(data) < 300 and slice_copies.VERSION.encode() in data
        assert pickle.loads(data) == table


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_a_mode_is_inductors_settings_for_it(mode):
    from torch._inductor import list_mode_options

    want = {} if mode == "default" else list_mode_options(mode)
    assert slice_copies.Inductor(False).patches(mode, None) == want


def test_options_are_inductors_settings_and_a_misspelt_one_is_refused():
    inductor = slice_copies.Inductor(False)
    assert inductor.patches(None, {"cpp-wrapper": True, "guard_filter_fn": print}) == {
        "cpp_wrapper": True}  # (torch.compile takes a guard filter for itself)
    with pytest.raises(RuntimeError, match="Unexpected optimization option no_such_option"):
        slice_copies.Inductor(False, None, {"no_such_option": 1})
    w = torch.randn(2 * HIDDEN, INPUT + HIDDEN, requires_grad=True)
    b = torch.randn(2 * HIDDEN, requires_grad=True)
    xb = MaskedBatch.fromlist([torch.randn(1, n, INPUT) for n in (3, 1)], (True, False))
    compiled = matchbox.compile(cell, options={"no_such_option": 1})
    with pytest.raises(RuntimeError, match="Unexpected optimization option no_such_option"):
        compiled(xb, w, b)


def cell(x, w, b):
    """A state ``(h, c)`` chunked and concatenated every step, as the TreeLSTM's is (its
    loop a scan; an example whose sequence has ended keeps its state)."""
    state = x.new_zeros(x.size(0), 2 * HIDDEN)

    def step(xt, state):
        h, c = state.chunk(2, -1)
        i, g = (torch.cat([xt, h], -1) @ w.t() + b).chunk(2, -1)
        c = i.sigmoid() * c + g.tanh()
        return (F.update(state, torch.cat([c.tanh() * h, c], -1)),)

    (state,), _ = loops.scan_stacked(step, (state,), list(x.unbind(1)))
    return state


def compiled_with_code(dtype, options=None):
    """The cell compiled, its inputs, and inductor's code; inductor's tables as they are
    while it compiles, seen at each call of the decomposition."""
    torch.manual_seed(0)
    w = torch.randn(2 * HIDDEN, INPUT + HIDDEN, dtype=dtype, requires_grad=True)
    b = torch.randn(2 * HIDDEN, dtype=dtype, requires_grad=True)
    examples = [torch.randn(1, n, INPUT, dtype=dtype, requires_grad=True) for n in (6, 0, 1, 5)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    compiled = matchbox.compile(cell, backend="inductor", options=options)
    seen = []

    def recording(*args):
        seen.append(in_tables())
        return decompose(*args)

    decompose, slice_copies.slice_copy = slice_copies.slice_copy, recording
    # Compiled from scratch (inductor's code is seen), not taken from its caches.
    try:
        with torch._functorch.config.patch(enable_autograd_cache=False), \
                torch._inductor.config.patch(fx_graph_cache=False):
            out, code = run_and_get_code(compiled, xb, w, b)
    finally:
        slice_copies.slice_copy = decompose
    assert [s.scans for s in compiled.specializations] == [1]
    # Given to inductor as its parameter: its own tables never hold it.
    assert seen and all(tables == [False, False] for tables in seen)
    assert in_tables() == [False, False]
    return compiled, (xb, w, b, examples), out, code


def test_a_bodys_slices_are_fused_with_the_loops_values_and_gradients(dtype):
    _, (xb, w, b, examples), out, code = compiled_with_code(dtype)
    assert code and not any("slice_copy" in c for c in code)
    assert all("cpp_wrapper_src" in c for c in code)  # (scan_settings: on the CPU)
    loop = [cell(x, w, b) for x in examples]
    for n, (got, want) in enumerate(zip(out.examples(), loop)):
        torch.testing.assert_close(got, want, msg=lambda m, n=n: f"example {n}: {m}")
    got = torch.autograd.grad(matchbox.batch_sum(out * out), [xb.data, w, b])
    want = torch.autograd.grad(sum((lo * lo).sum() for lo in loop), [*examples, w, b],
                               allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(got[1], want[-2], msg="w")
    torch.testing.assert_close(got[2], want[-1], msg="b")
    for n, (x, g) in enumerate(zip(examples, want)):
        torch.testing.assert_close(got[0][n:n + 1, :x.size(1)], g,
                                   msg=lambda m, n=n: f"input of example {n}: {m}")


def test_the_options_reach_inductor_with_the_decomposition():
    # The C++ wrapper a CPU scan graph is built with (scan_settings) turned off by an option.
    _, _, _, code = compiled_with_code(torch.float64, {"cpp_wrapper": False})
    assert code and not any("slice_copy" in c or "cpp_wrapper_src" in c for c in code)
