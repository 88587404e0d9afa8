"""Control-flow rewriting for Matchbox (distribution ``matchbox-control``).

This subpackage will hold the ``@batch`` decorator, which rewrites the Python
control flow of code written for one example (``if``, ``while``, ``for``,
``break``, ``continue``, ``return``) into a SIMT-like form with execution masks,
so that the code runs on a whole ``MaskedBatch``.
"""

# `batch` (the decorator re-exported as `matchbox.batch`) will be defined here.

__all__: list[str] = []
