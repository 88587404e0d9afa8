"""Op families of ``PackedBatch``, one module each; importing them fills core's registry.

Every handler is registered under the batch type ``"PackedBatch"`` through
``matchbox.packed._dispatch.implements``, which applies the mixing rule first
(an op that also holds a ``MaskedBatch`` goes to ``MaskedBatch``'s dispatch;
see ``matchbox.packed.mixing``).

| family            | module          | what happens to the layout                              |
|-------------------|-----------------|---------------------------------------------------------|
| pointwise         | pointwise.py    | kept: the op runs on the packed rows; another batch's   |
|                   |                 | rows are brought into the first one's order              |
| layers            | layers.py       | kept: linear, embedding, dropout, layer/rms norm on rows |
| linalg            | linalg.py       | kept: batch @ plain (F, K) matrix, row by row            |
| reduction         | segments.py     | static dims: kept; packed dim 1: segment op, the result |
|                   |                 | is a MaskedBatch of static examples in caller order      |
| softmax           | segments.py     | kept; over dim 1 a segment max / exp / segment sum       |
| recurrent_modules | recurrent.py    | kept: cuDNN's packed call on data as is; final states   |
|                   |                 | are views of a MaskedBatch (matchbox-nn's state views)   |
| shape             | shape.py        | cat: static dims keep it; dim 1 builds the summed lengths |
|                   |                 | transpose(0, 1): matchbox-nn's time-major view of it     |
| conversion        | conversion.py   | casts keep it; device moves move its device tensors      |
| embedding, repeat,| rows.py         | kept: one_hot, repeat/tile/repeat_interleave, roll,      |
| ordering, matrix  |                 | tril/triu, diagonal within each row's static dims; along |
|                   |                 | the packed dim 1 they raise (use as_masked)              |
"""

from matchbox.packed.ops import (  # noqa: F401
    conversion,
    layers,
    linalg,
    pointwise,
    recurrent,
    rows,
    segments,
    shape,
)
