"""Masked neural-network layers and losses for Matchbox (distribution ``matchbox-nn``).

Importing this package (which ``import matchbox`` does when it is installed)
registers its op families into matchbox-core's one registry, so ``torch.nn``
modules and ``torch.nn.functional`` calls accept ``MaskedBatch`` arguments.

Implemented so far: ``linear`` and the recurrent cells (``nn.RNNCell``,
``nn.LSTMCell``, ``nn.GRUCell``).  The rest of the nn contract (softmax over
dynamic dimensions, normalisation, losses, convolutions, attention, whole
RNN modules) is the matchbox-nn issue's work and raises ``NotImplementedError``
naming the op until then.
"""

from matchbox.nn.ops import linear, recurrent_cells  # noqa: F401

__all__: list[str] = []
