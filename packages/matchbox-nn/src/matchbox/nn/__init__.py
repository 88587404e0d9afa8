"""Masked neural-network layers and losses for Matchbox (distribution ``matchbox-nn``).

This subpackage will hold implementations of ``torch.nn`` functionals and modules
that accept ``MaskedBatch`` inputs: linear and bilinear layers, embeddings,
dropout, softmax and log-softmax over dynamic dimensions, normalisation layers,
activations, per-example losses, convolutions and pooling over dynamic
dimensions, attention, recurrent cells and whole RNN/LSTM/GRU modules.
"""

__all__: list[str] = []
