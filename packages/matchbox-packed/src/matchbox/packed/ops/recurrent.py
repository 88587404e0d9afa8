"""``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU`` on a ``PackedBatch``: cuDNN's packed path, no copy.

A module called on a ``PackedBatch`` asks it for ``dim()``, ``size(0)`` (the
batch size), ``size(-1)``, ``dtype`` and ``device``, builds zero initial
states of that batch size when none are given, then calls ``torch.lstm``
(``torch.gru``, ``torch.rnn_tanh``, ``torch.rnn_relu``), which reaches this
handler through ``PackedBatch.__torch_function__``.  The batch's ``data`` and
``batch_sizes`` are handed to the packed variant of the op as they are: they
already are the packed layout cuDNN reads, so nothing is copied or padded.
The shared packed call is matchbox-nn's ``run_on_rows`` (the ``MaskedBatch``
path gathers its rows first, this one does not need to).

| argument / result | per example                 | on the batch                                   |
|-------------------|-----------------------------|------------------------------------------------|
| input             | ``(1, T, F)``               | ``PackedBatch``                                |
| initial states    | ``(L*D, 1, H)``             | a state view, or plain ``(L*D, B, H)`` in caller order |
| output            | ``(1, T, D*H)``             | ``PackedBatch`` of the input's layout          |
| final states      | ``(L*D, 1, H)``             | state views (``TimeMajorBatch`` of a ``MaskedBatch``) |
| ``T == 0``        | PyTorch refuses             | no output rows; final state = initial state    |

States are matchbox-nn's state views, as for a ``MaskedBatch`` input (see
``matchbox.nn.ops.recurrent_modules``): they have static sizes, so there is
nothing to pack.  ``batch_first=False`` modules take ``x.transpose(0, 1)``
(``matchbox.nn.time_major(x)``), as for a ``MaskedBatch``.  Dropout between
layers (training) draws its own numbers.
"""

from __future__ import annotations

from matchbox.extending import implements, op_name
from matchbox.nn.extending import (
    RECURRENT_MODULE_OPS,
    check_batch_first,
    refuse_under_functorch,
    run_on_rows,
)
from matchbox.packed.packed_batch import PackedBatch


@implements(*RECURRENT_MODULE_OPS, family="recurrent_modules", batch_type="PackedBatch")
def recurrent_module(func, input, hx, params, has_biases, num_layers, dropout, train,
                     bidirectional, batch_first):
    op = op_name(func)
    check_batch_first(op, batch_first, input)
    if not isinstance(input, PackedBatch):
        raise TypeError(f"{op}: the input must be the PackedBatch; got "
                        f"{type(input).__name__}")
    if input.dim() != 3:
        raise ValueError(f"{op}: each example must be (1, length, features); got examples of "
                         f"rank {input.dim()}")
    settings = (params, has_biases, num_layers, dropout, train, bidirectional)
    refuse_under_functorch(op, "a PackedBatch", "convert with matchbox.packed.as_masked(x) and ")
    rows, final = run_on_rows(op, func, input.data, input.layout, hx, settings)
    return (PackedBatch._make(rows, input.layout), *final)
