"""Reductions over static and dynamic dimensions.

Semantics: dimension numbers are those of one example; dimension 0 (each
example's own batch dimension of size one) cannot be reduced across the batch
(use ``matchbox.batch_sum``).  Over a static dimension the data is reduced as
is: padding only reaches padding.  Over a dynamic dimension padding is first
replaced by the op's identity (0 for ``sum``, ``-inf`` for ``max``, ...), and
``mean``/``var``/``std`` divide by each example's own count.  The reduced
dimension leaves the mask; when no dynamic dimension remains, every example
is real (the reduction of an empty example is real, as in the loop: ``sum``
gives 0, ``mean`` NaN, ``var`` of too few elements NaN or inf).  ``max``/
``min``/``amax``/``amin``/``arg*`` and norms of order ``inf`` or below 0 (no
identity) of an empty example raise, as in the loop.  Examples that are
scalars (``dims == ()``) reduce to themselves, never across the batch.
``var``/``std`` over a dynamic dimension (or without ``dim``) use torch's own
gradient formula, so even degenerate examples get the loop's gradients.

One family (``reduction``), a module per concern: ``_reduce`` (what every reduction
shares), ``sums`` (reductions with an identity), ``variance`` (``var``/``std``, and with
the mean: ``var_mean``/``std_mean``), ``extremes`` (``max``/``min``/``amax``/``amin``/
``aminmax``/``argmax``/``argmin``) and ``norms``.
"""

# Importing the modules registers their ops.
from matchbox.ops.reductions import sums, variance, extremes, norms  # noqa: I001
from matchbox.ops.reductions import _reduce
from matchbox.ops.reductions._reduce import *  # noqa: F403 (the shared helpers: _reduce.__all__)

__all__ = list(_reduce.__all__)
