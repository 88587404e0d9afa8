"""Op families of ``PackedBatch``, one module each; importing them fills core's registry.

Every handler is registered under the batch type ``"PackedBatch"`` with
``matchbox.extending.implements``.  The one dispatch applies the mixing rule
before any handler (an op that also holds a ``MaskedBatch`` goes to
``MaskedBatch``'s dispatch; see ``matchbox.packed.mixing``).  The row-wise ops
(``linear``, ``layer_norm``, ``rms_norm``, ``embedding``, ``one_hot``,
dropout, ``glu``, ``prelu``, ``normalize``) and the conversions (casts,
device moves, ``contiguous``) are not here: they are one rule for every batch
type (matchbox-nn's and matchbox-core's, registered for ``"Batch"``), which runs
on a ``PackedBatch``'s rows through its ``rows()``/``from_rows()`` and
``positions()``/``from_positions()``.

| family            | module          | what happens to the layout                              |
|-------------------|-----------------|---------------------------------------------------------|
| pointwise         | pointwise.py    | kept: the op runs on the packed rows; another batch's   |
|                   |                 | rows are brought into the first one's order              |
| linalg            | linalg.py       | kept: batch @ plain (F, K) matrix, row by row            |
| reduction         | segments.py     | static dims: kept; packed dim 1: segment op, the result |
|                   |                 | is a MaskedBatch of static examples in caller order      |
| softmax           | segments.py     | kept; over dim 1 a segment max / exp / segment sum       |
| recurrent_modules | recurrent.py    | kept: cuDNN's packed call on data as is; final states   |
|                   |                 | are views of a MaskedBatch (matchbox-nn's state views)   |
| shape             | shape.py        | cat: static dims keep it; dim 1 builds the summed lengths |
|                   |                 | transpose(0, 1): matchbox-nn's time-major view of it     |
| repeat, ordering, | within_rows.py  | kept: repeat/tile/repeat_interleave, roll, tril/triu,    |
| matrix            |                 | diagonal within each row's static dims; along the packed |
|                   |                 | dim 1 they raise (use as_masked)                          |
"""

from matchbox.packed.ops import (  # noqa: F401
    linalg,
    pointwise,
    recurrent,
    segments,
    shape,
    within_rows,
)
