"""A slice's copy in a scan's body is fused by inductor, not an ATen call each step
(``matchbox.compiler.slice_copies``).  Torch functionalizes a scan's joint graph with its
views as copies; inductor (torch 2.13) has no decomposition or lowering for ``slice_copy``
(a ``chunk``'s pieces, a ``cat``'s backward), and called ATen for each one at every step:
9 a step in the TreeLSTM's forward, 4 in its backward.

Pinned: the decomposition's values, that it is in inductor's table only while a graph
holding a scan is called, and a compiled scan whose body chunks and concatenates: no
``slice_copy`` in inductor's code, values and gradients those of the per-example loop with
NaN padding.
"""

from __future__ import annotations

import pytest
import torch

import matchbox
import matchbox.functional as F
from matchbox import MaskedBatch
from matchbox.compiler import loops, slice_copies
from matchbox.compiler.graph import with_settings

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


def test_the_decomposition_is_in_inductors_tables_only_during_a_call():
    assert slice_copies.available()
    seen = []

    def compiled(depth):
        seen.append(in_tables())
        return depth and run(depth - 1)  # reentrant: an inner call leaves it on

    run = with_settings(compiled, slice_copies.settings())
    assert in_tables() == [False, False]
    run(1)
    assert seen == [[True, True], [True, True]]
    assert in_tables() == [False, False]


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


def test_a_bodys_slices_are_fused_with_the_loops_values_and_gradients(dtype):
    torch.manual_seed(0)
    w = torch.randn(2 * HIDDEN, INPUT + HIDDEN, dtype=dtype, requires_grad=True)
    b = torch.randn(2 * HIDDEN, dtype=dtype, requires_grad=True)
    examples = [torch.randn(1, n, INPUT, dtype=dtype, requires_grad=True) for n in (6, 0, 1, 5)]
    xb = MaskedBatch.fromlist(examples, (True, False), padding_value=float("nan"))
    compiled = matchbox.compile(cell, backend="inductor")
    # Compiled from scratch (inductor's code is seen), not taken from its caches.
    with torch._functorch.config.patch(enable_autograd_cache=False), \
            torch._inductor.config.patch(fx_graph_cache=False):
        out, code = run_and_get_code(compiled, xb, w, b)
    assert [s.scans for s in compiled.specializations] == [1]
    assert code and not any("slice_copy" in c for c in code)
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
