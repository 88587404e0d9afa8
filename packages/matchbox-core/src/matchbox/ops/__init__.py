"""Op families of ``MaskedBatch``, one module each (a package for a family split by
concern: ``shape/``, ``reductions/``, ``gather/``); importing them fills the registry.

| family        | module          | what happens to the mask                              |
|---------------|-----------------|-------------------------------------------------------|
| pointwise     | pointwise.py    | broadcast like the examples; masks combined with and  |
| reduction     | reductions/     | static dim: kept; dynamic dim: padding filled with the |
|               |                 | op's identity first, the dimension leaves the mask     |
|               | covariance.py   | (cov/corrcoef: each example one variable, one number)  |
| linalg        | linalg.py       | padding zeroed; result real where both rows and        |
|               |                 | columns are real                                       |
|               | tensordot.py    | (tensordot: the einsum it is)                          |
|               | linalg_adds.py  | (addmm/addmv/baddbmm: beta * input + alpha * product)  |
|               | vector_products | (dot/vdot/outer/ger/mv: einsum; kron(batch, plain):    |
|               | .py             | the mask repeated along dynamic dims)                  |
|               | vanders.py      | (vander/linalg.vander: the mask gains the powers' dim) |
| shape         | shape/          | the same view/permutation applied to data and mask    |
| indexing      | indexing.py     | the same index applied to data and mask; negative     |
|               |                 | indices along dynamic dims count from each example's end |
|               | one_position.py | (a batch of per-example ints: each example's own index; |
|               |                 | the range check every one-position read shares)        |
| gather        | gather/         | gather/take_along_dim/x[:, idx]: the index's layout   |
|               |                 | (positions inside each example, checked); scatter:    |
|               |                 | the input's (padding index positions write nowhere)   |
| ordering      | ordering.py     | scans, sorts, topk, flips, roll: static: on the data, |
|               |                 | mask kept; dynamic dim: within each example's real    |
|               |                 | prefix (padding filled to sort last, scans guarded;   |
|               |                 | flips and rolls permute each example's positions);    |
|               |                 | movedim/mT: the same permutation of data and mask     |
|               | rolls.py        | (roll; a shift of x.size(0) or x.maxsize(d) is refused) |
| repeat        | repeat.py       | repeat/tile/repeat_interleave: static dim: on the     |
|               |                 | data, mask kept; dynamic dim: each example's own      |
|               |                 | values repeated (length r * n), the mask follows      |
| matrix        | matrix.py       | tril/triu: mask kept; diagonal: each example's own    |
|               |                 | length; cdist: padding 0, real where both rows are    |
| selection     | selection.py    | (nan)median/kthvalue/mode/quantile: static dim:       |
|               |                 | torch's op on the data; dynamic dim: each example's   |
|               |                 | k-th real value (stable sort, padding last); dim      |
|               |                 | leaves the mask                                       |
| search        | search.py       | searchsorted/bucketize/isin: the values' layout; a     |
|               |                 | batch of sequences (test elements): each example's own |
| distance      | distances.py    | cosine_similarity/pairwise_distance/dist: aligned as  |
|               |                 | pointwise; a dynamic dim reduced over each example's  |
|               |                 | real positions (padding filled with 0 first)          |
| fft           | fft.py          | static dim: on the data, mask kept; dynamic dim: only |
|               |                 | with n=/s= (padding 0, each signal padded/trimmed to  |
|               |                 | it): the dim becomes static                          |
| constructor   | constructors.py | new batches with the given static/dynamic sizes       |
| conversion    | conversion.py   | dtype changes keep the mask; device moves move it     |
"""

from matchbox.ops import (  # noqa: F401
    constructors,
    conversion,
    covariance,
    distances,
    fft,
    gather,
    indexing,
    linalg,
    linalg_adds,
    matrix,
    ordering,
    pointwise,
    reductions,
    repeat,
    rolls,
    search,
    selection,
    shape,
    tensordot,
    vanders,
    vector_products,
)
