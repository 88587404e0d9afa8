"""matchbox-nn's op families, one module each (importing them registers them).

| family            | module               | what happens to the mask                                 |
|-------------------|----------------------|----------------------------------------------------------|
| linear            | linear.py            | rows keep their mask; linear runs on the real rows only  |
|                   |                      | (bilinear: real where both inputs are real)              |
| recurrent         | recurrent_cells.py   | a step is real where input and state are real            |
| recurrent_modules | recurrent_modules.py | output keeps the input's mask (only real rows are run);  |
|                   |                      | final states: views (L*D, B, H) of a MaskedBatch of      |
|                   |                      | (1, L*D, H) examples, no mask (a not-real initial state  |
|                   |                      | example: zeros in, its mask out)                         |
|                   | recurrent_loop.py    | in a graph ``matchbox.compile`` captures: a masked loop   |
|                   |                      | over time (packing needs lengths on the host)            |
| convolution       | convolution.py       | padding filled with 0; the mask holds each example's own |
|                   |                      | output size (PyTorch's formula); output grads guarded    |
| pooling           | pooling.py           | max: padding -inf; avg: each example's own window count; |
|                   |                      | adaptive: windows from each example's size, pooled dims  |
|                   |                      | become static                                            |
| padding           | padding.py           | F.pad per example (right pads after each example's end); |
|                   |                      | the mask holds the new sizes                             |
| resampling        | resampling.py        | interpolate/unfold/fold/pixel_(un)shuffle/channel_shuffle:|
|                   |                      | on the data, mask kept; dynamic resampled dims refused   |

``_windows.py`` holds what convolution and pooling share (filling, output sizes,
the empty-output rule for examples shorter than the window).
| softmax           | softmax.py           | kept; over a dynamic dim padding is filled with -inf and |
|                   |                      | the result's padding is 0 (an empty row gives 0, not NaN) |
| normalization     | normalization.py     | kept (rows over static trailing dims); padding zeroed    |
|                   |                      | when weight/bias need a gradient; dynamic dims refused;  |
|                   |                      | group/instance norm: statistics over each example's real |
|                   |                      | positions; batch_norm training: over every real position |
|                   |                      | (packed real rows, torch's own kernel)                   |
| dropout           | dropout.py           | kept; one draw for the batch (independent per example);  |
|                   |                      | eval mode / p=0 return the input exactly                 |
| embedding         | embedding.py         | ids' mask + a static feature dim; padding ids replaced   |
|                   |                      | by 0 before the lookup; a bag per example: all real;     |
|                   |                      | one_hot: a static class dim                              |
| activation        | activations.py       | glu/prelu/normalize keep the mask (the pointwise ones    |
|                   |                      | are core's pointwise family); see the module's table     |
| loss              | losses.py            | 'none': the per-position layout (real where input and    |
|                   |                      | target are); 'sum'/'mean': per-example scalars, dims (); |
|                   |                      | ctc_loss: per-example scalars from the time-major view   |
|                   | metric_losses.py     | triplet/cosine-embedding/margin/hinge/multilabel-soft-   |
|                   |                      | margin, gaussian_nll: PyTorch's formula on core's batch  |
|                   |                      | ops; multi_margin: torch's kernel on the rows (one per   |
|                   |                      | example)                                                 |
| attention         | attention.py         | the query's mask; padded keys masked, padding zeroed; a  |
|                   |                      | query that sees no key gives 0 (value and gradient)      |
| multihead_attention | multihead_attention.py | the same, on time-major views (TimeMajorBatch);     |
|                   |                      | projections on real rows; weights: dynamic Lq and Lk     |
| time_major        | time_major_views.py  | TimeMajorBatch: transpose(0, 1) back to the batch;       |
|                   |                      | position-wise ops run on the view's batch                |
| time_major_shape  | time_major_views.py  | the view's batch indexed/permuted/reshaped/joined with   |
|                   |                      | dims 0 and 1 swapped: a batch if the batch dim comes     |
|                   |                      | first, a view if second, else an error                   |
| time_major_reduction | time_major_views.py | over dim 0 / all: the batch's (batch-major); keepdim:    |
|                   |                      | a view; over the batch dim 1: an error                   |
| time_major_conversion | time_major_views.py | casts, device moves, detach, zeros_like: on the batch    |
"""
