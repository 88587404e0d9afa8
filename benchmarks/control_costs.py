"""Where ``@batch``'s time goes: ATen ops, host syncs and saved memory per forward.

For every model of ``benchmarks.report`` (the control-flow models: the README
RNN, the halting ``while``, the shift-reduce TreeLSTM; and the layers without
control flow: ``nn.LSTM``, ``nn.TransformerEncoderLayer``), counts what one
forward runs (``TorchDispatchMode``), for Matchbox and for the hand-written
code (padded; ``PackedSequence`` for the LSTM): every ATen op, the
``where``s and ``.any()``s apart, and the host syncs (``.item()``/``bool()``
of a tensor, ``.tolist()``, ``nonzero``: each a device-to-host sync on an
accelerator, which stalls the launch queue).  Also the bytes autograd saves
for the backward pass (the memory a training step holds), counted with
``saved_tensors_hooks``.  Counts do not depend on the machine.

``@batch`` is counted as it runs on an accelerator
(``matchbox._masking.host_reads(False)``: no mask is read on the host to skip
work) and as it runs on the CPU (masks read where that spares ops).  Then times
single ops on a ``(batch, hidden)`` tensor, with and without autograd, so the
counts can be read as microseconds; times depend on the machine.

    python -m benchmarks.control_costs [--batch 32] [--size 64]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import random
import traceback
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import matchbox
from benchmarks._harness import machine, median_seconds, table, write

#: The ops that read a value on the host: a device-to-host sync on an accelerator.
#: (``bool(t)``/``int(t)``/``t.item()`` reach ATen as ``_local_scalar_dense``;
#: ``tolist`` does not reach ATen and is counted apart.)
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "tolist")


@dataclasses.dataclass
class Counts:
    """What one call ran: ATen ops by name (``tolist`` included), and where each sync
    came from (the innermost Matchbox frame that is not ``_capture``)."""

    ops: collections.Counter
    sync_sites: collections.Counter

    @property
    def total(self) -> int:
        return sum(n for op, n in self.ops.items() if op != "tolist")

    @property
    def syncs(self) -> int:
        return sum(self.ops[op] for op in SYNC_OPS)

    def syncs_from(self, *parts: str) -> int:
        """Syncs whose site's path contains one of ``parts`` (``"control/runtime"``)."""
        return sum(n for site, n in self.sync_sites.items() if any(p in site for p in parts))


def _site() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace("\\", "/")
        if "/matchbox/" in name and not name.endswith("_capture.py"):
            return f"{name.split('/matchbox/', 1)[1]}:{frame.lineno}"
    return "model"


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts(collections.Counter(), collections.Counter())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        self.counts.ops[name] += 1
        if name in SYNC_OPS:
            self.counts.sync_sites[_site()] += 1
        return func(*args, **(kwargs or {}))


def count(fn: Callable[[], object]) -> Counts:
    """The ATen ops and host syncs of ``fn()``."""
    tolist = torch.Tensor.tolist
    with _OpCounter() as counter:
        def counted_tolist(self):  # noqa: ANN001, ANN202
            counter.counts.ops["tolist"] += 1
            counter.counts.sync_sites[_site()] += 1
            return tolist(self)
        torch.Tensor.tolist = counted_tolist
        try:
            fn()
        finally:
            torch.Tensor.tolist = tolist
    return counter.counts


def count_ops(fn) -> collections.Counter[str]:  # noqa: ANN001
    return count(fn).ops


def saved_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the tensors autograd saves for the backward of ``fn()`` (each storage once)."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


class _OutputBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and not t._is_view():
                self.bytes += t.numel() * t.element_size()
        return out


def written_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the new tensors the ops of ``fn()`` write (views not counted): the memory
    traffic of a forward, where a copy of a whole stack shows."""
    with _OutputBytes() as counter:
        fn()
    return counter.bytes


@dataclasses.dataclass
class Model:
    """A model's forwards: ``@batch`` and hand-written, and its loop iterations."""

    name: str
    batched: Callable[[], object]
    hand: Callable[[], object]
    iterations: int


def models(batch: int = 32, size: int = 64, longest: int = 60) -> list[Model]:
    """The README RNN (lengths 5 to ``longest``), the halting while, the TreeLSTM (5 to
    ``longest`` leaves), then an ``nn.LSTM`` and an ``nn.TransformerEncoderLayer`` (hidden
    ``size``, lengths 5 to ``longest``; one call each, no Python loop)."""
    from benchmarks.control_rnn import hand_padded
    from benchmarks.control_while import Halting, hand_written, step_counts
    from benchmarks.treelstm import LIMIT, build
    from examples.readme_rnn import RNN
    from matchbox import MaskedBatch

    rng = random.Random(0)
    lengths = [rng.randint(5, longest) for _ in range(batch)]
    torch.manual_seed(0)
    rnn = RNN(size)
    xb = MaskedBatch.fromlist([torch.randn(1, n, size) for n in lengths], (True, False))
    lengths_t = torch.tensor(lengths)
    torch.manual_seed(0)
    halting = Halting(size)
    hb = MaskedBatch.fromlist([torch.randn(1, size) * 2 for _ in range(batch)], (False,))
    steps = int(step_counts(halting, hb.data).max())
    rng = random.Random(0)
    leaves = [rng.randint(5, longest) for _ in range(batch)]
    trees = build(leaves, size, "cpu")
    return [
        Model(f"README RNN, hidden {size}", lambda: rnn(xb),
              lambda: hand_padded(rnn, xb.data, lengths_t), max(lengths)),
        Model(f"halting while, hidden {size}", lambda: halting(hb),
              lambda: hand_written(halting, hb.data), steps),
        Model(f"TreeLSTM, hidden {size}", trees["Matchbox"], trees[LIMIT],
              2 * max(leaves) - 1),
        *layer_models(lengths, size),
    ]


