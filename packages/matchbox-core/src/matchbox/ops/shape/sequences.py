"""``torch.nn.utils.rnn.pad_sequence`` of batches.

Per example each sequence is ``(1, *rest)``: ``pad_sequence`` pads dimension 0 (size one
in every one, so nothing is padded) and stacks them, ``(1, n, *rest)`` with the default
``batch_first=False``: the loop's result is ``torch.stack(sequences, 1)``, which is what
runs (its batch rule checks that each example's sequences have one shape, as
``pad_sequence`` needs).  ``batch_first=True`` would put the ``n`` sequences first, each
example's dimension 0 second, so the result would not be an example of a batch: it is
refused, and so is a plain tensor among the sequences (padded along its own dimension 0,
not the examples').
"""

from __future__ import annotations

import torch

from matchbox import _lengths, _registry
from matchbox._batch import Batch


def pad_sequence(func, sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    op = _registry.op_name(func)
    sequences = list(sequences)
    if not all(isinstance(s, Batch) for s in sequences):
        raise NotImplementedError(
            f"{op}: every sequence must be a batch (each example's sequences are (1, ...), "
            "padded along nothing and stacked); a plain tensor among them would be padded "
            "along its own dimension 0 (write torch.stack(sequences, 1), with the plain "
            "tensors of one size per example)")
    if batch_first:
        raise ValueError(
            f"{op}: batch_first=True would put the sequences first and each example's "
            "dimension 0 (size one) second, so the result would not be an example of a "
            "batch; write torch.stack(sequences, 1), what batch_first=False gives")
    return torch.stack(sequences, 1)


# The C function torch.nn.utils.rnn.pad_sequence calls (and reports as its name).
if hasattr(torch._C._nn, "pad_sequence"):
    _registry.register([torch._C._nn.pad_sequence], _lengths.aware(pad_sequence),
                       family="shape")
