"""Masked neural-network layers and losses for Matchbox (distribution ``matchbox-nn``).

Importing this package (which ``import matchbox`` does when it is installed)
registers its op families into matchbox-core's one registry, so ``torch.nn``
modules and ``torch.nn.functional`` calls accept ``MaskedBatch`` arguments.
One module per family under ``matchbox/nn/ops/``; the table in its
``__init__`` says what each family does with the mask, and ``docs/ops.md``
lists every supported op.

Families: ``linear``/``bilinear``; ``embedding`` and ``one_hot``; softmax and
friends (over dynamic dimensions too); ``layer_norm``/``rms_norm``,
``group_norm``/``instance_norm``/``batch_norm``; dropout; activations;
per-example losses (``ctc_loss`` too); convolutions (1D to 3D), pooling and
``F.pad`` over dynamic spatial dimensions; ``scaled_dot_product_attention`` and
``nn.MultiheadAttention`` (so the Transformer layers; ``run_encoder`` / ``run_decoder`` for the stacks);
recurrent cells and whole ``nn.RNN``/``nn.LSTM``/``nn.GRU`` modules (PyTorch's
packed path; their final states are per-example views); ``TimeMajorBatch``,
the view of a batch with each example's batch dimension in position 1
(``time_major`` / ``batch_major``: for modules built with ``batch_first=False``,
and the recurrent modules' states).
"""

from matchbox.compiler import hide_from_torch_compile
from matchbox.nn.ops import (  # noqa: F401
    activations,
    attention,
    convolution,
    dropout,
    embedding,
    linear,
    losses,
    metric_losses,
    multihead_attention,
    normalization,
    padding,
    pooling,
    recurrent_cells,
    recurrent_modules,
    resampling,
    softmax,
    time_major_views,
)
from matchbox.nn.time_major import TimeMajorBatch, batch_major, time_major
from matchbox.nn.transformer import run_decoder, run_encoder

hide_from_torch_compile(__name__)  # torch.compile runs this package eagerly

__all__: list[str] = ["TimeMajorBatch", "batch_major", "run_decoder", "run_encoder",
                      "time_major"]