def layer_models(lengths: list[int], size: int) -> list[Model]:
    """``nn.LSTM`` (against ``PackedSequence``) and ``nn.TransformerEncoderLayer`` (against
    the padded layer with a key padding mask) on examples of ``lengths``, as the report
    runs them."""
    from benchmarks import lstm_module, nn_transformer

    torch.manual_seed(0)
    examples = [torch.randn(1, n, size) for n in lengths]
    lstm = lstm_module.variants(torch.nn.LSTM(size, size, batch_first=True), examples, "cpu")
    layer = torch.nn.TransformerEncoderLayer(size, 4, 2 * size, dropout=0.0, batch_first=True)
    encoder = nn_transformer.variants(layer, examples)
    return [
        Model(f"LSTM, hidden {size}", lstm["Matchbox"], lstm[lstm_module.BASELINE], 1),
        Model(f"transformer encoder layer, width {size}", encoder["Matchbox"],
              encoder[nn_transformer.BASELINE], 1),
    ]


def host_reads(allowed: bool):  # noqa: ANN201
    """``matchbox._masking.host_reads`` (a no-op on code from before it existed, so that
    this file counts an older checkout too)."""
    try:
        from matchbox._masking import host_reads as reads
    except ImportError:
        return contextlib.nullcontext()
    return reads(allowed)


def async_checks(enabled: bool):  # noqa: ANN201
    """``matchbox.set_async_checks`` (a no-op on code from before it existed)."""
    setting = getattr(matchbox, "set_async_checks", None)
    return contextlib.nullcontext() if setting is None or not enabled else setting(True)


def model_rows(model: Model) -> list[list[str]]:
    hand = count(model.hand)
    hand_sizes = (saved_bytes(model.hand), written_bytes(model.hand))
    rows = []
    for variant, reads, asynchronous in (("@batch (accelerator)", False, False),
                                         ("@batch (accelerator, async checks)", False, True),
                                         ("@batch (CPU)", True, False)):
        with host_reads(reads), async_checks(asynchronous):
            counts = count(model.batched)
            sizes = (saved_bytes(model.batched), written_bytes(model.batched))
            if asynchronous and hasattr(matchbox, "raise_pending_checks"):
                matchbox.raise_pending_checks()
        rows.append(_row(model, variant, counts, sizes, hand, hand_sizes))
    rows.append(_row(model, "hand-written", hand, hand_sizes, hand, hand_sizes))
    return rows


def _row(model: Model, variant: str, counts: Counts, sizes: tuple[int, int], hand: Counts,
         hand_sizes: tuple[int, int]) -> list[str]:
    (kept, written), (hand_kept, hand_written) = sizes, hand_sizes
    return [model.name, variant, str(model.iterations), str(counts.total),
            f"{counts.total / hand.total:.2f}", str(counts.ops["where"]),
            str(counts.ops["any"]), str(counts.syncs),
            f"{kept / 2 ** 20:.1f}", f"{kept / max(hand_kept, 1):.2f}",
            f"{written / 2 ** 20:.1f}", f"{written / max(hand_written, 1):.2f}"]


def single_op_rows(batch: int, size: int, repeats: int) -> list[list[str]]:
    """Microseconds of one op on ``(batch, size)`` floats (median of ``repeats`` runs)."""
    x = torch.randn(batch, size, requires_grad=True)
    y = torch.randn(batch, size, requires_grad=True)
    rows_mask = (torch.rand(batch) > 0.3).view(batch, 1)
    zero = torch.zeros(())
    ops = {
        "x + y": lambda: x + y,
        "where(rows, x, y) (a merge)": lambda: torch.where(rows_mask, x, y),
        "where(rows, x, 0) (a guard)": lambda: torch.where(rows_mask, x, zero),
        "bool(rows.any()) (a sync on the GPU)": lambda: bool(rows_mask.any()),
    }
    calls = 200
    result = []
    for name, op in ops.items():
        def many(op=op):
            for _ in range(calls):
                op()
        with_grad = median_seconds(many, repeats) / calls
        with torch.no_grad():
            without = median_seconds(many, repeats) / calls
        result.append([name, f"{with_grad * 1e6:.2f}", f"{without * 1e6:.2f}"])
    return result


HEADERS = ["model", "variant", "iterations", "ATen ops", "× hand", "where", "any",
           "host syncs", "saved MiB", "× hand", "written MiB", "× hand"]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    rows = []
    for model in models(args.batch, args.size):
        rows += model_rows(model)
    timed = single_op_rows(args.batch, args.size, max(args.repeats, 3))
    text = (f"### What a forward of @batch runs: batch {args.batch}\n\n{machine()}\n\n"
            "Per forward (counts do not depend on the machine; saved MiB: what autograd "
            "keeps for the backward; written MiB: the new tensors the ops write, views "
            "not counted):\n\n"
            + table(HEADERS, rows)
            + f"\n\nOne op on ({args.batch}, {args.size}) floats, µs:\n\n"
            + table(["op", "with autograd", "no grad"], timed))
    print(text)
    print(f"\nwritten to {write('control_costs', text)}")
    return text


if __name__ == "__main__":
    main()
