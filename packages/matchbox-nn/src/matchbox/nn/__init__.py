"""Masked neural-network layers and losses for Matchbox (distribution ``matchbox-nn``).

Importing this package (which ``import matchbox`` does when it is installed)
registers its op families into matchbox-core's one registry, so ``torch.nn``
modules and ``torch.nn.functional`` calls accept ``MaskedBatch`` arguments.

Implemented so far: ``linear``, the recurrent cells (``nn.RNNCell``,
``nn.LSTMCell``, ``nn.GRUCell``) and whole recurrent modules (``nn.RNN``,
``nn.LSTM``, ``nn.GRU``, through PyTorch's packed path; ``time_major`` /
``batch_major`` for modules built with ``batch_first=False``).  The rest of
the nn contract (softmax over dynamic dimensions, normalisation, losses,
convolutions, attention) is the matchbox-nn issue's work and raises
``NotImplementedError`` naming the op until then.
"""

from matchbox.nn.ops import linear, recurrent_cells, recurrent_modules  # noqa: F401
from matchbox.nn.time_major import TimeMajorBatch, batch_major, time_major

__all__: list[str] = ["TimeMajorBatch", "batch_major", "time_major"]

# The basic nn families (softmax, normalisation, dropout, embedding, activations, losses).
from matchbox.nn.ops import (  # noqa: E402,F401
    activations,
    dropout,
    embedding,
    losses,
    normalization,
    softmax,
)

# isort: split
# Attention: F.scaled_dot_product_attention and nn.MultiheadAttention (and the
# Transformer layers built from them).
from matchbox.nn.ops import attention, multihead_attention  # noqa: E402,F401
from matchbox.nn.transformer import run_decoder, run_encoder  # noqa: E402

__all__ += ["run_decoder", "run_encoder"]
