"""The demo (`python3 dev.py demo`) runs end to end on a small corpus and writes its outputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", ROOT / "examples" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", ["gru", "lstm"])
def test_demo_trains_checks_and_writes_its_table(tmp_path, capsys, model):
    # The GRU's table has its matchbox.compile row (inductor, one graph); the LSTM's is
    # eager only (--eager-only), which keeps the test from compiling twice.
    demo = load_demo()
    demo.main(["--model", model, "--steps", "3", "--lines", "300", "--size", "16",
               "--batch-size", "8", "--timing-examples", "8", "--repeats", "1",
               "--device", "cpu", "--out", str(tmp_path)]
              + (["--eager-only"] if model == "lstm" else []))
    printed = capsys.readouterr().out
    assert "equal the per-example loop's  [ok]" in printed
    table = (tmp_path / "demo.md").read_text()
    for variant in ("per-example loop", "Matchbox", "hand-padded PyTorch"):
        assert f"| {variant} |" in table
    compiled = [row for row in table.splitlines() if row.startswith(f"| {demo.COMPILED} |")]
    if model == "lstm":
        assert compiled == []
    else:  # its last column: the seconds its graph took to compile
        (row,) = compiled
        assert float(row.strip("| ").split(" | ")[-1]) > 0


def test_demo_model_equals_the_loop_on_a_batch_with_nan_padding():
    import torch

    from matchbox import MaskedBatch
    from matchbox.testing import mb_assert

    demo = load_demo()
    torch.manual_seed(0)
    model = demo.CodeLM(20, 8, "lstm").double()
    lines = [torch.randint(0, 20, (1, n)) for n in (2, 5, 3, 9)]
    # Ids' padding may hold anything, even ids outside the vocabulary.
    batch = MaskedBatch.fromlist(lines, (True,), padding_value=10**6)
    mb_assert(model, [lines], [batch], len(lines))


@pytest.mark.compiled_loops  # not run by tox's `oldest` (tox.ini)
def test_the_demo_model_compiles_one_graph_for_every_padded_length():
    # Its loop appends each state and stacks them after the loop (F.stack(states, 1)): the
    # scan's per-step outputs stay stacked (matchbox/control/runtime/step_outputs.py), so
    # one graph of symbolic sizes serves every bucket. Values and gradients equal eager's.
    import copy

    import torch

    import matchbox
    from matchbox import MaskedBatch
    from matchbox.compiler import loops

    demo = load_demo()
    torch.manual_seed(0)
    model = demo.CodeLM(20, 8, "gru").double()
    eager = copy.deepcopy(model)
    compiled = matchbox.compile(model, backend="aot_eager", fallback="raise")
    for lengths in ([6, 2, 4], [14, 3], [22, 9, 5, 2], [7, 7]):  # padded 8, 16, 24, 8
        lines = [torch.randint(0, 20, (1, n)) for n in lengths]
        batch = MaskedBatch.fromlist(lines, (True,), padding_value=10**6)
        model.zero_grad()
        eager.zero_grad()
        loss, expected = compiled(batch), eager(batch)
        torch.testing.assert_close(loss.data, expected.data, rtol=0, atol=1e-12)
        matchbox.batch_mean(loss).backward()
        matchbox.batch_mean(expected).backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-12)
    specs = compiled.specializations
    if loops.available():
        assert [(s.calls, s.scans, s.fixed_sizes_because) for s in specs] == [(4, 1, None)]
    else:  # torch 2.3: no scan, the loop unrolls to each padded length (8, 16, 24)
        assert len(specs) == 3
