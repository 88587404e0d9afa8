"""Masked neural-network layers and losses for Matchbox (distribution ``matchbox-nn``).

Importing this package (which ``import matchbox`` does when it is installed)
registers its op families into matchbox-core's one registry, so ``torch.nn``
modules and ``torch.nn.functional`` calls accept ``MaskedBatch`` arguments.
One module per family under ``matchbox/nn/ops/``; the table in its
``__init__`` says what each family does with the mask, and ``docs/ops.md``
lists every supported op.

Families: ``linear``/``bilinear``; ``embedding``; softmax and friends (over
dynamic dimensions too); ``layer_norm``/``rms_norm``; dropout; activations;
per-example losses; convolutions, pooling and ``F.pad`` over dynamic spatial
dimensions; recurrent cells and whole ``nn.RNN``/``nn.LSTM``/``nn.GRU``
modules (PyTorch's packed path; ``time_major`` / ``batch_major`` for modules
built with ``batch_first=False``).
"""

from matchbox.nn.ops import (  # noqa: F401
    activations,
    convolution,
    dropout,
    embedding,
    linear,
    losses,
    normalization,
    padding,
    pooling,
    recurrent_cells,
    recurrent_modules,
    softmax,
)
from matchbox.nn.time_major import TimeMajorBatch, batch_major, time_major

__all__: list[str] = ["TimeMajorBatch", "batch_major", "time_major"]
