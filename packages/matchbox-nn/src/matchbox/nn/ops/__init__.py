"""matchbox-nn's op families, one module each (importing them registers them).

| family    | module             | what happens to the mask                                |
|-----------|--------------------|---------------------------------------------------------|
| linear    | linear.py          | rows keep their mask; padding zeroed for the weight grad |
| recurrent | recurrent_cells.py | a step is real where input and state are real           |
"""
