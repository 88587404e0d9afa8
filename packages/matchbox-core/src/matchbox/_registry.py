"""The one op registry of Matchbox and the one dispatch every batch type goes through.

This module is a facade: it gathers the registry's names for code that
imports them from here (``from matchbox import _registry``).  Each concern has
its own module, which code inside matchbox-core imports directly:

- ``matchbox._op_table``: the table of ops (``implements``, ``register``,
  ``lookup``, ``entries``, ``op_name``), the batch types' routes, and the list
  of convenience methods for the op documentation;
- ``matchbox._dispatch``: the one dispatch (each batch type's
  ``__torch_function__``), profiler labels, mixing of batch types and the
  dispatch's errors;
- ``matchbox._methods``: making a class a batch type, its generated
  ``Tensor`` methods, and the guard in front of a handler's fast path;
- ``matchbox._batch_views``: the views of batches that matchbox-nn provides
  (``transpose(0, 1)`` of a batch; ``BATCH_VIEWS`` for matchbox-control).

Public names for other distributions are in ``matchbox.extending``.
"""

from __future__ import annotations

from matchbox._batch_views import (
    BATCH_VIEWS,
    batch_dim_view,
    provide_batch_dim_view,
    register_batch_view,
)
from matchbox._dispatch import (
    adopt,
    adopt_with,
    binding,
    declare_provider,
    dispatch,
    int_argument,
    labelled,
    refuse_out,
    refuse_per_example,
    register_conversion,
    unsupported,
)
from matchbox._methods import guarded, register_host
from matchbox._op_table import (
    DIRECT,
    Handler,
    Kind,
    OpEntry,
    batch_type_names,
    batch_types,
    convenience_methods,
    declare_convenience,
    entries,
    implements,
    kind_of,
    lookup,
    op_name,
    register,
    tensor_method_name,
    tensor_method_names,
    writes_first_argument,
)
from matchbox._sizes import refuse_size_number

__all__ = [
    "BATCH_VIEWS", "DIRECT", "Handler", "Kind", "OpEntry", "adopt", "adopt_with",
    "batch_dim_view", "batch_type_names", "batch_types", "binding", "convenience_methods",
    "declare_convenience", "declare_provider", "dispatch", "entries", "guarded", "implements",
    "int_argument",
    "kind_of", "labelled", "lookup", "op_name", "provide_batch_dim_view", "refuse_out",
    "refuse_per_example", "refuse_size_number",
    "register", "register_batch_view", "register_conversion", "register_host",
    "tensor_method_name", "tensor_method_names", "unsupported", "writes_first_argument",
]
