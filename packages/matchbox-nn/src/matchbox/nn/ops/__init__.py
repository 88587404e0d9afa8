"""matchbox-nn's op families, one module each (importing them registers them).

| family            | module               | what happens to the mask                                 |
|-------------------|----------------------|----------------------------------------------------------|
| linear            | linear.py            | rows keep their mask; linear runs on the real rows only  |
|                   |                      | (bilinear: real where both inputs are real)              |
| recurrent         | recurrent_cells.py   | a step is real where input and state are real            |
| recurrent_modules | recurrent_modules.py | output keeps the input's mask (only real rows are run);  |
|                   |                      | final states are plain (L*D, B, H) tensors               |
| convolution       | convolution.py       | padding filled with 0; the mask holds each example's own |
|                   |                      | output size (PyTorch's formula); output grads guarded    |
| pooling           | pooling.py           | max: padding -inf; avg: each example's own window count; |
|                   |                      | adaptive: windows from each example's size, pooled dims  |
|                   |                      | become static                                            |
| padding           | padding.py           | F.pad per example (right pads after each example's end); |
|                   |                      | the mask holds the new sizes                             |

``_windows.py`` holds what convolution and pooling share (filling, output sizes,
the empty-output rule for examples shorter than the window).
| softmax           | softmax.py           | kept; over a dynamic dim padding is filled with -inf and |
|                   |                      | the result's padding is 0 (an empty row gives 0, not NaN) |
| normalization     | normalization.py     | kept (rows over static trailing dims); padding zeroed    |
|                   |                      | when weight/bias need a gradient; dynamic dims refused   |
| dropout           | dropout.py           | kept; one draw for the batch (independent per example);  |
|                   |                      | eval mode / p=0 return the input exactly                 |
| embedding         | embedding.py         | ids' mask + a static feature dim; padding ids replaced   |
|                   |                      | by 0 before the lookup; a bag per example: all real      |
| activation        | activations.py       | glu/prelu/normalize keep the mask (the pointwise ones    |
|                   |                      | are core's pointwise family); see the module's table     |
| loss              | losses.py            | 'none': the per-position layout (real where input and    |
|                   |                      | target are); 'sum'/'mean': per-example scalars, dims ()  |
| attention         | attention.py         | the query's mask; padded keys masked, padding zeroed; a  |
|                   |                      | query that sees no key gives 0 (value and gradient)      |
| multihead_attention | multihead_attention.py | the same, on time-major views (TimeMajorBatch);     |
|                   |                      | projections on real rows; weights: dynamic Lq and Lk     |
| time_major        | ../time_major.py     | TimeMajorBatch: transpose(0, 1) back to the batch;       |
|                   |                      | position-wise ops run on the view's batch                |
"""
