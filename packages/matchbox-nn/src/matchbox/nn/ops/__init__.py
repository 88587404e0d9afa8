"""matchbox-nn's op families, one module each (importing them registers them).

| family            | module               | what happens to the mask                                 |
|-------------------|----------------------|----------------------------------------------------------|
| linear            | linear.py            | rows keep their mask; padding zeroed for the weight grad |
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
"""
